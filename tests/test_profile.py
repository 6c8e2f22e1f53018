"""The profiler end to end on tiny models, its OOM handling, the relative table's arithmetic and
the memory scaling of Luna against the Transformer; isolation and out-of-memory-or-crash on a
faked accelerator platform."""

import argparse
import json
import os
import signal
import subprocess

import jax
import numpy as np
import pytest

import lra_luna
from lra_luna import profile
from lra_luna import tables
from lra_luna.profile import isolate
from lra_luna.profile import measure
from lra_luna.profile import tabulate
from lra_luna.training import run_folder

TINY_CONFIG = '''
from lra_luna import config_lib


def get_config(arg):
  arg = config_lib.parse_arg(arg)
  c = config_lib.base_config()
  c.task = 'text'
  c.update(eval_batch_size=2, num_train_steps=10, warmup_steps=1, schedule='rsqrt',
           learning_rate=1e-3, eval_every=10, checkpoint_every=10)
  # No dropout: fewer ops, so a faster compile. Two layers: the last computes only [CLS]'s row
  # (prune_last_layer), so with one the Transformer would have no n x n part at all.
  c.model.update(dim=16, num_heads=2, num_layers=2, ffn_dim=32, classifier_dim=16, dropout=0.0,
                 attention_dropout=0.0)
  return config_lib.set_model(c, arg.model)
'''


@pytest.fixture(scope='module')
def tiny_config(tmp_path_factory):
  path = tmp_path_factory.mktemp('config') / 'tiny.py'
  path.write_text(TINY_CONFIG)
  return str(path)


def run_profiler(config, out_dir):
  return profile.main(['--models', 'transformer,luna16', '--lengths', '64,128', '--batch_size',
                       '2', '--config', config, '--out_dir', str(out_dir), '--repeats', '2',
                       '--warmup', '1', '--no-isolate'])


# The point that runs out of memory in the shared sweep (simulated).
OOM_POINT = ('luna16', 64)


@pytest.fixture(scope='module')
def sweep(tiny_config, tmp_path_factory):
  """One in-process sweep (compiles are slow on CPU), with OOM_POINT running out of memory."""
  out_dir = tmp_path_factory.mktemp('profile')
  measure_point = measure.measure_point

  def measure_or_run_out(config, **kwargs):
    if (config.model_name, config.max_length) == OOM_POINT:
      raise jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB')
    return measure_point(config, **kwargs)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(measure, 'measure_point', measure_or_run_out)
    results = run_profiler(tiny_config, out_dir)
  return results, out_dir


def test_profiler_runs_end_to_end_and_writes_every_output(sweep):
  results, out_dir = sweep
  for name in (run_folder.PROFILE_FILE, 'table2.md', 'table2.tex', 'scaling.png'):
    assert (out_dir / name).stat().st_size > 0
  saved = json.loads((out_dir / run_folder.PROFILE_FILE).read_text())
  assert saved['device']['platform'] == 'cpu' and saved['batch_size'] == 2
  assert saved['points'] == results['points']
  assert [(p['model'], p['length']) for p in saved['points']] == [
      ('transformer', 64), ('transformer', 128), ('luna16', 64), ('luna16', 128)]
  for point in saved['points']:
    if (point['model'], point['length']) == OOM_POINT:
      continue
    assert point['status'] == 'ok'
    assert point['steps_per_s'] > 0 and len(point['step_times_s']) == 2
    assert point['compile_s'] > 0 and point['flops_per_step'] > 0
    assert point['estimated_bytes'] > 0 and point['num_params'] > 0
    assert point['device_peak_bytes'] is None  # CPU has no device memory stats.
    assert point['dtype'] == 'float32' and point['matmul_precision'] == 'default'
    # min <= median <= max of the timed steps, and their spread.
    assert point['step_s_min'] <= point['step_s'] <= point['step_s_max']
    assert point['spread'] == pytest.approx(
        (point['step_s_max'] - point['step_s_min']) / point['step_s'])
  # Two lengths fit any line exactly: no slope is printed from them.
  assert saved['slopes'] == {'step_s': {}, 'memory': {}}
  table = (out_dir / 'table2.md').read_text()
  assert '| Transformer | 1.00 | 1.00 | 1.00 | 1.00 |' in table
  assert '| Transformer | - (needs 3+ lengths) | - (needs 3+ lengths) |' in table
  assert 'Attention per row: Transformer softmax, vanilla; Luna-16 luna.' in table
  assert all(tables.parse_markdown(table))  # every row as many cells as its header


def test_memory_only_compiles_without_running_and_gives_the_same_estimates(sweep, tiny_config,
                                                                           tmp_path):
  timed, _ = sweep
  results = profile.main(['--models', 'transformer,luna16', '--lengths', '64,128',
                          '--batch_size', '2', '--config', tiny_config, '--out_dir',
                          str(tmp_path), '--no-isolate', '--memory_only'])
  estimates = {(p['model'], p['length']): p['estimated_bytes'] for p in timed['points']
               if p['status'] == 'ok'}
  for point in results['points']:
    assert point['status'] == 'ok' and point['steps_per_s'] is None and not point['step_times_s']
    key = (point['model'], point['length'])
    if key in estimates:  # Same compiled step, so the same estimate as the timed sweep's.
      assert point['estimated_bytes'] == estimates[key]
  table = (tmp_path / 'table2.md').read_text()
  assert 'speed not timed' in table
  # Speed cells are empty; memory cells are filled (the Transformer's divide to 1.00).
  assert '| Transformer | - | - | 1.00 | 1.00 |' in table
  assert (tmp_path / 'scaling.png').stat().st_size > 0


def test_out_of_memory_point_is_recorded_and_the_sweep_goes_on(sweep):
  results, out_dir = sweep
  status = {(p['model'], p['length']): p['status'] for p in results['points']}
  assert status == {('transformer', 64): 'ok', ('transformer', 128): 'ok',
                    ('luna16', 64): 'oom', ('luna16', 128): 'ok'}
  assert 'RESOURCE_EXHAUSTED' in results['points'][2]['error']
  assert '| Luna-16 | OOM |' in (out_dir / 'table2.md').read_text()


def test_other_errors_are_not_taken_for_out_of_memory(tiny_config, tmp_path, monkeypatch):
  def fail(config, **kwargs):
    raise ValueError('a bug')

  monkeypatch.setattr(measure, 'measure_point', fail)
  with pytest.raises(ValueError, match='a bug'):
    run_profiler(tiny_config, tmp_path)


def fabricated_point(model, length, steps_per_s, memory, device_peak=None):
  return {'model': model, 'length': length, 'status': 'ok', 'num_params': 1, 'compile_s': 1.0,
          'step_times_s': [1 / steps_per_s], 'step_s': 1 / steps_per_s,
          'steps_per_s': steps_per_s, 'flops_per_step': 1e9, 'estimated_bytes': memory,
          'memory_analysis': None, 'device_peak_bytes': device_peak}


def fabricated_results(points, models):
  return {'device': {'platform': 'cpu', 'device_kind': 'cpu', 'jax_version': jax.__version__},
          'task': 'text', 'batch_size': 32, 'dtype': 'float32', 'models': models,
          'lengths': [1024, 2048, 3072], 'points': points}


def test_relative_table_divides_by_the_transformer_at_the_same_length(tmp_path):
  points = [
      fabricated_point('transformer', 1024, 2.0, 1000),
      fabricated_point('transformer', 2048, 0.5, 4000),
      profile.oom_point('transformer', 3072, 'RESOURCE_EXHAUSTED'),
      fabricated_point('luna16', 1024, 3.0, 500),
      fabricated_point('luna16', 2048, 2.0, 1000),
      fabricated_point('luna16', 3072, 1.0, 1500),
      fabricated_point('luna128', 1024, 1.0, 2000),
  ]
  results = fabricated_results(points, ['luna16', 'transformer', 'luna128'])
  rows = dict(profile.relative_rows(results))
  assert list(rows)[0] == 'Transformer'  # The baseline leads, whatever the sweep order.
  assert rows['Transformer'] == [1.0, 1.0, 'OOM', 1.0, 1.0, 'OOM']
  assert rows['Luna-16'] == [1.5, 4.0, 'OOM baseline', 0.5, 0.25, 'OOM baseline']
  assert rows['Luna-16 (paper)'] == ['1.2', '1.8', '3.7', '0.44', '0.23', '0.17']
  assert rows['Luna-128'] == [0.5, None, None, 2.0, None, None]
  profile.write_outputs(results, tmp_path)
  table = (tmp_path / 'table2.md').read_text()
  assert '| Luna-16 | 1.50 | 4.00 | OOM baseline | 0.50 | 0.25 | OOM baseline |' in table
  assert '| Luna-128 | 0.50 | - | - | 2.00 | - | - |' in table
  assert r'Luna-16 & 1.50 & 4.00 & OOM baseline & 0.50 & 0.25 & OOM baseline \\' in (
      tmp_path / 'table2.tex').read_text()
  # Step time 1/3, 1/2, 1 s at 1K, 2K, 3K: the fitted slope of log time on log length.
  slope = json.loads((tmp_path / 'profile.json').read_text())['slopes']['step_s']['luna16']
  x, y = np.log([1024, 2048, 3072]), np.log([1 / 3, 1 / 2, 1])
  assert slope['slope'] == pytest.approx(np.polyfit(x, y, 1)[0])
  assert slope['lengths'] == [1024, 2048, 3072]


def test_device_peak_is_compared_when_every_point_has_it():
  points = [fabricated_point('transformer', 1024, 1.0, 1000, device_peak=800),
            fabricated_point('luna16', 1024, 1.0, 500, device_peak=200)]
  results = fabricated_results(points, ['transformer', 'luna16'])
  assert profile.memory_key(points) == 'device_peak_bytes'
  assert dict(profile.relative_rows(results))['Luna-16'][3] == 0.25
  points[1]['device_peak_bytes'] = None
  assert profile.memory_key(points) == 'estimated_bytes'


def estimated_bytes(config_path, model_name, length):
  config = profile.point_config(config_path, model_name, length, batch_size=2, dtype='float32')
  step, state, batch, dropout_key, _ = profile.build_step(config)
  return profile.compiled_memory(step.lower(state, batch, dropout_key).compile())[
      'estimated_bytes']


def test_luna_memory_grows_linearly_and_the_transformers_faster(tiny_config):
  luna = {n: estimated_bytes(tiny_config, 'luna16', n) for n in (1024, 2048)}
  transformer = {n: estimated_bytes(tiny_config, 'transformer', n) for n in (1024, 2048)}
  assert 1.7 < luna[2048] / luna[1024] < 2.5  # Linear: 2; quadratic: 4.
  assert transformer[2048] / transformer[1024] > 3.0


# Step memory growth from 1K to 2K tokens at most: linear is 2x, the Transformer's n x n part
# makes it more than 3x (test above). BigBird at this width (16): 2.7x, because its middle block
# rows go from 15 to 31 (n = 1025 and 2049 pad to 17 and 33 blocks of 64) and at width 16 the
# block scores dominate the step; at the Text model's width it is 1.84x (docs/baselines.md).
LINEAR_GROWTH = {'longformer': 2.2, 'sinkhorn': 2.2, 'bigbird': 2.9}


@pytest.mark.parametrize('model_name', sorted(LINEAR_GROWTH))
def test_block_sparse_memory_grows_linearly(tiny_config, model_name):
  """Longformer, Sinkhorn and BigBird hold O(n) memory at LRA's block sizes and window."""
  memory = {n: estimated_bytes(tiny_config, model_name, n) for n in (1024, 2048)}
  assert memory[2048] / memory[1024] < LINEAR_GROWTH[model_name]


def test_spread_over_repeats_is_reported_and_warned_about_above_ten_percent(tmp_path):
  spread = profile.step_time_spread([1.0, 1.3, 1.1])
  assert spread == {'step_s': 1.1, 'step_s_min': 1.0, 'step_s_max': 1.3,
                    'spread': pytest.approx(0.3 / 1.1)}
  noisy = {**fabricated_point('luna16', 1024, 1 / 1.1, 500), **spread,
           'step_times_s': [1.0, 1.3, 1.1]}
  steady = {**fabricated_point('transformer', 1024, 1.0, 1000),
            **profile.step_time_spread([1.0, 1.02, 0.99]), 'step_times_s': [1.0, 1.02, 0.99]}
  assert 'WARNING: step times spread 27%' in profile.describe(noisy)
  assert '0.769-1 over 3 repeats' in profile.describe(noisy)
  assert 'WARNING' not in profile.describe(steady)
  profile.write_outputs(fabricated_results([steady, noisy], ['transformer', 'luna16']), tmp_path)
  table = (tmp_path / 'table2.md').read_text()
  assert 'WARNING: 1 points spread over 10% (luna16 @ 1K 27%)' in table
  assert '| luna16 | 1024 | 0.909 | 0.769 | 1 | 27% |' in table


def test_slopes_need_three_lengths_and_carry_only_the_digits_their_error_supports():
  assert profile.fitted_slope([1024, 2048], [1.0, 2.0]) is None
  exact = profile.fitted_slope([1024, 2048, 4096], [1.0, 2.0, 4.0])
  assert exact['slope'] == pytest.approx(1.0) and exact['stderr'] == pytest.approx(0, abs=1e-12)
  assert profile.format_slope(exact) == '1.00 ± 0.00'
  # Steps that spread +-10% over the repeats: the slope's error follows, and so do the digits.
  noisy = profile.fitted_slope([1024, 2048, 4096], [1.0, 2.0, 4.0], [0.1, 0.1, 0.1])
  x = np.log([1024, 2048, 4096])
  sxx = np.sum((x - x.mean())**2)
  assert noisy['stderr'] == pytest.approx(np.sqrt(np.sum((x - x.mean())**2 * 0.01)) / sxx)
  assert profile.format_slope(noisy) == '1.0 ± 0.1'
  assert profile.format_slope({'slope': 1.2345, 'stderr': 0.03}) == '1.23 ± 0.03'
  assert profile.format_slope({'slope': 1.2345, 'stderr': 0.6}) == '1.2 ± 0.6'
  assert profile.format_slope({'slope': 1.2345, 'stderr': 2.0}) == '1 ± 2'


def test_a_point_too_big_for_the_host_is_skipped_before_it_runs(tiny_config, monkeypatch):
  ran = []

  def tiny_step(config):  # A real compiled step, small enough to compile at once.
    def step(state, batch, key):
      ran.append(True)
      return state * 2.0, {'loss': (batch['inputs'] * state).sum()}
    state, batch = jax.numpy.ones((1024, 1024)), {'inputs': jax.numpy.ones((1024, 1024))}
    return jax.jit(step, donate_argnums=0), state, batch, jax.random.key(0), 1

  monkeypatch.setattr(measure, 'build_step', tiny_step)
  config = profile.point_config(tiny_config, 'luna16', 64, 2, 'float32')
  point = profile.measure_point(config, warmup=1, repeats=2, host_memory=2**20)
  assert point['status'] == 'skipped' and point['estimated_bytes'] > 2**20
  needed = point['estimated_bytes'] / 2**30
  assert point['reason'] == f'needs {needed:.3g} GiB, host has 0.000977 GiB'
  assert len(ran) == 1  # traced once to compile, never run
  assert profile.describe({'model': 'luna16', 'length': 64, **point}).startswith(
      'luna16 @ 64: skipped, needs ')
  fits = profile.measure_point(config, warmup=1, repeats=2, host_memory=2**30)
  assert fits['status'] == 'ok' and len(fits['step_times_s']) == 2
  # Its memory estimate still divides in Table 2; its speed says why it is missing.
  base = fabricated_point('transformer', 64, 1.0, point['estimated_bytes'] * 2)
  index = {('transformer', 64): base, ('luna16', 64): {'model': 'luna16', **point}}
  assert profile.relative_cell(index, 'luna16', 64, 'estimated_bytes') == 0.5
  assert profile.relative_cell(index, 'luna16', 64, 'steps_per_s') == 'skipped'


def test_lengths_take_k_and_a_bad_length_gets_a_clear_error(capsys):
  assert profile.length_list('1K,2k,3072') == [1024, 2048, 3072]
  with pytest.raises(argparse.ArgumentTypeError, match='^1K is given twice; give each entry once$'):
    profile.length_list('1024,1K')
  with pytest.raises(argparse.ArgumentTypeError, match="'1x' in '1K,1x' is no sequence length"):
    profile.length_list('1K,1x')
  with pytest.raises(SystemExit):
    profile.parse_args(['--lengths', '1K,big'])
  error = capsys.readouterr().err
  assert "argument --lengths: 'big' in '1K,big' is no sequence length" in error
  assert '<lambda>' not in error


@pytest.mark.parametrize('flag, value, repeat', [('--models', 'luna16,s4d,luna16', 'luna16'),
                                               ('--lengths', '1K,2K,2048', '2048')])
def test_a_repeated_model_or_length_is_refused_in_one_line(capsys, flag, value, repeat):
  with pytest.raises(SystemExit) as stop:
    profile.parse_args([flag, value])
  error = capsys.readouterr().err
  assert stop.value.code == 2 and error.count('\n') == 1
  assert f'argument {flag}: {repeat} is given twice; give each entry once' in error


def test_overrides_reach_every_point_and_its_worker_and_a_bad_key_is_one_line(capsys):
  args = profile.parse_args(['--models', 'transformer', '--lengths', '60', '--config',
                             'configs/listops.py:quick', '--override',
                             'model.prune_last_layer=False', 'model.dim=32'])
  config = measure.point_config(args.config, 'transformer', 60, 8, 'float32', 'classification',
                                args.override)
  assert config.model.prune_last_layer is False and config.model.dim == 32
  # On a pretraining point an override wins over the spt word's settings (Image: l1 -> ce).
  for loss_overrides, loss in (((), 'l1'), (('pretraining.loss=ce',), 'ce')):
    image = measure.point_config('configs/image.py:quick', 'luna16', 64, 2, 'float32', 'masked',
                                 loss_overrides)
    assert (image.pretraining.objective, image.pretraining.loss) == ('masked', loss)
  command = isolate.worker_command(args, 'transformer', 60, 'point.json')
  assert command[-3:] == ['--override', 'model.prune_last_layer=False', 'model.dim=32']
  assert 'Overrides: model.prune_last_layer=False, model.dim=32.' in tabulate.setting_line(
      {**fabricated_results([fabricated_point('transformer', 60, 1.0, 1)], ['transformer']),
       'overrides': args.override})
  for bad, said in (('model.prunelast=False', 'Did you mean config.model.prune_last_layer'),
                    ('model.dim', "expected KEY=VALUE")):
    with pytest.raises(SystemExit):
      profile.parse_args(['--config', 'configs/listops.py:quick', '--override', bad])
    error = capsys.readouterr().err
    assert said in error and len(error.strip().splitlines()) == 1


def test_flops_only_counts_the_lowered_step_without_compiling(sweep, tiny_config, tmp_path):
  """--flops_only (campaign --estimate --assume_tflops): XLA's FLOPs of the lowered step, close to
  the compiled step's count the sweep measured, with nothing compiled or timed."""
  results = profile.main(['--models', 'transformer,luna16', '--lengths', '128', '--batch_size',
                          '2', '--config', tiny_config, '--out_dir', str(tmp_path),
                          '--flops_only', '--no-isolate'])
  compiled = {p['model']: p['flops_per_step'] for p in sweep[0]['points']
              if p['length'] == 128}
  for point in results['points']:
    assert point['compile_s'] is None and point['steps_per_s'] is None
    # Before XLA's passes: elementwise ops differ a little (about 9% on this tiny model, 2% at
    # the full-size ListOps Transformer).
    assert point['flops_per_step'] == pytest.approx(compiled[point['model']], rel=0.15)
  assert '| transformer | 128 | not timed | - |' in (tmp_path / 'table2.md').read_text()


# ----------------------------------------------------------------------------------------------
# Accelerators, on this CPU: the platform query faked.
# ----------------------------------------------------------------------------------------------
def fake_platform(monkeypatch, platform):
  """JAX would start on `platform`: the parent's plan says so, and a fresh process reports it."""
  monkeypatch.setattr(isolate.host_memory, 'planned_platform',
                      lambda _: 'cpu' if platform == 'cpu' else 'accelerator')
  monkeypatch.setattr(isolate, 'probe_device_info', lambda: {
      'platform': platform, 'device_kind': f'fake {platform}', 'jax_version': jax.__version__,
      'cpu_count': 1})


@pytest.mark.parametrize('platform', ['gpu', 'tpu'])
def test_points_run_in_their_own_process_on_every_accelerator(monkeypatch, platform):
  fake_platform(monkeypatch, platform)
  monkeypatch.setattr(isolate, 'device_info', lambda: pytest.fail('the parent started JAX'))
  device, isolated = isolate.sweep_device(None)
  assert device['platform'] == platform and isolated
  assert isolate.sweep_device(True)[1]
  monkeypatch.setattr(isolate, 'device_info', lambda: {'platform': platform})
  assert isolate.sweep_device(False) == ({'platform': platform}, False)  # --no-isolate


def test_on_the_cpu_points_run_in_process_unless_asked(monkeypatch):
  fake_platform(monkeypatch, 'cpu')
  monkeypatch.setattr(isolate, 'probe_device_info', lambda: pytest.fail('probed a CPU'))
  device, isolated = isolate.sweep_device(None)
  assert device['platform'] == 'cpu' and not isolated
  assert isolate.sweep_device(True)[1]


def test_the_sweep_sends_each_point_to_a_worker_on_a_faked_tpu(tiny_config, tmp_path,
                                                                  monkeypatch):
  fake_platform(monkeypatch, 'tpu')
  asked = []

  def worker(args, model_name, length, objective='classification'):
    assert objective == 'classification'
    asked.append((model_name, length))
    return fabricated_point(model_name, length, 1.0, 1000)

  monkeypatch.setattr(isolate, 'profile_point_isolated', worker)
  monkeypatch.setattr(measure, 'profile_point', lambda *a, **k: pytest.fail('ran in process'))
  results = profile.main(['--models', 'transformer,luna16', '--lengths', '64', '--config',
                          tiny_config, '--out_dir', str(tmp_path), '--dtype', 'float16'])
  assert asked == [('transformer', 64), ('luna16', 64)]
  assert results['isolated'] and results['device']['platform'] == 'tpu'
  assert results['worker_environment'] == isolate.worker_memory_settings()
  assert 'Task text, batch 32, float16, matmul precision default, fake tpu (tpu)' in (
      tmp_path / 'table2.md').read_text()


def test_a_worker_gets_the_whole_device_and_this_checkout(monkeypatch, tmp_path):
  for name in isolate.WORKER_ENVIRONMENT:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.chdir(tmp_path)
  env = isolate.worker_environment()
  assert env['XLA_PYTHON_CLIENT_MEM_FRACTION'] == env['XLA_CLIENT_MEM_FRACTION'] == '0.95'
  paths = env['PYTHONPATH'].split(os.pathsep)
  assert str(tmp_path) in paths
  assert lra_luna.CHECKOUT is None or str(lra_luna.CHECKOUT) in paths
  monkeypatch.setenv('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.5')  # the user's choice is kept
  assert isolate.worker_memory_settings() == {'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.5'}
  assert 'XLA_CLIENT_MEM_FRACTION' not in isolate.worker_environment()


TRACEBACK = '''W0000 bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran out of memory trying to allocate 9 GiB
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: a bug
'''
XLA_OOM = 'F1125 12:00:00 pjrt.cc:1] Check failed: RESOURCE_EXHAUSTED: Out of memory\nAborted\n'


@pytest.mark.parametrize('returncode, stderr, status, error', [
    (-signal.SIGKILL, '', 'oom', "killed by SIGKILL (the kernel's out-of-memory killer): "),
    (-signal.SIGABRT, XLA_OOM, 'oom', 'F1125 12:00:00 pjrt.cc:1] Check failed: RESOURCE_'),
    (-signal.SIGSEGV, 'Fatal Python error: Segmentation fault\n', 'crash',
     'killed by SIGSEGV: Fatal Python error: Segmentation fault'),
    # An allocator's warning is no failure: the crash is the ValueError.
    (1, TRACEBACK, 'crash', 'exit 1: ValueError: a bug'),
    (2, '', 'crash', 'exit 2'),
])
def test_a_dead_worker_is_oom_only_when_memory_ran_out(monkeypatch, tiny_config, returncode,
                                                       stderr, status, error):
  died = subprocess.CompletedProcess([], returncode=returncode, stdout='', stderr=stderr)
  monkeypatch.setattr(isolate.subprocess, 'run', lambda *args, **kwargs: died)
  args = profile.parse_args(['--config', tiny_config])
  point = profile.profile_point_isolated(args, 'luna16', 64)
  assert (point['model'], point['length'], point['status']) == ('luna16', 64, status)
  assert point['error'].startswith(error)


@pytest.mark.parametrize('raised, status, error', [
    (jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory while trying to allocate'),
     'oom', 'JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate'),
    (ValueError('a bug\nmore lines'), 'crash', 'ValueError: a bug'),
])
def test_a_worker_records_its_own_failure(tiny_config, tmp_path, monkeypatch, raised, status,
                                          error):
  def fail(config, **kwargs):
    raise raised

  monkeypatch.setattr(measure, 'measure_point', fail)
  out = tmp_path / 'point.json'
  profile.main(['--models', 'luna16', '--lengths', '64', '--config', tiny_config,
                '--point_output', str(out)])
  point = json.loads(out.read_text())
  assert point == {'model': 'luna16', 'length': 64, 'status': status, 'error': error}
  assert tabulate.describe(point) == f'luna16 @ 64: {tabulate.STATUS_WORDS[status]}, {error}'


def test_device_peak_is_the_steps_own_not_the_compiles():
  gib = 2**30
  after_compile = {'bytes_limit': 76 * gib, 'bytes_in_use': 2 * gib, 'peak_bytes_in_use': 5 * gib}
  memory = measure.device_memory(after_compile, {'peak_bytes_in_use': 9 * gib})
  assert memory == {'device_bytes_limit': 76 * gib, 'device_in_use_after_compile_bytes': 2 * gib,
                    'device_peak_after_compile_bytes': 5 * gib, 'device_peak_bytes': 9 * gib,
                    'device_peak_hidden': False}
  # The steps stayed under what compiling left as the peak: their own peak is not known.
  hidden = measure.device_memory(after_compile, {'peak_bytes_in_use': 5 * gib})
  assert hidden['device_peak_bytes'] is None and hidden['device_peak_hidden']
  assert measure.device_memory({}, {}) == {
      'device_bytes_limit': None, 'device_in_use_after_compile_bytes': None,
      'device_peak_after_compile_bytes': None, 'device_peak_bytes': None,
      'device_peak_hidden': False}


def test_crashed_points_are_named_in_every_table(tmp_path):
  points = [fabricated_point('transformer', 1024, 2.0, 1000),
            measure.failed_point('luna16', 1024, 'crash', 'exit 1: ValueError: a bug')]
  results = fabricated_results(points, ['transformer', 'luna16'])
  results['lengths'] = [1024]
  assert dict(profile.relative_rows(results))['Luna-16'] == ['crashed', 'crashed']
  tabulate.write_tables({**results, 'slopes': {'step_s': {}, 'memory': {}}}, tmp_path)
  table = (tmp_path / 'table2.md').read_text()
  assert '| luna16 | 1024 | crashed: exit 1: ValueError: a bug |' in table
  assert all(tables.parse_markdown(table))


def test_caption_names_dtype_precision_and_each_rows_attention(tiny_config):
  args = profile.parse_args(['--config', tiny_config, '--dtype', 'float16'])
  assert args.dtype == 'float16'
  config = profile.point_config(tiny_config, 'transformer_fused', 64, 2, args.dtype)
  assert config.model.dtype == 'float16'
  config.matmul_precision = 'highest'
  assert measure.matmul_precision(config) == 'highest'
  assert measure.attention_implementation(config) == 'softmax, fused'
  points = [{**fabricated_point(name, 1024, 1.0, 1000), 'matmul_precision': 'highest',
             'attention_implementation': measure.attention_implementation(
                 profile.point_config(tiny_config, name, 64, 2, 'float16'))}
            for name in ('transformer', 'transformer_fused', 'luna16')]
  results = {**fabricated_results(points, ['transformer', 'transformer_fused', 'luna16']),
             'dtype': 'float16', 'lengths': [1024], 'slopes': {'step_s': {}, 'memory': {}}}
  caption = tabulate.table2(results).caption
  assert 'float16, matmul precision highest,' in caption
  assert ('Attention per row: Transformer softmax, vanilla; Transformer (fused) softmax, fused; '
          'Luna-16 luna.') in caption


def test_an_isolated_point_runs_in_a_worker_with_the_same_estimate(sweep, tiny_config, tmp_path):
  """--isolate for real: a fresh `python -m lra_luna.profile` worker per point, which gets the
  whole device and reports the same compiled step as the in-process sweep."""
  results = profile.main(['--models', 'transformer', '--lengths', '64', '--batch_size', '2',
                          '--config', tiny_config, '--out_dir', str(tmp_path), '--repeats', '1',
                          '--warmup', '0', '--isolate'])
  [point] = results['points']
  in_process = next(p for p in sweep[0]['points'] if (p['model'], p['length']) == ('transformer', 64))
  assert results['isolated'] and point['status'] == 'ok' and point['steps_per_s'] > 0
  assert point['estimated_bytes'] == in_process['estimated_bytes']
  assert results['worker_environment']['XLA_PYTHON_CLIENT_MEM_FRACTION']


def test_profile_json_is_written_after_every_other_output(tmp_path, monkeypatch):
  """A campaign takes profile.json as the sign that the profile finished, so it comes last: the
  tables and the plot are on disk before it exists."""
  from lra_luna.profile import plot, sweep  # pylint: disable=import-outside-toplevel
  seen = []
  monkeypatch.setattr(tabulate, 'write_tables', lambda results, out_dir: seen.append(
      ('tables', (out_dir / run_folder.PROFILE_FILE).exists())))
  monkeypatch.setattr(plot, 'plot_scaling', lambda results, path: seen.append(
      ('plot', (path.parent / run_folder.PROFILE_FILE).exists())))
  sweep.write_outputs({'points': [], 'models': []}, tmp_path)
  assert seen == [('tables', False), ('plot', False)]
  assert json.loads((tmp_path / run_folder.PROFILE_FILE).read_text())['slopes'] == {
      'step_s': {}, 'memory': {}}


@pytest.mark.parametrize('extra, said', [
    ({'device_peak_bytes': 3 * 2**20}, 'device peak 3.0 MiB'),
    ({'device_peak_hidden': True, 'device_peak_after_compile_bytes': 5 * 2**20},
     "device peak not above the compile's (5.0 MiB)"),
    ({}, "no device peak (this device keeps no memory counters; the estimate is XLA's)"),
])
def test_the_progress_line_says_what_memory_it_shows(extra, said):
  point = {**fabricated_point('luna16', 1024, 2.0, 2**20), **extra}
  line = tabulate.describe(point)
  assert said in line and ' - MiB' not in line


def test_a_plugins_attention_is_named_once():
  points = [{**fabricated_point(name, 1024, 1.0, 1000), 'attention_implementation': what}
            for name, what in (('transformer', 'softmax, vanilla'),
                               ('RandomFeatureAttention', 'RandomFeatureAttention'))]
  note = tabulate.attention_note(fabricated_results(points, ['transformer',
                                                             'RandomFeatureAttention']))
  assert note == ('Attention per row: Transformer softmax, vanilla; RandomFeatureAttention '
                  '(a plug-in).')
