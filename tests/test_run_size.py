"""What a run says before it runs (run_size): the default model marked, the size and time bound
against their formulas, --print_config's timed steps, the long-run warning, --help's lists; and
the first progress line after the first timed steps, not after log_every."""

import types

import jax.numpy as jnp
import pytest

from lra_luna import config_lib
from lra_luna import registry
from lra_luna import run_size
from lra_luna import tasks
from lra_luna.training import metrics
import tiny

# ml_collections' config_flags loads config files with the deprecated load_module().
pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')


@pytest.mark.parametrize('preset, given', [
    ('listops.py:', False), ('listops.py:quick', False), ('listops.py:paper,smoke', False),
    ('listops.py:luna16', True), ('listops.py:quick,transformer', True),
    ('listops.py:model=bigbird', True)])
def test_model_word_given(preset, given):
  assert run_size.model_word_given(preset) is given


def test_the_opening_line_marks_the_default_model_and_a_full_size_run():
  default = run_size.opening_line(config_lib.load_config('configs/listops.py'))
  assert default.startswith('listops / luna16 (the default model')
  assert 'full size: 5000 steps of batch 32 x 2000 tokens' in default
  named = run_size.opening_line(config_lib.load_config('configs/listops.py:transformer,quick'))
  assert named.startswith('listops / transformer, LRA protocol, SHORTENED (quick config')
  assert 'default' not in named


def test_time_bound_is_steps_times_flops_over_speed():
  assert run_size.time_bound_s(2.5e12, 400, 1e11) == pytest.approx(400 * 25.0)


def test_long_run_warning_above_the_threshold_names_smoke_and_quick():
  config = config_lib.load_config('configs/pathfinder.py:bigbird')
  hours = run_size.LONG_RUN_HOURS
  assert run_size.long_run_warning(config, hours * 3600 - 1) is None
  warning = run_size.long_run_warning(config, hours * 3600 * 10)
  assert warning.startswith(f'warning: this run takes at least {hours * 10:.0f} h')
  assert ('configs/pathfinder.py:bigbird,smoke' in warning
          and 'configs/pathfinder.py:bigbird,quick' in warning)
  smoke = config_lib.load_config('configs/pathfinder.py:bigbird,smoke')
  assert run_size.long_run_warning(smoke, hours * 3600 * 10) is None


def test_a_device_that_counts_only_compiled_steps_gets_the_count_lowered_for_the_cpu(
    tmp_path, monkeypatch):
  """JAX's GPU plugin gives no count for a lowered step (an H200 printed 'time: unknown'): the
  same step is then lowered for the CPU, with the CPU's attention kernel, and counted there."""
  import jax  # pylint: disable=g-import-not-at-top
  from lra_luna.models.attention import softmax  # pylint: disable=g-import-not-at-top
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top
  config = tiny.config(tmp_path / 'data')
  # profile --flops_only (campaign --estimate) counts the same way.
  assert measure.lowered_flops_point(config)['flops_per_step'] == run_size.step_cost(config)[1]
  expected = run_size.step_cost(config)
  assert expected[1] > 0
  real_count, platforms = measure.compiled_flops, []

  def gpu_plugin_count(lowered):  # None on the device, as JAX's GPU plugin; the CPU's count
    platforms.append(softmax.current_platform())
    return None if platforms[-1] == 'gpu' else real_count(lowered)

  monkeypatch.setattr(measure, 'compiled_flops', gpu_plugin_count)
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  assert run_size.step_cost(config) == expected
  assert platforms == ['gpu', 'cpu']


def test_describe_reads_no_data_and_counts_parameters(tmp_path):
  config = tiny.config(tmp_path / 'data')
  lines, seconds = run_size.describe(config, steps_left=10)
  assert not (tmp_path / 'data').exists()  # nothing read, nothing generated
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top
  _, _, _, _, num_params = measure.build_step(config)
  assert lines[1] == f'size: {num_params / 1e6:.3g} M parameters.'
  assert str(tmp_path / 'data' / 'listops-quick') in lines[2] and 'num_train 400' in lines[2]
  assert lines[3].startswith('time: at least') and 'for 10 steps' in lines[3] and seconds > 0


@pytest.mark.parametrize('measure, bound_s, timed', [
    (True, 0.01, True),    # --print_config, a step cheap to time: timed
    (True, 5.0, False),    # a step too large to time here in seconds: the bound
    (False, 0.01, False),  # a run's own first lines: the bound (training times itself)
])
def test_print_config_times_a_cheap_step_and_bounds_the_others(tmp_path, monkeypatch, measure,
                                                               bound_s, timed):
  config = tiny.config(tmp_path / 'data')
  flops_per_s = 1e11
  monkeypatch.setattr(run_size, 'step_cost', lambda c: (2_000_000, bound_s * flops_per_s))
  monkeypatch.setattr(run_size, 'matmul_flops_per_s', lambda: flops_per_s)
  monkeypatch.setattr(run_size, 'measured_step_s', lambda c: 0.25)
  lines, seconds = run_size.describe(config, steps_left=1600, measure=measure)
  if timed:  # 1600 steps x 0.25 s = 400 s
    assert seconds == pytest.approx(400.0)
    assert lines[3].startswith('time: about 0:06:40 (h:mm:ss) of training for 1600 steps on ')
    assert f'the median of {run_size.MEASURED_STEPS} steps timed now' in lines[3]
  else:
    assert seconds == pytest.approx(run_size.time_bound_s(bound_s * flops_per_s, 1600,
                                                          flops_per_s))
    assert lines[3].startswith('time: at least') and 'the real time is longer' in lines[3]


def test_a_measured_step_is_the_median_of_the_training_step_vmapped_over_one_seed(
    tmp_path, monkeypatch):
  """Timed as training runs it (vmapped over a seed axis of one), after one untimed step; a step
  that does not fit the device gives no time."""
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top
  config = tiny.config(tmp_path / 'data')
  calls = []

  def timed_steps(step, state, batch, dropout_key, *, warmup, repeats):
    calls.append((warmup, repeats, batch['inputs'].shape, dropout_key.shape))
    return [0.3, 0.1, 0.2]

  monkeypatch.setattr(measure, 'timed_steps', timed_steps)
  assert run_size.measured_step_s(config) == 0.2
  assert calls == [(1, run_size.MEASURED_STEPS, (1, config.batch_size, config.max_length), (1,))]

  def out_of_memory(config):
    raise MemoryError('no room')

  monkeypatch.setattr(measure, 'build_step', out_of_memory)
  assert run_size.measured_step_s(config) is None


def test_config_help_lists_every_task_model_and_word():
  text = config_lib.config_help()
  assert set(config_lib.WORD_HELP) == set(config_lib.WORDS)
  for name in [*tasks.TASKS, *registry.MODELS, *(w for w in config_lib.WORDS if w != 'model')]:
    assert name in text, name


def test_the_first_progress_line_follows_the_first_timed_steps(capsys, monkeypatch):
  monkeypatch.delenv('CI', raising=False)
  config = types.SimpleNamespace(num_train_steps=1000, progress_bar=True)
  monitor = metrics.TrainingMonitor(config, [0], [], [], schedule=None, enabled=True)
  assert monitor.mode == 'lines'  # pytest's stderr is no terminal
  for step in range(1, 1 + metrics.EARLY_TIMED_STEPS + 1):
    monitor.step_done(step, {'train_loss': jnp.ones(())})
  assert capsys.readouterr().err == ''  # the last step is still in flight
  monitor.step_done(metrics.EARLY_TIMED_STEPS + 2, {'train_loss': jnp.ones(())})
  err = capsys.readouterr().err
  step = metrics.EARLY_TIMED_STEPS + 1
  assert err.startswith(f'train step {step}/1000: ') and 'steps/s' in err and ' left ' in err
  monitor.step_done(metrics.EARLY_TIMED_STEPS + 3, {'train_loss': jnp.ones(())})
  assert capsys.readouterr().err == ''  # once
