"""campaign: bad input, the plan (heads, overrides, seeds per program, facts), the memory plan,
GPU names, a local campaign end to end, kill/resume equality, and a real Slurm."""

import ast
import functools
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
from lra_luna import config_lib
from lra_luna.campaign import __main__ as command
from lra_luna.campaign import estimate as estimate_lib
from lra_luna.campaign import jobs as jobs_lib
from lra_luna.campaign import launch
from lra_luna.campaign import memory
from lra_luna.campaign import plan as plan_lib
from lra_luna.campaign import spec as spec_lib
from lra_luna.training import run_folder
import tiny  # the shared tiny run (tests/tiny.py)

# ml_collections' config_flags loads config files with the deprecated load_module().
pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')

REPO = pathlib.Path(__file__).resolve().parent.parent
# The shared tiny ListOps run (tests/tiny.py), 60 steps, a checkpoint every 10.
TINY = tiny.overrides(num_train_steps=60, eval_every=30, checkpoint_every=10, log_every=10)


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
  return json.loads((campaign_dir / run_folder.JOBS_FILE).read_text()).get(group, {}).get('job_id') \
      if (campaign_dir / run_folder.JOBS_FILE).exists() else None


def has_checkpoint(campaign_dir, group):
  """Whether every seed of the group has a finished (renamed by orbax) latest checkpoint."""
  return all(run_folder.saved_step(campaign_dir / group / f'seed{s}', 'latest')
             for s in (0, 1))


def kill_local_jobs(campaign_dir) -> None:
  """SIGKILLs the local jobs of a campaign that still run (a failed test leaves none behind)."""
  jobs_path = pathlib.Path(campaign_dir) / run_folder.JOBS_FILE
  jobs = json.loads(jobs_path.read_text()) if jobs_path.exists() else {}
  for entry in jobs.values():
    pid = entry['job_id']
    if entry['launcher'] == 'local' and launch.local_state(pid) == 'running':
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
  assert command.main([str(spec), '--dir', str(tmp_path / 'c')]) == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and expected in err and str(spec) in err
  assert len(err.splitlines()) == 1 and not (tmp_path / 'c').exists()


def test_slurm_launcher_needs_sbatch(tmp_path, env, capsys, monkeypatch):
  monkeypatch.setenv('PATH', str(tmp_path))
  spec = write_spec(tmp_path / 'spec.py')
  assert command.main([str(spec), '--dir', str(tmp_path / 'c'), '--launcher', 'slurm']) == 1
  err = capsys.readouterr().err.strip()
  assert err == ('error: --launcher slurm: sbatch is not on PATH; run the campaign on a Slurm '
                 'login node, or use --launcher local.')
  assert not (tmp_path / 'c' / run_folder.JOBS_DIR).exists()


def test_folder_of_another_spec_is_refused_unless_forced(tmp_path, env, capsys):
  first = campaign.load_spec(write_spec(tmp_path / 'a.py'))
  campaign_dir = tmp_path / 'c'
  run_folder.write_json_atomically(campaign_dir / run_folder.CAMPAIGN_FILE,
                                    {'spec': json.loads(first.to_json()), 'facts': {}})
  # A run folder of the first spec that the second changes (its steps).
  run = plan_lib.plan(first, campaign_dir)[('listops', 'luna16', 'cls')][0]
  run.workdir.mkdir(parents=True)
  (run.workdir / run_folder.CONFIG_FILE).write_text(run.config.to_json())
  second = write_spec(tmp_path / 'b.py', seeds=[0, 1, 2],
                      overrides=[*TINY, 'num_train_steps=70'])
  assert command.main([str(second), '--dir', str(campaign_dir)]) == 1
  err = capsys.readouterr().err.strip()
  assert err == (f"error: {campaign_dir} holds a campaign of another spec (fields ['overrides', "
                 "'seeds'] differ); use another --dir, or --force to adopt this spec (runs whose "
                 'config changed then start anew).')
  assert not (campaign_dir / run_folder.JOBS_DIR).exists()
  # --force adopts it: the changed run starts anew (--report: nothing is trained here).
  command.main([str(second), '--dir', str(campaign_dir), '--force', '--report'])
  assert not run.workdir.exists()
  saved = json.loads((campaign_dir / run_folder.CAMPAIGN_FILE).read_text())
  assert saved['spec']['seeds'] == [0, 1, 2]


def test_facts_use_the_one_definition_of_shortened(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16']))
  groups = plan_lib.plan(spec, tmp_path)
  facts = plan_lib.facts(spec, groups)
  run_config = groups[('listops', 'luna16', 'cls')][0].config
  assert config_lib.shortened_reasons(run_config) == ['quick config', '60 of 5000 steps']
  assert facts['cut_short'] == ['quick config', '60 of 5000 steps', '2 of 5 seeds']
  assert facts['steps'] == {'listops': [(60, 5000)]}
  assert facts['heads'] == ['cls'] and facts['overrides'] == TINY
  full = campaign.load_spec(REPO / 'campaigns' / 'paper_table1.py')
  assert len(full.seeds) == spec_lib.PROTOCOL_SEEDS and not full.variant and not [
      o for o in full.overrides if o.startswith('num_train_steps')]


def test_shortened_facts_name_the_task_where_tasks_differ(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', tasks=['listops', 'pathfinder'],
                                       overrides=['progress_bar=False']))
  short = plan_lib.shortened_facts(plan_lib.plan(spec, tmp_path))
  full = {task: config_lib.load_config(f'configs/{task}.py:luna16').num_train_steps
          for task in ('listops', 'pathfinder')}
  quick = {task: config_lib.load_config(f'configs/{task}.py:luna16,quick').num_train_steps
           for task in ('listops', 'pathfinder')}
  assert short == ['quick config'] + [f'{task} {quick[task]} of {full[task]} steps'
                                      for task in ('listops', 'pathfinder')]


def test_only_the_heads_the_spec_names_are_planned(tmp_path):
  cls_only = campaign.load_spec(write_spec(tmp_path / 'a.py', models=['transformer', 'luna16'],
                                           seeds=[0]))
  assert sorted(plan_lib.plan(cls_only, tmp_path)) == [('listops', 'luna16', 'cls'),
                                                       ('listops', 'transformer', 'cls')]
  both = campaign.load_spec(write_spec(tmp_path / 'b.py', models=['transformer', 'luna16'],
                                       seeds=[0], heads=['cls', 'mean_p']))
  assert sorted(plan_lib.plan(both, tmp_path)) == [
      ('listops', 'luna16', 'cls'), ('listops', 'luna16', 'mean_p'),
      ('listops', 'transformer', 'cls')]


def test_override_reaches_every_run_and_the_spec(tmp_path, env, capsys):
  spec_path = write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16'],
                         profile__enabled=False)
  spec = campaign.load_spec(spec_path)
  spec_lib.add_overrides(spec, ['num_train_steps=40', 'model.dropout=0.2'])
  runs = [run for runs in plan_lib.plan(spec, tmp_path).values() for run in runs]
  assert len(runs) == 4 and {(r.config.num_train_steps, r.config.model.dropout)
                             for r in runs} == {(40, 0.2)}
  assert plan_lib.facts(spec, plan_lib.plan(spec, tmp_path))['overrides'][-2:] == [
      'num_train_steps=40', 'model.dropout=0.2']
  # On the command line: recorded in campaign.json (--report: nothing is trained).
  assert command.main([str(spec_path), '--dir', str(tmp_path / 'c'), '--report',
                       '--override', 'num_train_steps=40']) == 1  # no results yet
  saved = json.loads(run_folder.campaign_file(tmp_path / 'c').read_text())
  assert saved['spec']['overrides'][-1] == 'num_train_steps=40'
  assert '40 of 5000 steps' in saved['facts']['cut_short']


def test_finished_campaign_with_a_current_report_has_nothing_to_do(tmp_path, env, capsys):
  spec_path = write_spec(tmp_path / 'spec.py', profile__enabled=False)
  campaign_dir = tmp_path / 'c'
  for runs in plan_lib.plan(campaign.load_spec(spec_path), campaign_dir).values():
    for run in runs:  # finished runs: their config and results
      run_folder.write_json_atomically(run.workdir / run_folder.CONFIG_FILE,
                                        json.loads(run.config.to_json()))
      run_folder.write_json_atomically(run.workdir / run_folder.RESULTS_FILE, {})
  time.sleep(0.01)
  for name in ('table1.md', 'figure1.png'):
    (run_folder.report_dir(campaign_dir) / name).parent.mkdir(exist_ok=True)
    (run_folder.report_dir(campaign_dir) / name).write_text('made after the runs')
  assert command.main([str(spec_path), '--dir', str(campaign_dir)]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[-1] == ('Nothing to do: every run of this campaign has finished and its report is '
                       f'current. {run_folder.report_dir(campaign_dir)} holds: figure1.png, '
                       'table1.md.')
  assert not run_folder.jobs_file(campaign_dir).exists()  # nothing submitted


def test_estimate_without_a_device_size_is_one_line(tmp_path, env, capsys):
  spec = write_spec(tmp_path / 'spec.py')
  assert command.main([str(spec), '--dir', str(tmp_path / 'c'), '--estimate']) == 1
  err = capsys.readouterr().err.strip()
  assert err == ("error: --estimate: this machine's device reports no memory size; give the "
                 "jobs' with --device_memory_gib, e.g. 80.")
  assert not run_folder.jobs_file(tmp_path / 'c').exists()


@pytest.mark.parametrize('item, expected', [
    ('num_trian_steps=5', "error: --override 'num_trian_steps=5': config.num_trian_steps is no "
                          'config field. Did you mean config.num_train_steps'),
    ('seed=3', "error: --override 'seed=3': expected KEY=VALUE with a key other than seed and "
               'model.head (the spec sets those: seeds, heads).'),
    ('num_train_steps', "error: --override 'num_train_steps': expected KEY=VALUE"),
    ('num_train_steps=abc', "error: --override 'num_train_steps=abc': flag "
                            "--config.num_train_steps=abc: invalid literal for int()"),
])
def test_bad_override_is_one_line(tmp_path, env, capsys, item, expected):
  spec = write_spec(tmp_path / 'spec.py')
  assert command.main([str(spec), '--dir', str(tmp_path / 'c'), '--override', item]) == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith(expected) and len(err.splitlines()) == 1
  assert not (tmp_path / 'c').exists()


def test_estimate_hours_from_steps_per_second_or_flops(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py',
                                       models=['transformer', 'luna16', 'luna128']))
  groups = plan_lib.plan(spec, tmp_path)
  points = [{'model': 'transformer', 'status': 'ok', 'steps_per_s': 2.0, 'flops_per_step': 3e12},
            {'model': 'luna16', 'status': 'oom'}]
  run_folder.write_json_atomically(run_folder.estimate_profile(tmp_path, 'listops'),
                                    {'device': {'device_kind': 'H100'}, 'points': points})
  timed = estimate_lib.estimate_hours(groups, tmp_path, None)
  assert [row[:5] for row in timed] == [('listops', 'transformer', 'cls', 120, 120 / 2.0 / 3600),
                                        ('listops', 'luna16', 'cls', 120, None),
                                        ('listops', 'luna128', 'cls', 120, None)]
  assert [row[5] for row in timed] == ['2.00 steps/s on H100', 'out of memory', 'not profiled']
  from_flops = estimate_lib.estimate_hours(groups, tmp_path, 50.0)  # 3 TFLOP at 50 TFLOP/s
  assert from_flops[0][4] == pytest.approx(120 * 3e12 / 50e12 / 3600)


# ----------------------------------------------------------------------------------------------
# Memory-planned programs: seeds per program, the --estimate plan, halving on out of memory.
# ----------------------------------------------------------------------------------------------
GIB = 2**30


@pytest.mark.parametrize('seed_gib, device_gib, seeds, expected', [
    (38.4, 80, 5, 1),     # 72 GiB usable: one seed of 38.4 GiB per program
    (8.1, 80, 5, 5),      # 8.1 x 5 = 40.5 GiB: all five in one program
    (20, 80, 5, 3),       # floor(72 / 20)
    (100, 80, 5, 1),      # over the device: still one seed (reported as not fitting)
    (None, 80, 5, 5),     # no estimate: one program
    (8, None, 5, 5),      # no device size: one program
])
def test_seeds_per_program(seed_gib, device_gib, seeds, expected):
  to_bytes = lambda gib: None if gib is None else int(gib * GIB)
  assert plan_lib.seeds_per_program(to_bytes(seed_gib), to_bytes(device_gib), seeds) == expected
  if seed_gib and device_gib and seed_gib <= device_gib * plan_lib.MEMORY_HEADROOM:
    assert expected * seed_gib <= device_gib * plan_lib.MEMORY_HEADROOM
    assert (expected + 1) * seed_gib > device_gib * plan_lib.MEMORY_HEADROOM or expected == seeds
  assert plan_lib.split_into_programs([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3], [4]]


def test_estimate_prints_each_groups_memory_plan_and_keeps_the_estimates(tmp_path, capsys):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16'],
                                       seeds=[0, 1, 2, 3, 4]))
  groups = plan_lib.plan(spec, tmp_path)
  compiled = []
  fake = {'transformer': 38 * GIB, 'luna16': 8 * GIB}  # a stubbed compiled estimate

  def estimate(config):
    compiled.append(config.model_name)
    return fake[config.model_name]

  plans = memory.group_memory(groups, tmp_path, 80 * GIB, estimate)
  assert 'listops/transformer/cls: compiling its training step' in capsys.readouterr().out
  assert plans == {'listops/transformer/cls': (1, 38 * GIB, True),
                   'listops/luna16/cls': (1, 8 * GIB, True)}
  assert memory.group_memory(groups, tmp_path, 80 * GIB, estimate) == plans
  assert sorted(compiled) == ['luna16', 'transformer']  # the second call read memory.json
  assert capsys.readouterr().out == ''
  rows = estimate_lib.memory_rows(groups, plans, 80 * GIB)
  assert rows == [('listops/transformer/cls', 1, 38 * GIB, 1, 5, 38 * GIB, True),
                  ('listops/luna16/cls', 1, 8 * GIB, 5, 1, 40 * GIB, True)]
  assert all(largest < 80 * GIB for *_, largest, _ in rows)
  estimate_lib.print_memory_plan(rows, 80 * GIB, 'cpu')
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith('MEMORY PLAN for a device of 80.0 GiB')
  assert lines[2].split() == ['listops/transformer/cls', '1', '38.00', '1', '5', '38.00']
  assert lines[3].split() == ['listops/luna16/cls', '1', '8.00', '5', '1', '40.00']
  assert lines[4] == '  6 programs; every program fits the device.'


def accumulating_estimate(gib_at_one: dict, compiled: list):
  """A stubbed compiled estimate: a model's GiB at one micro-batch, divided by the micro-batches
  (as activations dominate)."""
  def estimate(config):
    compiled.append((config.model_name, config.grad_accumulation_steps))
    return int(gib_at_one[config.model_name] * GIB / config.grad_accumulation_steps)
  return estimate


def test_a_group_whose_seed_does_not_fit_accumulates_its_gradient(tmp_path, capsys):
  """136 GiB at one micro-batch: 68 GiB at two fits 90% of 80 GiB, so two micro-batches; a group
  too big even at the most micro-batches the batch of 8 allows (8) stays DOES NOT FIT."""
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[0, 1, 2, 3, 4],
                                       models=['transformer', 'luna16', 'synthesizer']))
  groups = plan_lib.plan(spec, tmp_path)
  compiled = []
  estimate = accumulating_estimate({'transformer': 136, 'luna16': 8, 'synthesizer': 1000},
                                   compiled)
  plans = memory.group_memory(groups, tmp_path, 80 * GIB, estimate)
  assert plans == {'listops/transformer/cls': (2, 68 * GIB, True),
                   'listops/luna16/cls': (1, 8 * GIB, True),
                   'listops/synthesizer/cls': (8, 125 * GIB, False)}
  # In rounds: every group's own step, then twice the micro-batches for those that did not fit.
  assert compiled == [('transformer', 1), ('luna16', 1), ('synthesizer', 1),
                      ('transformer', 2), ('synthesizer', 2), ('synthesizer', 4),
                      ('synthesizer', 8)]
  assert 'transformer/cls: compiling its training step with 2 micro-batches' in \
      capsys.readouterr().out
  saved = json.loads(run_folder.memory_file(tmp_path).read_text())
  assert saved['listops/transformer/cls:grad_accumulation_steps=2']['config'] != \
      saved['listops/transformer/cls']['config']  # the key includes the accumulation
  assert memory.group_memory(groups, tmp_path, 80 * GIB, estimate) == plans
  assert len(compiled) == 7  # all read from memory.json
  rows = estimate_lib.memory_rows(groups, plans, 80 * GIB)
  assert rows[0] == ('listops/transformer/cls', 2, 68 * GIB, 1, 5, 68 * GIB, True)
  estimate_lib.print_memory_plan(rows, 80 * GIB, 'cpu')
  lines = capsys.readouterr().out.splitlines()
  assert lines[2].split() == ['listops/transformer/cls', '2', '68.00', '1', '5', '68.00']
  assert lines[4].split()[:2] == ['listops/synthesizer/cls', '8'] and 'DOES NOT FIT' in lines[4]
  assert lines[5] == ('  11 programs; 2 groups accumulate their gradient; 1 groups exceed the '
                      'device even with one seed at the most micro-batches (they run one seed '
                      'per program and may fail: use a larger device, or shorter sequences)')


@pytest.mark.parametrize('start, batch, expected', [(1, 32, [1, 2, 4, 8, 16, 32]),
                                                     (1, 24, [1, 2, 4, 8]), (1, 5, [1]),
                                                     (2, 8, [2, 4, 8])])
def test_accumulation_steps_to_try_divide_the_batch(start, batch, expected):
  assert plan_lib.accumulation_steps_to_try(start, batch) == expected


def test_group_too_big_for_the_device_is_flagged(tmp_path, capsys):
  rows = [('text/transformer/cls', 32, 136 * GIB, 1, 5, 136 * GIB, False)]
  estimate_lib.print_memory_plan(rows, 80 * GIB, 'cpu')
  out = capsys.readouterr().out
  assert 'DOES NOT FIT' in out and '1 groups exceed the device even with one seed' in out


class FakeRun:
  def __init__(self, seed):
    self.seed, self.name = seed, f'listops/transformer/cls/seed{seed}'


def test_a_program_out_of_memory_is_retried_with_half_the_seeds():
  runs = [FakeRun(s) for s in range(5)]
  programs = []

  def run_vmapped(program):  # fits 2 seeds; seed 4 fails for another reason
    programs.append([run.seed for run in program])
    if len(program) > 2:
      return [(run, 'JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating') for run in
              program]
    return [(run, 'ValueError: bad data') for run in program if run.seed == 4]

  failures = jobs_lib.train_programs(runs, 5, run_vmapped)
  assert programs == [[0, 1, 2, 3, 4], [0, 1, 2], [0, 1], [2], [3, 4]]
  assert [(run.seed, reason) for run, reason in failures] == [(4, 'ValueError: bad data')]
  # One seed that does not fit is a failure, not retried forever.
  alone = jobs_lib.train_programs(runs[:1], 1, lambda program: [
      (run, 'RESOURCE_EXHAUSTED') for run in program])
  assert [run.seed for run, _ in alone] == [0]


def test_group_job_plans_its_programs_against_the_device(tmp_path, monkeypatch, capsys):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[0, 1, 2, 3, 4]))
  runs = plan_lib.plan(spec, tmp_path)[('listops', 'luna16', 'cls')]
  monkeypatch.setattr(memory, 'vmapped_step_bytes', lambda config: int(0.4 * GIB))
  calls = []
  monkeypatch.setattr(jobs_lib, 'train_programs',
                      lambda todo, per_program: calls.append(([r.seed for r in todo],
                                                               per_program)) or [])
  job = jobs_lib.GroupJob(runs[0].spec, 'cls', [0, 1, 2, 3, 4], list(spec.overrides),
                          str(tmp_path), device_memory_gib=1.0)
  assert job() == [run.name for run in runs]
  assert calls == [([0, 1, 2, 3, 4], 2)]  # floor(0.9 x 1 GiB / 0.4 GiB)
  assert '5 seeds, 0.40 GiB each (compiled estimate), on a device of 1.0 GiB: 2 per program.' \
      in capsys.readouterr().out


def test_group_job_accumulates_where_one_seed_does_not_fit(tmp_path, monkeypatch, capsys):
  """2 GiB at one micro-batch on a 1 GiB device: four micro-batches (0.5 GiB), passed to the runs
  as the override grad_accumulation_steps=4, which their run record lists and which does not
  shorten them."""
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[0, 1]))
  runs = plan_lib.plan(spec, tmp_path)[('listops', 'luna16', 'cls')]
  monkeypatch.setattr(memory, 'vmapped_step_bytes', accumulating_estimate({'luna16': 2}, []))
  calls = []
  monkeypatch.setattr(jobs_lib, 'train_programs',
                      lambda todo, per_program: calls.append((todo, per_program)) or [])
  job = jobs_lib.GroupJob(runs[0].spec, 'cls', [0, 1], list(spec.overrides), str(tmp_path),
                          device_memory_gib=1.0)
  assert job() == [run.name for run in runs]
  (todo, per_program), = calls
  assert per_program == 1 and [run.seed for run in todo] == [0, 1]
  assert all(run.config.grad_accumulation_steps == 4 for run in todo)
  assert todo[0].workdir == runs[0].workdir
  record = config_lib.run_record(todo[0].config)
  assert 'grad_accumulation_steps=4' in record['overrides']
  assert record['shortened'] == config_lib.shortened_reasons(runs[0].config)
  assert '2 seeds, 0.50 GiB each (compiled estimate, 4 micro-batches), on a device of 1.0 GiB: ' \
      '1 per program.' in capsys.readouterr().out
  # A run folder written with one micro-batch is the same run (resumed, not refused).
  assert run_folder.config_differences(json.loads(runs[0].config.to_json()), todo[0].config) == []


def test_vmapped_step_estimate_grows_with_the_seeds_and_the_quick_one_is_exact(tmp_path):
  """Luna's mean_p group at two micro-batches: the estimate (the state's shapes traced, LLVM at
  level 0) is the same bytes as the model initialised and compiled with XLA's defaults, and
  grows with the vmapped seeds."""
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', heads=['mean_p'], seeds=[0]))
  config = plan_lib.plan(spec, tmp_path)[('listops', 'luna16', 'mean_p')][0].config
  config = memory.with_accumulation(config, 2)
  one, two = memory.vmapped_step_bytes(config, 1), memory.vmapped_step_bytes(config, 2)
  assert one > 0 and 1.8 * one < two < 2.2 * one
  assert memory.vmapped_step_bytes(config, 1, quick=False) == one


def test_a_step_that_groups_share_compiles_once_in_every_round(tmp_path, capsys):
  """Two groups of one config (one compiled step): one compile per round, both planned; the
  second round (two micro-batches) compiles only the steps of the groups that did not fit."""
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[0, 1],
                                       models=['transformer', 'luna16']))
  groups = plan_lib.plan(spec, tmp_path)
  groups[('text', 'transformer', 'cls')] = groups[('listops', 'transformer', 'cls')]
  groups[('text', 'luna16', 'cls')] = groups[('listops', 'luna16', 'cls')]
  compiled = []
  estimate = accumulating_estimate({'transformer': 100, 'luna16': 8}, compiled)
  plans = memory.group_memory(groups, tmp_path, 80 * GIB, estimate)
  assert compiled == [('transformer', 1), ('luna16', 1), ('transformer', 2)]
  assert plans == {'listops/transformer/cls': (2, 50 * GIB, True),
                   'listops/luna16/cls': (1, 8 * GIB, True),
                   'text/transformer/cls': (2, 50 * GIB, True),
                   'text/luna16/cls': (1, 8 * GIB, True)}
  assert list(plans) == [plan_lib.group_name(key) for key in groups]
  assert capsys.readouterr().out.count('compiling its training step') == 3
  saved = json.loads(run_folder.memory_file(tmp_path).read_text())
  assert saved['text/transformer/cls:grad_accumulation_steps=2']['seed_bytes'] == 50 * GIB
  # The workers' list of steps: each config once, with every group of it.
  todo = memory.distinct_steps([(name, runs[0].config) for name, runs in
                                [(plan_lib.group_name(k), r) for k, r in groups.items()]],
                               memory.EstimateCache(tmp_path / 'other', shared=False))
  assert [names for names, _ in todo] == [['listops/transformer/cls', 'text/transformer/cls'],
                                          ['listops/luna16/cls', 'text/luna16/cls']]


def test_the_first_steps_compile_in_parallel_with_progress_and_match_one_at_a_time(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setenv('LRA_CACHE_DIR', str(tmp_path / 'cache'))
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16'],
                                       seeds=[0]))
  groups = plan_lib.plan(spec, tmp_path)
  parallel = memory.group_memory(groups, tmp_path / 'a', 80 * GIB, workers=2)
  out = capsys.readouterr().out
  assert 'Compiling 2 training steps for their memory estimates, 2 at a time' in out
  assert '[2/2]' in out and 'left' in out
  # One at a time, in this process (a wrapper: not the shared cache's own estimate).
  sequential = memory.group_memory(groups, tmp_path / 'b', 80 * GIB,
                                   estimate=lambda c: memory.vmapped_step_bytes(c))
  assert parallel == sequential


def test_the_estimate_says_what_it_times_before_it_starts(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16'],
                                       profile__repeats=10, profile__warmup=2))
  cpu = estimate_lib.timing_plan(spec, 'cpu', None)
  assert '2 full-size steps (1 tasks x 2 models), 2 warm-up and 10 timed runs each (24 steps)' \
      in cpu
  assert 'this takes hours' in cpu and '--memory_only' in cpu and '--assume_tflops' in cpu
  assert 'hours' not in estimate_lib.timing_plan(spec, 'gpu', None)
  assert 'lowered, not compiled or run' in estimate_lib.timing_plan(spec, 'cpu', 100.0)


def test_a_head_skipped_for_some_models_is_said(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'a.py', seeds=[0], heads=['cls', 'mean_p'],
                                       models=['transformer', 'luna16', 'performer']))
  assert plan_lib.skipped_heads(spec) == [
      'head mean_p is skipped for transformer, performer (they pool cls, mean only; mean_p '
      'needs a Luna model).']
  assert plan_lib.skipped_heads(campaign.load_spec(write_spec(tmp_path / 'b.py'))) == []


@pytest.mark.parametrize('path', sorted((REPO / 'campaigns').glob('*.py')), ids=lambda p: p.stem)
def test_every_ready_spec_loads_and_names_configs_that_build(path):
  """Each campaigns/*.py passes the spec checks, and each of its (task, model) configs builds
  with its variant and protocol words (what a run of the campaign would load first)."""
  spec = spec_lib.load_spec(path)
  for task in spec.tasks:
    for model in spec.models[:2]:
      config = config_lib.load_config(spec_lib.config_spec(task, model, spec.protocol,
                                                           spec.variant))
      config_lib.validate(config)
      assert config.task == task and config.model_name == model.partition('+')[0]
