"""Gradient accumulation (config.grad_accumulation_steps): the accumulated step is the
single-batch step (float32 and float16 with loss scaling), bad values are refused in one line,
and the compiled step needs less memory."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra_luna import config_lib
from lra_luna import profile
from lra_luna.training import steps
import tiny  # the shared tiny run and model (tests/tiny.py)


def small_model(model_name='transformer', **overrides):
  return tiny.model_config(model_name, **{'num_layers': 1, 'dropout': 0.0,
                                          'attention_dropout': 0.0, **overrides})


def random_batch(rows=8, length=12, seed=0):
  rng = np.random.RandomState(seed)
  return {'inputs': jnp.asarray(rng.randint(1, 11, (rows, length))),
          'targets': jnp.asarray(rng.randint(0, 3, rows))}


def one_step(model_cfg, accumulation_steps, batch):
  # Plain SGD: Adam's normalisation would blow a 1e-12 difference of a near-zero gradient up
  # into a full learning-rate step.
  tx = optax.sgd(0.5)
  graphdef, state, _ = steps.init_state(model_cfg, 0, tx)
  step = jax.jit(lambda s, b, k: steps.train_step(s, b, k, graphdef=graphdef, tx=tx,
                                                  accumulation_steps=accumulation_steps))
  return step(state, batch, jax.random.key(0))


@pytest.mark.parametrize('accumulation_steps', [2, 4])
def test_accumulated_step_equals_the_single_batch_step(accumulation_steps):
  batch = random_batch()
  (plain, plain_metrics) = one_step(small_model(), 1, batch)
  (accumulated, metrics) = one_step(small_model(), accumulation_steps, batch)
  for key in ('train_loss', 'train_accuracy', 'grad_norm', 'param_norm'):
    np.testing.assert_allclose(metrics[key], plain_metrics[key], rtol=1e-5, err_msg=key)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               accumulated['params'], plain['params'])


def test_accumulated_gradient_is_the_mean_of_the_micro_batches():
  """batch_gradients over 2 micro-batches against the mean of the two halves' own gradients
  (micro-batch i holds rows i, i + 2, ...)."""
  model_cfg = small_model()
  graphdef, state, _ = steps.init_state(model_cfg, 0, optax.adamw(1e-2))
  batch, key = random_batch(rows=4), jax.random.key(1)
  grad = lambda b, k: jax.jit(lambda b: steps.batch_gradients(
      state['params'], state['constants'], b, key, None, graphdef=graphdef,
      accumulation_steps=k)[0])(b)
  even, odd = (jax.tree.map(lambda x, i=i: x[i::2], batch) for i in (0, 1))
  expected = jax.tree.map(lambda a, b: (a + b) / 2, grad(even, 1), grad(odd, 1))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
               grad(batch, 2), expected)


def test_float16_accumulated_step_with_loss_scaling_matches_the_single_batch_step():
  batch = random_batch()
  plain, plain_metrics = one_step(small_model(dtype='float16'), 1, batch)
  accumulated, metrics = one_step(small_model(dtype='float16'), 4, batch)
  assert float(metrics['skipped_steps']) == 0.0
  assert int(accumulated['loss_scale']['good_steps']) == 1
  np.testing.assert_allclose(metrics['grad_norm'], plain_metrics['grad_norm'], rtol=1e-2)
  np.testing.assert_allclose(metrics['train_loss'], plain_metrics['train_loss'], rtol=1e-2)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-3), accumulated['params'],
               plain['params'])


@pytest.mark.parametrize('value', [0, -2, 3, 2.0])
def test_bad_accumulation_is_refused_in_one_line(value):
  config = config_lib.base_config()
  with pytest.raises(ValueError) as error:
    config_lib.check_accumulation(value, 32)
  message = str(error.value)
  assert 'config.grad_accumulation_steps' in message and '\n' not in message
  with pytest.raises(ValueError, match='per-device batch'):
    config_lib.check_accumulation(4, 6, devices=2)
  config_lib.check_accumulation(4, 32)  # a divisor is fine
  assert config.grad_accumulation_steps == 1


def test_accumulation_shrinks_the_compiled_step_memory():
  """A Transformer step whose attention activations dominate (length 256, batch 16): four
  micro-batches need well under half the memory of the whole batch at once."""
  model_cfg = small_model('transformer', max_length=256)
  tx = optax.adamw(1e-3)
  graphdef, state, _ = steps.init_state(model_cfg, 0, tx)
  batch = {'inputs': jax.ShapeDtypeStruct((16, 256), jnp.int32),
           'targets': jax.ShapeDtypeStruct((16,), jnp.int32)}
  sizes = {}
  for k in (1, 4):
    step = jax.jit(lambda s, b, key, k=k: steps.train_step(s, b, key, graphdef=graphdef, tx=tx,
                                                           accumulation_steps=k))
    compiled = step.lower(state, batch, jax.random.key(0)).compile()
    sizes[k] = profile.compiled_memory(compiled)['estimated_bytes']
  assert sizes[4] < 0.5 * sizes[1], sizes


def test_config_with_an_accumulation_that_does_not_divide_the_batch_is_refused():
  config = config_lib.load_config('configs/listops.py:luna16,quick',
                                  ('--config.grad_accumulation_steps=7',))
  with pytest.raises(ValueError, match=r'config\.grad_accumulation_steps = 7 must be a whole '
                     r'number >= 1 that divides the batch_size'):
    config_lib.validate(config)
  config.grad_accumulation_steps = 2
  config_lib.validate(config)
