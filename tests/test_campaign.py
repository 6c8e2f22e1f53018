"""campaign: bad input, the plan (heads, overrides, seeds per program, facts), the memory plan,
GPU names, a local campaign end to end, kill/resume equality, and a real Slurm."""

import ast
import functools
import json
import os
import pathlib
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from lra_luna import campaign
from lra_luna import config_lib
from lra_luna import registry
from lra_luna import spt
from lra_luna import sweep
from lra_luna.campaign import __main__ as command
from lra_luna.campaign import driver as driver_lib
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
  assert config_lib.config_differences(json.loads(runs[0].config.to_json()), todo[0].config) == []


def test_vmapped_step_estimate_grows_with_the_seeds(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[0]))
  config = plan_lib.plan(spec, tmp_path)[('listops', 'luna16', 'cls')][0].config
  one, two = memory.vmapped_step_bytes(config, 1), memory.vmapped_step_bytes(config, 2)
  assert one > 0 and 1.8 * one < two < 2.2 * one


# ----------------------------------------------------------------------------------------------
# GPUs: jobs get the user's CUDA_VISIBLE_DEVICES entries (indices or UUIDs), not 0..n-1.
# ----------------------------------------------------------------------------------------------
def test_local_jobs_keep_the_users_gpu_names(tmp_path, monkeypatch):
  monkeypatch.setenv('CUDA_VISIBLE_DEVICES', 'GPU-8a1f2c3d, 3')
  launcher = launch.LocalLauncher(tmp_path, 0, 10)
  assert launcher.gpus == ['GPU-8a1f2c3d', '3'] and launcher.max_jobs == 2
  assert launcher.free_slot({}) == 'GPU-8a1f2c3d'
  assert launcher.free_slot({'a': {'gpu': 'GPU-8a1f2c3d'}}) == '3'
  assert launcher.free_slot({'a': {'gpu': 'GPU-8a1f2c3d'}, 'b': {'gpu': '3'}}) is False
  assert launch.local_gpu_parameters('3')['setup'] == ['export CUDA_VISIBLE_DEVICES=3']
  monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
  assert launch.visible_gpus() == []


def test_a_local_job_sees_its_gpu_by_the_users_name(tmp_path, monkeypatch):
  monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '5,GPU-8a1f2c3d')
  launcher = launch.LocalLauncher(tmp_path, 0, 10)
  job_id = launcher.submit(functools.partial(os.getenv, 'CUDA_VISIBLE_DEVICES'),
                           launcher.free_slot({'a': {'gpu': '5'}}))
  assert launcher.children[job_id].result() == 'GPU-8a1f2c3d'


# ----------------------------------------------------------------------------------------------
# Each fact once: PROTOCOLS in protocols.py, the run-folder layout in run_folder.py.
# ----------------------------------------------------------------------------------------------
LAYOUT_NAMES = [value for name, value in vars(run_folder).items()
                if name.isupper() and isinstance(value, str)]
LAYOUT_FILES = [name for name in LAYOUT_NAMES if '.' in name]


def layout_spellings(path: pathlib.Path) -> list[str]:
  """'line: text' of each place a source spells a run-folder layout name itself: a string that
  is a file name of the layout (or a path ending in one), or a path joined with `/ 'name'`."""
  tree = ast.parse(path.read_text())
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and not any(
        c.isspace() for c in node.value):
      if any(node.value == name or node.value.endswith(f'/{name}') for name in LAYOUT_FILES):
        found.append(f'{node.lineno}: {node.value!r}')
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)
        and node.right.value.split('/')[0] in LAYOUT_NAMES):
      found.append(f'{node.lineno}: / {node.right.value!r}')
  return found


def test_protocols_and_the_run_folder_layout_are_defined_once():
  sources = sorted((REPO / 'lra_luna').rglob('*.py'))
  protocols = [f'{path.relative_to(REPO)}:{node.lineno}' for path in sources
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                   isinstance(t, ast.Name) and t.id == 'PROTOCOLS'
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
  assert len(protocols) == 1 and protocols[0].startswith('lra_luna/protocols.py:'), protocols
  spelled = {str(path.relative_to(REPO)): layout_spellings(path) for path in sources
             if path.name != 'run_folder.py'}
  spelled = {path: lines for path, lines in spelled.items() if lines}
  assert not spelled, ('run-folder layout names spelled outside lra_luna/training/run_folder.py '
                       f'(use its constants and path functions): {spelled}')


def test_layout_check_catches_a_spelled_name(tmp_path):
  source = tmp_path / 'bad.py'
  source.write_text("import pathlib\nA = pathlib.Path('x') / 'profile.json'\n"
                    "B = f'{A}/results.json'\nC = pathlib.Path('x') / 'jobs'\n"
                    "D = 'no results.json here'\n")
  assert sorted(layout_spellings(source)) == ["2: 'profile.json'", "2: / 'profile.json'",
                                              "3: '/results.json'", "4: / 'jobs'"]


def test_sweep_run_folders_are_built_and_parsed_in_one_place(tmp_path):
  workdir = run_folder.sweep_run_dir(tmp_path, 'listops', 'luna16', 'cls', 3)
  assert workdir == tmp_path / 'listops' / 'luna16' / 'cls' / 'seed3'
  assert run_folder.parse_sweep_run_dir(tmp_path, workdir) == ('listops', 'luna16', 'cls', 3)
  assert run_folder.parse_sweep_run_dir(tmp_path, tmp_path / 'listops') is None
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', seeds=[3]))
  [run] = plan_lib.plan(spec, tmp_path)[('listops', 'luna16', 'cls')]
  assert run.workdir == workdir


# ----------------------------------------------------------------------------------------------
# Cells: the grid once per named override group, in DIR/<cell>/; a spec without cells as before.
# ----------------------------------------------------------------------------------------------
# MQAR at a tiny size (the quick config shrunk to seconds), and two cells of it.
MQAR_TINY = ['mqar.num_train=200', 'mqar.num_val=32', 'mqar.num_test=32', 'mqar.vocab_size=64',
             'batch_size=8', 'eval_batch_size=16', 'num_train_steps=10', 'warmup_steps=2',
             'eval_every=10', 'checkpoint_every=10', 'log_every=5', 'model.dim=16',
             'model.ffn_dim=32', 'model.classifier_dim=32', 'progress_bar=False']
CELLS = [{'name': 'L16_lr1e-3',
          'overrides': ['max_length=16', 'mqar.num_kv_pairs=2', 'learning_rate=0.001']},
         {'name': 'L32_lr3e-3',
          'overrides': ['max_length=32', 'mqar.num_kv_pairs=4', 'learning_rate=0.003']}]


def write_mqar_spec(path, **fields) -> pathlib.Path:
  """write_spec's spec on the tiny MQAR task with CELLS, the Transformer, its own head."""
  return write_spec(path, **{'tasks': ['mqar'], 'models': ['transformer'], 'heads': [],
                             'overrides': MQAR_TINY, 'cells': CELLS, 'profile.enabled': False,
                             **fields})


def same_runs(runs, others) -> bool:
  return [(r.workdir, r.config.to_json()) for r in runs] == [
      (r.workdir, r.config.to_json()) for r in others]


def test_cells_run_every_group_once_per_cell_in_the_cells_folder(tmp_path):
  spec = campaign.load_spec(write_mqar_spec(tmp_path / 'spec.py', seeds=[0, 1]))
  campaign_dir = tmp_path / 'c'
  groups = plan_lib.plan(spec, campaign_dir)
  assert list(groups) == [('L16_lr1e-3', 'mqar', 'transformer', 'cls'),
                          ('L32_lr3e-3', 'mqar', 'transformer', 'cls')]
  for (cell, *_), runs in groups.items():
    assert [run.workdir for run in runs] == [
        campaign_dir / cell / 'mqar' / 'transformer' / 'cls' / f'seed{seed}' for seed in (0, 1)]
  # The spec's overrides, then the cell's, reach each run's config.
  settings = {key[0]: {(r.config.max_length, r.config.mqar.num_kv_pairs, r.config.learning_rate,
                        r.config.num_train_steps) for r in runs} for key, runs in groups.items()}
  assert settings == {'L16_lr1e-3': {(16, 2, 0.001, 10)}, 'L32_lr3e-3': {(32, 4, 0.003, 10)}}
  # Each cell's job (what a local or Slurm job unpickles and plans again) makes the same runs.
  driver = driver_lib.Campaign(spec, campaign_dir, None, 1.0)
  assert driver.group_names == ['L16_lr1e-3/mqar/transformer/cls',
                                'L32_lr3e-3/mqar/transformer/cls']
  for name in driver.group_names:
    job = driver.make_job(name)
    assert job.overrides == [*MQAR_TINY, *CELLS[driver.group_names.index(name)]['overrides']]
    assert same_runs(sweep.plan([job.config], job.seeds, [job.head], job.overrides,
                                job.campaign_dir), groups[plan_lib.group_key(name)])
  # --status names each run with its cell.
  status = [line.split()[0] for line in driver.status_lines()[1:]]
  assert status == [f'{cell["name"]}/mqar/transformer/cls/seed{seed}' for cell in CELLS
                    for seed in (0, 1)]


def test_a_spec_without_cells_plans_its_groups_straight_under_the_campaign(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer', 'luna16']))
  assert json.loads(spec.to_json())['cells'] == []
  campaign_dir = tmp_path / 'c'
  groups = plan_lib.plan(spec, campaign_dir)
  assert list(groups) == [('listops', 'transformer', 'cls'), ('listops', 'luna16', 'cls')]
  for (task, model, head), runs in groups.items():
    assert [run.workdir for run in runs] == [
        run_folder.sweep_run_dir(campaign_dir, task, model, head, seed) for seed in (0, 1)]
  driver = driver_lib.Campaign(spec, campaign_dir, None, 1.0)
  job = driver.make_job('listops/luna16/cls')
  assert job.overrides == TINY and job.campaign_dir == str(campaign_dir)
  assert estimate_lib.profile_names(groups) == ['listops']
  argv = estimate_lib.estimate_argv(spec, campaign_dir, ('listops', 'luna16', 'cls'),
                                    groups[('listops', 'luna16', 'cls')][0].config, None)
  assert '--override' not in argv
  assert argv[argv.index('--out_dir') + 1] == str(campaign_dir / 'estimate' / 'listops')


def test_estimates_are_per_cell(tmp_path):
  spec = campaign.load_spec(write_mqar_spec(tmp_path / 'spec.py'))
  groups = plan_lib.plan(spec, tmp_path)
  assert estimate_lib.profile_names(groups) == ['L16_lr1e-3/mqar', 'L32_lr3e-3/mqar']
  key = ('L32_lr3e-3', 'mqar', 'transformer', 'cls')
  argv = estimate_lib.estimate_argv(spec, tmp_path, key, groups[key][0].config, None)
  assert argv[argv.index('--lengths') + 1] == '32'
  assert argv[argv.index('--override') + 1:][:3] == CELLS[1]['overrides']
  assert argv[argv.index('--out_dir') + 1] == str(tmp_path / 'estimate' / 'L32_lr3e-3' / 'mqar')
  run_folder.write_json_atomically(run_folder.estimate_profile(tmp_path, 'mqar', 'L32_lr3e-3'), {
      'device': {'device_kind': 'H100'},
      'points': [{'model': 'transformer', 'status': 'ok', 'steps_per_s': 4.0}]})
  rows = estimate_lib.estimate_hours(groups, tmp_path, None)
  assert [row[:6] for row in rows] == [
      ('L16_lr1e-3', 'mqar', 'transformer', 'cls', 20, None),
      ('L32_lr3e-3', 'mqar', 'transformer', 'cls', 20, 20 / 4.0 / 3600)]
  assert '2 full-size steps (1 tasks x 1 models x 2 cells)' in estimate_lib.timing_plan(
      spec, 'gpu', None)


def test_an_mqar_cells_job_plans_its_programs_against_the_device(tmp_path, monkeypatch, capsys):
  """A job on a device with a memory size (a GPU) compiles its step for the memory estimate:
  MQAR's batch has query positions and a target per query."""
  spec = campaign.load_spec(write_mqar_spec(tmp_path / 'spec.py'))
  job = driver_lib.Campaign(spec, tmp_path, None, 1.0).make_job('L32_lr3e-3/mqar/transformer/cls')
  job.device_memory_gib = 1.0
  calls = []
  monkeypatch.setattr(jobs_lib, 'train_programs',
                      lambda todo, per_program: calls.append(per_program) or [])
  assert job() == ['mqar/transformer/cls/seed0', 'mqar/transformer/cls/seed1']
  assert calls == [2] and '2 seeds, ' in capsys.readouterr().out


BAD_CELL = {'name': 'L64', 'overrides': ['max_length=64']}


@pytest.mark.parametrize('fields, expected', [
    ({'cells': [BAD_CELL, BAD_CELL]}, "cell 'L64' is named twice; give each cell its own name."),
    ({'cells': [{'name': '', 'overrides': []}]}, "cell '': name each cell with letters"),
    ({'cells': [{'name': 'L64/D64', 'overrides': []}]}, "cell 'L64/D64': name each cell with"),
    ({'cells': [{'name': 'report', 'overrides': []}]}, "cell 'report': name each cell with"),
    ({'cells': ['L64:max_length=64']}, "cell 'L64:max_length=64': write each cell as {'name'"),
    ({'cells': [{'name': 'L64', 'overrides': ['max_length']}]},
     "cell 'L64': override 'max_length': expected KEY=VALUE"),
    ({'cells': [{'name': 'L64', 'overrides': ['seed=1']}]},
     "cell 'L64': override 'seed=1': expected KEY=VALUE with a key other than seed and "
     'model.head (the spec sets those: seeds, heads).'),
    ({'cells': [{'name': 'L64', 'overrides': ['model.head=mean']}]},
     "cell 'L64': override 'model.head=mean': expected KEY=VALUE with a key other than seed"),
    ({'cells': [{'name': 'L64', 'overrides': ['max_lenght=64']}]},
     "cell 'L64': override 'max_lenght=64': config.max_lenght is no config field. Did you mean "
     'config.max_length'),
    ({'cells': [{'name': 'L64', 'overrides': ['max_length=abc']}]},
     "cell 'L64': override 'max_length=abc': flag --config.max_length=abc: invalid literal"),
    ({'tasks': ['listops'], 'cells': [BAD_CELL]}, "cells with task 'listops': report keys its "
     'runs by task, model, head and seed, so two cells would collide'),
])
def test_bad_cell_is_one_line(tmp_path, env, capsys, fields, expected):
  spec = write_mqar_spec(tmp_path / 'spec.py', **fields)
  assert command.main([str(spec), '--dir', str(tmp_path / 'c')]) == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith(f'error: {spec}: ') and expected in err
  assert len(err.splitlines()) == 1 and not (tmp_path / 'c').exists()


def test_a_campaign_json_written_before_cells_still_resumes(tmp_path, env, capsys):
  spec_path = write_spec(tmp_path / 'spec.py', profile__enabled=False)
  saved = json.loads(campaign.load_spec(spec_path).to_json())
  del saved['cells']
  campaign_dir = tmp_path / 'c'
  run_folder.write_json_atomically(run_folder.campaign_file(campaign_dir),
                                   {'spec': saved, 'facts': {}})
  assert command.main([str(spec_path), '--dir', str(campaign_dir), '--status']) == 0
  rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()[1:]]
  assert rows == [['listops/luna16/cls/seed0', 'not'], ['listops/luna16/cls/seed1', 'not']]


def mqar_grid_module(name: str) -> dict:
  return runpy.run_path(str(REPO / 'campaigns' / name))


@pytest.mark.parametrize('name, models, variant', [
    ('mqar.py', spt.causal_models(), ''),
    ('mqar_bidirectional.py', list(registry.MODELS), 'bidirectional')])
def test_the_mqar_grids_plan_a_group_per_model_and_cell(tmp_path, name, models, variant):
  spec = spec_lib.load_spec(REPO / 'campaigns' / name)
  assert sorted(spec.models) == sorted(models) and spec.variant == variant
  assert len(spec.cells) == 64 and spec.seeds == [0, 1, 2]
  assert f'{len(models) * 64:,} groups' in mqar_grid_module(name)['__doc__']
  # Two models' groups (each model's config in both settings: tests/test_causal_forms.py); each
  # seed and model is one more config to build.
  spec.seeds, spec.models = [0], ['transformer', 'luna16']
  groups = plan_lib.plan(spec, tmp_path)
  assert len(groups) == 2 * 64
  # Zoology's Figure 2 cells: L and N together, the width, the rate; the batch per L, 64 epochs.
  for cell, expected in [('L512_N64_D512_lr1.0e-02', (512, 64, 512, 0.01, 128, 50000)),
                         ('L64_N4_D128_lr1.0e-04', (64, 4, 128, 1e-4, 512, 12500))]:
    [run] = groups[(cell, 'mqar', 'transformer', 'cls')]
    c = run.config
    assert (c.max_length, c.mqar.num_kv_pairs, c.model.dim, c.learning_rate, c.batch_size,
            c.num_train_steps) == pytest.approx(expected)
    assert c.model.causal == (variant != 'bidirectional')
    assert run.workdir == tmp_path / cell / 'mqar' / 'transformer' / 'cls' / 'seed0'


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
  report_dir = campaign_dir / run_folder.REPORT_DIR
  for name in ('table1.md', 'table1.tex', 'table1.csv', 'table2.md', 'table2.tex',
               'profile.json', 'figure1.png', 'figure1.pdf'):
    assert (report_dir / name).stat().st_size > 0, name
  caption = (report_dir / 'table1.md').read_text().splitlines()[0]
  assert 'protocol lra' in caption and 'training steps: ListOps 60' in caption
  assert 'ListOps: generated' in caption
  assert 'CUT SHORT: quick config; 60 of 5000 steps; 2 of 5 seeds.' in caption
  # The last line lists every file of the report folder (Table 2's files and profile.json too).
  written = sorted(p.name for p in report_dir.iterdir())
  assert {'table2.md', 'scaling.png', 'profile.json', 'figure1.png'} <= set(written)
  assert output.strip().splitlines()[-1] == (f'Campaign finished. {report_dir} holds: '
                                             f'{", ".join(written)}.')
  csv_lines = (report_dir / 'table1.csv').read_text().splitlines()
  assert csv_lines[0].endswith(',campaign')
  assert all(('CUT SHORT' in line) == (',ours,' in line) for line in csv_lines[1:])


def test_rerun_of_a_finished_campaign_has_nothing_to_do(reference, env):
  campaign_dir, _ = reference
  spec = campaign_dir.parent / 'spec.py'
  before = {p: p.stat().st_mtime for p in run_folder.report_dir(campaign_dir).iterdir()}
  output = finish(driver(spec, campaign_dir, env=env))
  assert 'submitted' not in output and 'Campaign finished' not in output
  assert output.strip().splitlines()[-1] == (
      'Nothing to do: every run of this campaign has finished and its report is current. '
      f'{run_folder.report_dir(campaign_dir)} holds: {", ".join(sorted(p.name for p in before))}.')
  assert {p: p.stat().st_mtime for p in before} == before  # nothing rewritten


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
  jobs_dir = campaign_dir / run_folder.JOBS_DIR
  first = launch.log_path(jobs_dir, killed).with_suffix('.out').read_text()
  second = launch.log_path(jobs_dir, job_of(campaign_dir, group)).with_suffix('.out')
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
  log = launch.log_path(tmp_path / 'c' / run_folder.JOBS_DIR, job)
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
  assert squeue(slurm) == [] and not (tmp_path / 'c' / run_folder.JOBS_FILE).exists()


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
  groups = plan_lib.plan(spec, tmp_path)
  configs = {key: runs[0].config for key, runs in groups.items()}
  assert {c.protocol for c in configs.values()} == {'paper'}
  assert configs[('pathfinder', 'luna16', 'mean')].model.mean_includes_cls
  assert configs[('listops', 'luna16', 'cls')].num_train_steps == 5000
  assert {key[2] for key in configs} == {'cls', 'mean'}
  assert len(groups) == len(spec.tasks) * len(spec.models)


def test_a_head_no_model_can_pool_is_refused(tmp_path):
  spec = campaign.load_spec(write_spec(tmp_path / 'a.py', models=['transformer'], seeds=[0],
                                       heads=['cls', 'mean_p']))
  with pytest.raises(spec_lib.CampaignError, match=r"heads 'mean_p': none of the models "
                     r"\['transformer'\] can pool it"):
    plan_lib.plan(spec, tmp_path)


def test_a_compiled_estimate_is_shared_by_every_later_campaign(tmp_path, monkeypatch):
  monkeypatch.setenv('LRA_CACHE_DIR', str(tmp_path / 'cache'))
  spec = campaign.load_spec(write_spec(tmp_path / 'spec.py', models=['transformer'], seeds=[0]))
  (_, runs), = plan_lib.plan(spec, tmp_path / 'a').items()
  config = runs[0].config
  first = memory.EstimateCache(tmp_path / 'a')
  assert first.get('listops/transformer/cls', config) is None
  first.put('listops/transformer/cls', config, 7 * GIB, 12.0)
  # Another campaign, another group name: the same step is read, and recorded there too.
  other = memory.EstimateCache(tmp_path / 'b')
  assert other.get('x/y/z', config)['seed_bytes'] == 7 * GIB
  assert json.loads(run_folder.memory_file(tmp_path / 'b').read_text())['x/y/z']['seed_bytes'] \
      == 7 * GIB
  # A stub's numbers never reach the shared cache; another config is not confused with it.
  assert memory.EstimateCache(tmp_path / 'c', shared=False).get('x/y/z', config) is None
  assert other.get('x/y/z', memory.with_accumulation(config, 2)) is None


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
  todo = memory.distinct_steps([(plan_lib.group_name(key), runs[0].config)
                                for key, runs in groups.items()],
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
  # One at a time, in this process, by the previous method (the model initialised, compiled
  # with XLA's default options): the same plan, byte for byte (a wrapper: not the shared cache's
  # own estimate).
  sequential = memory.group_memory(groups, tmp_path / 'b', 80 * GIB,
                                   estimate=lambda c: memory.vmapped_step_bytes(c, quick=False))
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


# ----------------------------------------------------------------------------------------------
# Cells end to end: each cell's job trains in its folder, the report reads every cell, and the
# estimate profiles each cell's config.
# ----------------------------------------------------------------------------------------------
def test_a_campaign_with_cells_trains_each_cell_and_reports_them(tmp_path, env, stop):
  spec = write_mqar_spec(tmp_path / 'spec.py', seeds=[0])
  campaign_dir = stop(tmp_path / 'c')
  output = finish(driver(spec, campaign_dir, env=env))
  assert sorted(results(campaign_dir)) == ['L16_lr1e-3/mqar/transformer/cls/seed0',
                                           'L32_lr3e-3/mqar/transformer/cls/seed0']
  assert 'L32_lr3e-3/mqar/transformer/cls: done' in output
  # A row per cell: its L, N and learning rate, one seed each.
  rows = (run_folder.report_dir(campaign_dir) / 'mqar.csv').read_text().splitlines()
  assert rows[0].split(',')[2:8] == ['L', 'N', 'V', 'D', 'P', 'lr']
  assert [row.split(',')[2:8] for row in rows[1:]] == [['16', '2', '64', '16', '', '0.001'],
                                                        ['32', '4', '64', '16', '', '0.003']]
  # The estimate: each cell's config profiled at its own length (FLOPs: no timing).
  estimate = finish(driver(spec, campaign_dir, '--estimate', '--device_memory_gib', '1',
                           '--assume_tflops', '100', env=env))
  hours = [line.split() for line in estimate.splitlines() if ' seed-steps ' in line]
  assert [row[:2] for row in hours] == [['L16_lr1e-3', 'mqar'], ['L32_lr3e-3', 'mqar']]
  assert all(row[7] == 'h' for row in hours), estimate
  profiles = [json.loads(run_folder.estimate_profile(campaign_dir, 'mqar', cell['name'])
                         .read_text())['points'][0] for cell in CELLS]
  assert [point['length'] for point in profiles] == [16, 32]
