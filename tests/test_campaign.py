"""campaign: bad input, a local campaign end to end, kill/resume equality, and a real Slurm."""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from lra_luna import campaign
from lra_luna.training import run_folder

# ml_collections' config_flags loads config files with the deprecated load_module().
pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')

REPO = pathlib.Path(__file__).resolve().parent.parent
# quick.py shortened: ListOps only, 300 examples, one layer, 60 steps, a checkpoint every 10.
TINY = ['progress_bar=False', 'num_train_steps=60', 'warmup_steps=5', 'eval_every=30',
        'checkpoint_every=10', 'log_every=10', 'listops.num_train=300', 'listops.num_val=50',
        'listops.num_test=50', 'eval_batch_size=50', 'model.num_layers=1']


def write_spec(path, **fields) -> pathlib.Path:
  """A spec file: campaigns/quick.py shortened (ListOps, Luna-16, TINY, a one-point profile),
  then `fields`."""
  settings = {'tasks': ['listops'], 'models': ['luna16'], 'overrides': TINY,
              'profile.models': ['luna16'],
              'profile.lengths': [16], 'profile.repeats': 1, 'profile.warmup': 0, **fields}
  lines = ['from lra_luna import campaign', '', 'def get_config():',
           f'  c = campaign.load_spec({str(REPO / "campaigns" / "quick.py")!r})']
  lines += [f'  c.{key.replace("__", ".")} = {value!r}' for key, value in settings.items()]
  path.write_text('\n'.join(lines + ['  return c', '']))
  return path


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  """One data root for every campaign here: results.json records the data's path."""
  return tmp_path_factory.mktemp('data')


def driver_env(data_dir) -> dict:
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', 'LRA_DATA_DIR': str(data_dir), 'CI': '1'}


@pytest.fixture
def env(data_dir, monkeypatch):
  """The driver's environment: CPU, the shared data root, no progress bars."""
  variables = {'JAX_PLATFORMS': 'cpu', 'LRA_DATA_DIR': str(data_dir), 'CI': '1',
               'PYTHONPATH': os.environ.get('PYTHONPATH', '')}  # main() extends PYTHONPATH
  for key, value in variables.items():
    monkeypatch.setenv(key, value)
  return {**os.environ, **variables}


DRIVERS = []  # driver processes started by a test, for the `stop` fixture


def driver(spec, campaign_dir, *extra, env):
  """The campaign driver as its own process (so that it can be killed)."""
  command = [sys.executable, '-m', 'lra_luna.campaign', str(spec), '--dir', str(campaign_dir),
             '--poll_s', '0.2', *extra]
  DRIVERS.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True))
  return DRIVERS[-1]


def finish(process, timeout=600) -> str:
  output, _ = process.communicate(timeout=timeout)
  assert process.returncode == 0, output
  return output


def results(campaign_dir) -> dict:
  """{run folder relative to the campaign: its results.json}."""
  return {str(p.parent.relative_to(campaign_dir)): json.loads(p.read_text())
          for p in sorted(pathlib.Path(campaign_dir).rglob(run_folder.RESULTS_FILE))}


def wait_for(condition, what: str, timeout=300):
  start = time.time()
  while not condition():
    assert time.time() - start < timeout, f'timed out waiting for {what}'
    time.sleep(0.05)


def job_of(campaign_dir, group: str):
  return json.loads((campaign_dir / campaign.JOBS_FILE).read_text()).get(group, {}).get('job_id') \
      if (campaign_dir / campaign.JOBS_FILE).exists() else None


def has_checkpoint(campaign_dir, group):
  """Whether every seed of the group has a finished (renamed by orbax) latest checkpoint."""
  return all(run_folder.saved_step(campaign_dir / group / f'seed{s}', 'latest')
             for s in (0, 1))


def kill_local_jobs(campaign_dir) -> None:
  """SIGKILLs the local jobs of a campaign that still run (a failed test leaves none behind)."""
  jobs_path = pathlib.Path(campaign_dir) / campaign.JOBS_FILE
  jobs = json.loads(jobs_path.read_text()) if jobs_path.exists() else {}
  for entry in jobs.values():
    pid = entry['job_id']
    if entry['launcher'] == 'local' and campaign.local_state(pid) == 'running':
      children = pathlib.Path(f'/proc/{pid}/task/{pid}/children').read_text().split()
      for child in [*children, pid]:
        try:
          os.kill(int(child), signal.SIGKILL)
        except ProcessLookupError:
          pass


@pytest.fixture
def stop():
  """stop(campaign_dir) -> campaign_dir, whose driver (started by `driver`) and local jobs are
  killed at the end of the test."""
  folders = []
  yield lambda folder: folders.append(folder) or folder
  for process in DRIVERS:
    if process.poll() is None:
      process.kill()
      process.communicate()
  DRIVERS.clear()
  for folder in folders:
    kill_local_jobs(folder)


# ----------------------------------------------------------------------------------------------
# Bad input: one line, nothing submitted.
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('field, value, expected', [
    ('tasks', ['listops', 'lisops'], "tasks 'lisops' is unknown"),
    ('models', ['luna17'], "models 'luna17' is unknown"),
    ('heads', ['pooled'], "heads 'pooled' is unknown"),
    ('protocol', 'authors', "protocol 'authors' is unknown"),
    ('seed', [0], 'seed'),  # a misspelt field
])
def test_bad_spec_is_one_line(tmp_path, env, capsys, field, value, expected):
  spec = write_spec(tmp_path / 'spec.py', **{field: value})
  assert campaign.main([str(spec), '--dir', str(tmp_path / 'c')]) == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and expected in err and str(spec) in err
  assert len(err.splitlines()) == 1 and not (tmp_path / 'c').exists()


def test_slurm_launcher_needs_sbatch(tmp_path, env, capsys, monkeypatch):
  monkeypatch.setenv('PATH', str(tmp_path))
  spec = write_spec(tmp_path / 'spec.py')
  assert campaign.main([str(spec), '--dir', str(tmp_path / 'c'), '--launcher', 'slurm']) == 1
  err = capsys.readouterr().err.strip()
  assert err == ('error: --launcher slurm: sbatch is not on PATH; run the campaign on a Slurm '
                 'login node, or use --launcher local.')
  assert not (tmp_path / 'c' / campaign.JOBS_DIR).exists()


def test_folder_of_another_spec_is_refused_unless_forced(tmp_path, env, capsys):
  first = campaign.load_spec(write_spec(tmp_path / 'a.py'))
  campaign_dir = tmp_path / 'c'
  run_folder.write_json_atomically(campaign_dir / campaign.SPEC_FILE,
                                    {'spec': json.loads(first.to_json()), 'facts': {}})
  # A run folder of the first spec that the second changes (its steps).
  run = campaign.plan(first, campaign_dir)[('listops', 'luna16', 'cls')][0]
  run.workdir.mkdir(parents=True)
  (run.workdir / run_folder.CONFIG_FILE).write_text(run.config.to_json())
  second = write_spec(tmp_path / 'b.py', seeds=[0, 1, 2],
                      overrides=[*TINY, 'num_train_steps=70'])
  assert campaign.main([str(second), '--dir', str(campaign_dir)]) == 1
  err = capsys.readouterr().err.strip()
  assert err == (f"error: {campaign_dir} holds a campaign of another spec (fields ['overrides', "
                 "'seeds'] differ); use another --dir, or --force to adopt this spec (runs whose "
                 'config changed then start anew).')
  assert not (campaign_dir / campaign.JOBS_DIR).exists()
  # --force adopts it: the changed run starts anew (--report: nothing is trained here).
  campaign.main([str(second), '--dir', str(campaign_dir), '--force', '--report'])
  assert not run.workdir.exists()
  saved = json.loads((campaign_dir / campaign.SPEC_FILE).read_text())
  assert saved['spec']['seeds'] == [0, 1, 2]


def test_cut_short_facts(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py'))
  facts = campaign.cut_short_facts(spec, campaign.plan(spec, tmp_path))
  assert facts['cut_short'] == ['quick configs (smaller data and models)',
                                'listops 60 of 5000 steps', '2 of 5 seeds']
  full = campaign.load_spec(REPO / 'campaigns' / 'paper_table1.py')
  assert len(full.seeds) == campaign.PROTOCOL_SEEDS and not full.variant and not [
      o for o in full.overrides if o.startswith('num_train_steps')]


def test_estimate_hours_from_steps_per_second_or_flops(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py',
                                       models=['transformer', 'luna16', 'luna128']))
  groups = campaign.plan(spec, tmp_path)
  points = [{'model': 'transformer', 'status': 'ok', 'steps_per_s': 2.0, 'flops_per_step': 3e12},
            {'model': 'luna16', 'status': 'oom'}]
  run_folder.write_json_atomically(tmp_path / campaign.ESTIMATE_DIR / 'listops' / 'profile.json',
                                    {'device': {'device_kind': 'H100'}, 'points': points})
  timed = campaign.estimate_hours(groups, tmp_path, None)
  assert [row[:5] for row in timed] == [('listops', 'transformer', 'cls', 120, 120 / 2.0 / 3600),
                                        ('listops', 'luna16', 'cls', 120, None),
                                        ('listops', 'luna128', 'cls', 120, None)]
  assert [row[5] for row in timed] == ['2.00 steps/s on H100', 'out of memory', 'not profiled']
  from_flops = campaign.estimate_hours(groups, tmp_path, 50.0)  # 3 TFLOP at 50 TFLOP/s
  assert from_flops[0][4] == pytest.approx(120 * 3e12 / 50e12 / 3600)


# ----------------------------------------------------------------------------------------------
# The local launcher end to end; SIGKILL a job, then the driver; a job that fails twice.
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def reference(tmp_path_factory, data_dir):
  """An uninterrupted local campaign of the shortened quick spec: (its folder, its output)."""
  root = tmp_path_factory.mktemp('reference')
  spec = write_spec(root / 'spec.py')
  output = finish(driver(spec, root / 'c', env=driver_env(data_dir)))
  return root / 'c', output


def test_local_campaign_writes_the_report(reference):
  campaign_dir, output = reference
  assert len(results(campaign_dir)) == 2  # listops x luna16 x seeds 0, 1
  report_dir = campaign_dir / campaign.REPORT_DIR
  for name in ('table1.md', 'table1.tex', 'table1.csv', 'table3.md', 'table2.md', 'table2.tex',
               'profile.json', 'figure1.png', 'figure1.pdf'):
    assert (report_dir / name).stat().st_size > 0, name
  caption = (report_dir / 'table1.md').read_text().splitlines()[0]
  assert 'protocol lra' in caption and 'training steps: ListOps 60' in caption
  assert 'ListOps: generated' in caption
  assert ('CUT SHORT: quick configs (smaller data and models); listops 60 of 5000 steps; '
          '2 of 5 seeds.') in caption
  csv_lines = (report_dir / 'table1.csv').read_text().splitlines()
  assert csv_lines[0].endswith(',campaign')
  assert all(('CUT SHORT' in line) == (',ours,' in line) for line in csv_lines[1:])


def test_status_lists_every_run(reference, env):
  campaign_dir, _ = reference
  spec = campaign_dir.parent / 'spec.py'
  status = subprocess.run([sys.executable, '-m', 'lra_luna.campaign', str(spec), '--dir',
                           str(campaign_dir), '--status'], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True).stdout.splitlines()
  rows = [line.split() for line in status[1:]]
  runs = {row[0]: row for row in rows if row[0].startswith('listops/')}
  assert sorted(runs) == ['listops/luna16/cls/seed0', 'listops/luna16/cls/seed1']
  for name, row in runs.items():
    best = max(r['val_accuracy'] for r in run_folder.read_jsonl(
        campaign_dir / name / run_folder.METRICS_FILE) if 'val_accuracy' in r)
    assert row[1:3] == ['done', '60/60'] and float(row[3]) == pytest.approx(best, abs=1e-4)
  assert rows[-1][-1] == 'done'  # the profile


def test_killed_job_and_killed_driver_give_the_same_results(reference, tmp_path, env, stop):
  campaign_dir = stop(tmp_path / 'c')
  spec = write_spec(tmp_path / 'spec.py', profile__enabled=False)
  process = driver(spec, campaign_dir, env=env)
  # SIGKILL the job's training process once it has a checkpoint: the driver resubmits it.
  group = 'listops/luna16/cls'
  wait_for(lambda: has_checkpoint(campaign_dir, group), 'a checkpoint')
  killed = job_of(campaign_dir, group)
  children = pathlib.Path(f'/proc/{killed}/task/{killed}/children').read_text().split()
  os.kill(int(children[0]), signal.SIGKILL)
  # Then SIGKILL the driver once the job is resubmitted; the rerun waits for that job.
  wait_for(lambda: job_of(campaign_dir, group) != killed, 'the resubmitted job')
  process.kill()
  process.communicate()
  finish(driver(spec, campaign_dir, env=env))
  assert results(campaign_dir) == results(reference[0])
  # The resubmitted job resumed the killed one's runs from their checkpoints.
  jobs_dir = campaign_dir / campaign.JOBS_DIR
  first = campaign.log_path(jobs_dir, killed).with_suffix('.out').read_text()
  second = campaign.log_path(jobs_dir, job_of(campaign_dir, group)).with_suffix('.out')
  assert 'seeds [0, 1]: ' in first and 'starting at step 0 of 60' in first
  assert 'starting at step ' in second.read_text()
  assert 'starting at step 0 of 60' not in second.read_text()


def test_job_failing_twice_is_reported(tmp_path, env, stop):
  # The quick ListOps config on release data that is not there: the job itself fails.
  spec = write_spec(tmp_path / 'spec.py', profile__enabled=False,
                    overrides=[*TINY, 'data_source=release'])
  process = driver(spec, stop(tmp_path / 'c'), env=env)
  output, _ = process.communicate(timeout=600)
  assert process.returncode == 1, output
  job = job_of(tmp_path / 'c', 'listops/luna16/cls')
  assert output.count('listops/luna16/cls: submitted job') == 2
  assert '1 jobs failed twice:' in output
  last = output.strip().splitlines()[-1]
  log = campaign.log_path(tmp_path / 'c' / campaign.JOBS_DIR, job)
  assert last.startswith('  listops/luna16/cls: ') and last.endswith(f'(log {log})')
  assert 'RuntimeError: listops/luna16/cls/seed0' in last  # the job's own error line


# ----------------------------------------------------------------------------------------------
# A real single-node Slurm (Debian's slurm-wlm): slurmctld and slurmd on this machine, munge.
# ----------------------------------------------------------------------------------------------
SLURM_CONF = """ClusterName=lra_luna_test
SlurmctldHost={host}
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=2
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start_slurm(root: pathlib.Path) -> tuple[dict, list]:
  """Starts munged (if not running), slurmctld and slurmd with a config in root; returns (the
  environment that points Slurm's commands at it, the pid files of the daemons started).
  Installs slurm-wlm and munge with apt-get if missing. pytest.skip with the reason otherwise."""
  if sys.platform != 'linux' or os.geteuid() != 0:
    pytest.skip('a local Slurm needs Linux and root (to run slurmd and munged)')
  if not (shutil.which('slurmctld') and shutil.which('munged')):
    if not shutil.which('apt-get'):
      pytest.skip('slurm-wlm is not installed and there is no apt-get to install it')
    install = subprocess.run('apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get '
                             'install -y -qq slurm-wlm munge', shell=True, capture_output=True,
                             text=True, timeout=900)
    if install.returncode:
      pytest.skip(f'apt-get install slurm-wlm munge failed: {install.stderr.strip()[-300:]}')
  started = []
  if subprocess.run(['pgrep', '-x', 'munged'], capture_output=True).returncode:
    if not pathlib.Path('/etc/munge/munge.key').exists():
      subprocess.run(['mungekey', '--create'], capture_output=True)
    pathlib.Path('/run/munge').mkdir(parents=True, exist_ok=True)
    munged = subprocess.run(['munged', '--force'], capture_output=True, text=True)
    if munged.returncode:
      pytest.skip(f'munged does not start: {munged.stderr.strip()}')
    started.append(pathlib.Path('/run/munge/munged.pid'))
  for folder in ('state', 'spool'):
    (root / folder).mkdir(parents=True, exist_ok=True)
  conf = root / 'slurm.conf'
  conf.write_text(SLURM_CONF.format(host=socket.gethostname(), root=root, cpus=os.cpu_count()))
  env = {**os.environ, 'SLURM_CONF': str(conf)}
  for daemon in ('slurmctld', 'slurmd'):
    result = subprocess.run([daemon, '-f', str(conf)], env=env, capture_output=True, text=True)
    if result.returncode:
      pytest.skip(f'{daemon} does not start: {result.stderr.strip()}')
    started.append(root / f'{daemon}.pid')
  deadline = time.time() + 60
  while 'idle' not in subprocess.run(['sinfo', '-h', '-o', '%T'], env=env, capture_output=True,
                                     text=True).stdout:
    if time.time() > deadline:
      stop_daemons(started)
      log = (root / 'slurmd.log').read_text()[-300:] if (root / 'slurmd.log').exists() else ''
      pytest.skip(f'the local Slurm node never became idle; slurmd.log ends: {log}')
    time.sleep(0.5)
  return env, started


def stop_daemons(pid_files) -> None:
  for pid_file in reversed(pid_files):
    try:
      os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
    except (OSError, ValueError, IndexError):
      pass


@pytest.fixture(scope='module')
def slurm(tmp_path_factory, data_dir):
  """The environment of a running single-node Slurm (SLURM_CONF), torn down afterwards."""
  root = tmp_path_factory.mktemp('slurm')
  env, started = start_slurm(root)
  env = {**driver_env(data_dir), 'SLURM_CONF': env['SLURM_CONF']}
  yield env
  subprocess.run(['scancel', '--user', 'root'], env=env, capture_output=True)
  stop_daemons(started)


def squeue(env) -> list:
  listing = subprocess.run(['squeue', '-h', '-o', '%i %T'], env=env, capture_output=True,
                           text=True, check=True).stdout
  return [line.split() for line in listing.splitlines()]


def test_slurm_rejection_is_slurms_own_message(tmp_path, slurm):
  spec = write_spec(tmp_path / 'spec.py', profile__enabled=False)
  process = driver(spec, tmp_path / 'c', '--launcher', 'slurm', '--gpus_per_job', '0',
                   '--partition', 'no_such_partition', env=slurm)
  output, _ = process.communicate(timeout=300)
  assert process.returncode == 1
  assert output.strip().splitlines()[-1] == (
      'error: Slurm rejected the job: sbatch: error: invalid partition specified: '
      'no_such_partition sbatch: error: Batch job submission failed: Invalid partition name '
      'specified')
  assert squeue(slurm) == [] and not (tmp_path / 'c' / campaign.JOBS_FILE).exists()


def test_slurm_campaign_survives_scancel(tmp_path, slurm):
  spec = write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16'],
                    profile__enabled=False)
  campaign_dir = tmp_path / 'c'
  arguments = ('--launcher', 'slurm', '--gpus_per_job', '0', '--cpus_per_job', '1')
  process = driver(spec, campaign_dir, *arguments, env=slurm)
  # scancel the first group's job once it runs: the driver resubmits it, and it resumes.
  group = 'listops/transformer/cls'
  wait_for(lambda: job_of(campaign_dir, group) and [job_of(campaign_dir, group), 'RUNNING']
           in squeue(slurm), 'a running Slurm job')
  cancelled = job_of(campaign_dir, group)
  subprocess.run(['scancel', cancelled], env=slurm, check=True)
  output, _ = process.communicate(timeout=600)
  assert process.returncode == 0, output
  assert f'{group}: job {cancelled} failed' in output and job_of(campaign_dir, group) != cancelled
  assert len(results(campaign_dir)) == 4  # every run finished
  # Rerunning the same command finds everything done: nothing is submitted.
  rerun = finish(driver(spec, campaign_dir, *arguments, env=slurm))
  assert 'submitted' not in rerun and squeue(slurm) == []


def test_the_authors_grid_runs_each_task_with_its_own_head_on_the_paper_protocol(tmp_path):
  spec = campaign.load_spec(REPO / 'campaigns' / 'paper_table1_authors.py')
  groups = campaign.plan(spec, tmp_path)
  configs = {key: runs[0].config for key, runs in groups.items()}
  assert {c.protocol for c in configs.values()} == {'paper'}
  assert configs[('pathfinder', 'luna16', 'mean')].model.mean_includes_cls
  assert configs[('listops', 'luna16', 'cls')].num_train_steps == 5000
  assert {key[2] for key in configs} == {'cls', 'mean'}
  assert len(groups) == len(spec.tasks) * len(spec.models)
