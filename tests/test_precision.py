"""Numerics of 16-bit training: float32 accumulation of the attention products and the kernel
gradients, dynamic loss scaling (a float16 overflow skips the step and is counted, the scale is
checkpointed), the fused Transformer's kernel choice and padding, the `fp16` word and
config.matmul_precision."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lra_luna import config_lib
from lra_luna.models import attention
from lra_luna.models import classifier as models
from lra_luna.models.nn import linear
from lra_luna.models.nn.dropout import Dropout
from lra_luna.training import checkpoints
from lra_luna.training import metrics
from lra_luna.training import run_folder
from lra_luna.training import steps
import tiny  # the shared tiny run and model (tests/tiny.py)


def small_model_config(model_name='luna16', **overrides):
  return tiny.model_config(model_name, **{'dropout': 0.0, 'attention_dropout': 0.0, **overrides})


@nnx.jit
def logits_of(model, batch):
  return model(batch)


def padded_batch(batch=2, n_real=9, n_pad=6, seed=3):
  """Token ids [batch, n_real + n_pad]: real ids 1..10, then padding (id 0); targets in 0..2."""
  rng = np.random.RandomState(seed)
  ids = np.concatenate([rng.randint(1, 11, (batch, n_real)), np.zeros((batch, n_pad), int)], 1)
  return {'inputs': jnp.asarray(ids), 'targets': jnp.asarray(rng.randint(0, 3, batch))}


# ----------------------------------------------------------------------------------------------
# float32 accumulation.
# ----------------------------------------------------------------------------------------------
def test_float16_scores_accumulate_in_float32_and_stay_finite():
  """q . k = 16 * 70 * 70 = 78,400 > float16's largest value (65,504): computed in float16 the
  scores are inf and the output NaN; accumulated in float32 the result is that of float32."""
  q = jnp.full((1, 1, 2, 16), 70.0, jnp.float16)
  k = jnp.full((1, 1, 3, 16), 70.0, jnp.float16).at[:, :, 0].set(60.0)
  v = jnp.arange(48, dtype=jnp.float16).reshape(1, 1, 3, 16) / 48
  mask = jnp.array([[True, True, False]])
  y = attention.scaled_dot_product(q, k, v, mask, Dropout(0.0), deterministic=True,
                                   rngs=None)
  want = attention.scaled_dot_product(*(t.astype(jnp.float32) for t in (q, k, v)), mask,
                                      Dropout(0.0), deterministic=True, rngs=None)
  assert y.dtype == jnp.float16 and np.isfinite(np.asarray(y, np.float32)).all()
  # Key 1 (score 78,400) beats key 0 (67,200) by far: the output is value row 1.
  np.testing.assert_allclose(np.asarray(y, np.float32), want, atol=1e-3)
  np.testing.assert_allclose(np.asarray(want)[0, 0, 0], np.asarray(v[0, 0, 1], np.float32),
                             atol=1e-3)


def test_float16_kernel_gradient_accumulates_in_float32():
  """A kernel gradient summed over 4,096 rows of 32 (131,072) overflows float16; dense's
  gradient of its float32 kernel comes back in float32, exact."""
  x = jnp.full((1, 4096, 4), 32.0, jnp.float16)
  kernel, bias = jnp.zeros((4, 2), jnp.float32), jnp.zeros((2,), jnp.float32)
  _, vjp = jax.vjp(linear.dense, x, kernel, bias)
  _, grad_kernel, grad_bias = vjp(jnp.ones((1, 4096, 2), jnp.float16))
  assert grad_kernel.dtype == jnp.float32
  np.testing.assert_array_equal(grad_kernel, np.full((4, 2), 131072.0))
  np.testing.assert_array_equal(grad_bias, np.full((2,), 4096.0))


@pytest.mark.parametrize('model_name', ['transformer', 'luna16', 'linformer', 'local'])
def test_float16_model_is_finite_and_close_to_float32(model_name):
  """Inputs scaled so that float16 scores would overflow; logits stay finite and near float32."""
  m16 = models.build_model(small_model_config(model_name, dtype='float16'), 0)
  m32 = models.build_model(small_model_config(model_name), 0)
  batch = padded_batch()
  logits16, logits32 = logits_of(m16, batch), logits_of(m32, batch)
  assert np.isfinite(logits16).all()
  np.testing.assert_allclose(logits16, logits32, atol=5e-2)


# ----------------------------------------------------------------------------------------------
# Dynamic loss scaling.
# ----------------------------------------------------------------------------------------------
def float16_state(scale=None):
  mc = small_model_config('luna16', dtype='float16')
  tx = optax.adamw(1e-3)
  graphdef, state, _ = steps.init_state(mc, 0, tx)
  if scale is not None:
    state['loss_scale']['scale'] = jnp.asarray(scale, jnp.float32)
  return graphdef, state, tx


def test_float16_state_has_a_loss_scale_and_float32_has_none():
  _, state, _ = float16_state()
  assert float(state['loss_scale']['scale']) == steps.INITIAL_LOSS_SCALE
  _, state32, _ = steps.init_state(small_model_config('luna16'), 0, optax.adamw(1e-3))
  assert 'loss_scale' not in state32


def test_float16_overflow_skips_the_update_and_is_counted():
  """A loss scale of 2**40 makes the float16 backward pass overflow: the parameters and the
  optimizer state are unchanged, the step is counted as skipped and the scale halves."""
  graphdef, state, tx = float16_state(scale=2.0**40)
  before = jax.tree.map(np.asarray, state)
  new, metrics = jax.jit(lambda s, b, k: steps.train_step(s, b, k, graphdef=graphdef, tx=tx))(
      state, padded_batch(), jax.random.key(0))
  assert float(metrics['skipped_steps']) == 1.0 and float(metrics['loss_scale']) == 2.0**40
  assert np.isfinite(float(metrics['train_loss']))  # The forward pass was fine.
  for key in ('params', 'opt_state'):
    jax.tree.map(np.testing.assert_array_equal, new[key], before[key])
  assert int(new['step']) == 1 and float(new['loss_scale']['scale']) == 2.0**39
  assert int(new['loss_scale']['good_steps']) == 0


def test_finite_float16_step_updates_and_matches_the_unscaled_gradient():
  """At the initial scale the step is applied, and the unscaled gradient is that of a step
  without loss scaling (same update, to float16's resolution)."""
  graphdef, state, tx = float16_state()
  step = jax.jit(lambda s, b, k: steps.train_step(s, b, k, graphdef=graphdef, tx=tx))
  unscaled = {k: v for k, v in state.items() if k != 'loss_scale'}
  new, metrics = step(state, padded_batch(), jax.random.key(0))
  plain, plain_metrics = step(unscaled, padded_batch(), jax.random.key(0))
  assert float(metrics['skipped_steps']) == 0.0
  assert int(new['loss_scale']['good_steps']) == 1
  np.testing.assert_allclose(metrics['grad_norm'], plain_metrics['grad_norm'], rtol=1e-2)
  moved = jax.tree.leaves(jax.tree.map(lambda a, b: np.abs(a - b).max(), new['params'],
                                       state['params']))
  assert max(moved) > 0
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-3), new['params'],
               plain['params'])


def test_loss_scale_doubles_after_a_period_of_finite_steps():
  scale = {'scale': jnp.float32(8.0), 'good_steps': jnp.int32(steps.LOSS_SCALE_PERIOD - 1)}
  grown = steps.next_loss_scale(scale, jnp.bool_(True))
  assert float(grown['scale']) == 16.0 and int(grown['good_steps']) == 0
  floor = steps.next_loss_scale({'scale': jnp.float32(1.0), 'good_steps': jnp.int32(5)},
                                jnp.bool_(False))
  assert float(floor['scale']) == steps.MIN_LOSS_SCALE and int(floor['good_steps']) == 0


class RecordingWriter:
  def __init__(self):
    self.rows = []

  def write_scalars(self, step, scalars):
    self.rows.append({'step': step, **scalars})


def monitor_after(step_metrics):
  """(the row a TrainingMonitor writes after these per-step metrics of one seed, or the
  TrainingError it raises)."""
  config = config_lib.load_config('configs/listops.py:luna16,quick')
  writer = RecordingWriter()
  monitor = metrics.TrainingMonitor(config, [0], ['w'], [writer], schedule=lambda s: 0.0,
                                    enabled=False)
  for i, values in enumerate(step_metrics, 1):
    monitor.step_done(i, {k: jnp.asarray([v], jnp.float32) for k, v in values.items()})
  monitor.flush(len(step_metrics))
  return writer.rows[-1]


def step_values(loss, grad_norm, skipped, scale):
  return {'train_loss': loss, 'train_accuracy': 0.5, 'grad_norm': grad_norm, 'param_norm': 1.0,
          'skipped_steps': skipped, 'loss_scale': scale}


def test_skipped_steps_are_counted_and_left_out_of_the_means():
  row = monitor_after([step_values(2.0, 1.0, 0.0, 8.0), step_values(float('inf'), float('nan'),
                                                                    1.0, 8.0),
                       step_values(4.0, 3.0, 0.0, 4.0)])
  assert row['skipped_steps'] == 1 and row['loss_scale'] == 4.0
  assert row['train_loss'] == 3.0 and row['grad_norm'] == 2.0


def test_overflow_at_loss_scale_one_in_every_step_stops_the_run():
  with pytest.raises(run_folder.TrainingError, match='overflowed, down to loss scale 1'):
    monitor_after([step_values(2.0, float('inf'), 1.0, 1.0)] * 2)
  # At a larger scale the run goes on: the halved scale may fit.
  assert monitor_after([step_values(2.0, float('inf'), 1.0, 4.0)])['skipped_steps'] == 1


def test_loss_scale_is_checkpointed_and_restored(tmp_path):
  graphdef, state, tx = float16_state(scale=512.0)
  state['loss_scale']['good_steps'] = jnp.int32(7)

  class Iterator:  # The grain iterator's state interface.
    def get_state(self):
      return {'position': 3}

    def set_state(self, s):
      self.state = s

  ckpt = checkpoints.Checkpoints(tmp_path)
  ckpt.save_latest(5, state, Iterator(), {'best': {}})
  ckpt.close()
  _, fresh, _ = float16_state()
  ckpt = checkpoints.Checkpoints(tmp_path)
  restored, _ = ckpt.restore_latest(fresh, Iterator())
  ckpt.close()
  assert float(restored['loss_scale']['scale']) == 512.0
  assert int(restored['loss_scale']['good_steps']) == 7


# ----------------------------------------------------------------------------------------------
# The fused Transformer.
# ----------------------------------------------------------------------------------------------
def test_fused_implementation_is_cudnn_only_on_gpu_with_16_bit_compute():
  assert attention.fused_implementation('gpu', jnp.bfloat16) == 'cudnn'
  assert attention.fused_implementation('cuda', jnp.float16) == 'cudnn'
  assert attention.fused_implementation('cuda', jnp.float32) == 'xla'
  assert attention.fused_implementation('tpu', jnp.bfloat16) == 'xla'
  assert attention.fused_implementation('cpu', jnp.float16) == 'xla'
  assert attention.fused_implementation('cuda', jnp.float16, head_dim=12) == 'xla'
  assert attention.attention_implementation('luna', 'vanilla', 'cuda', jnp.float16) == 'vanilla'
  assert attention.attention_implementation('softmax', 'fused', 'cuda', jnp.bfloat16) == 'cudnn'


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_fused_xla_path_equals_the_plain_transformer_with_padding(dtype):
  """Same parameters (same seed, same structure), padded batch: the fused model's logits are
  the vanilla one's."""
  plain = models.build_model(small_model_config('transformer', dtype=dtype), 0)
  fused = models.build_model(small_model_config('transformer_fused', dtype=dtype), 0)
  batch = padded_batch()
  atol = 1e-5 if dtype == 'float32' else 3e-2
  np.testing.assert_allclose(logits_of(fused, batch), logits_of(plain, batch), atol=atol)


def test_pad_to_even_appends_one_row_only_to_odd_lengths():
  x = jnp.ones((2, 5, 3, 4))
  assert attention.pad_to_even(x).shape == (2, 6, 3, 4)
  assert float(attention.pad_to_even(x)[:, 5].sum()) == 0
  assert attention.pad_to_even(jnp.ones((2, 6, 3, 4))).shape == (2, 6, 3, 4)


def test_target_platform_nests_and_restores():
  assert attention.current_platform() == jax.default_backend()
  with attention.target_platform('cuda'):
    with attention.target_platform('tpu'):
      assert attention.current_platform() == 'tpu'
    assert attention.current_platform() == 'cuda'
  assert attention.current_platform() == jax.default_backend()


# ----------------------------------------------------------------------------------------------
# Config: the fp16 word and matmul_precision.
# ----------------------------------------------------------------------------------------------
def test_fp16_word_sets_float16_compute_on_the_authors_protocol():
  config = config_lib.load_config('configs/listops.py:luna16,paper,fp16')
  assert config.model.dtype == 'float16' and config.protocol == 'paper'
  assert config_lib.load_config('configs/listops.py:luna16,paper').model.dtype == 'float32'


def test_matmul_precision_is_checked_in_one_line():
  config = config_lib.load_config('configs/listops.py:luna16,quick')
  assert config.matmul_precision == 'default'
  config.matmul_precision = 'float64'
  with pytest.raises(ValueError, match=r"config.matmul_precision = 'float64' is not valid"):
    config_lib.validate(config)


def test_highest_matmul_precision_reaches_the_lowered_step():
  """The run's precision is in the lowered dots (XLA's GPU and TPU backends read it there)."""
  x = jnp.ones((4, 8))
  kernel = jnp.ones((8, 8))
  lower = lambda: jax.jit(lambda a: linear.dense(a, kernel, jnp.zeros(8))).lower(x).as_text()
  assert 'HIGHEST' not in lower()
  with steps.matmul_precision('highest'):
    assert 'HIGHEST' in lower()
