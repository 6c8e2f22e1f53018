"""Tests of the baseline attentions: every registered one (lra_luna/registry.py) for shapes, padding,
jit, dtypes and its option checks; the four of lra_luna.models.baselines against their formulas
(the others have their own test files)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import registry
from lra_luna.models.attention import merge_heads, split_heads
from lra_luna.models.attention.baselines import (LocalAttention, PerformerAttention, RandomFeatures,
                                       linear_attention, linear_attention_direct,
                                       orthogonal_gaussian_features)

DIM, HEADS, LENGTH = 16, 2, 40
BASELINES = sorted(registry.baseline_classes())


def make(name, seed=0, **options):
  """The registered attention with its small test options (registry entry's test_options)."""
  options = {**registry.get(name).test_options, **options}
  return registry.attention_class(name)(DIM, HEADS, max_length=64, rngs=nnx.Rngs(seed),
                                        **options)


def inputs(length=LENGTH, lengths=(LENGTH, 23), seed=0):
  x = jax.random.normal(jax.random.key(seed), (len(lengths), length, DIM))
  mask = jnp.arange(length)[None, :] < jnp.array(lengths)[:, None]
  return x, mask


def projected_heads(module, x):
  """q (unscaled), k, v [B, H, n, d] from the module's own projections."""
  return tuple(split_heads(layer(x), HEADS) for layer in (module.query, module.key, module.value))


def softmax_attention_reference(module, x, allowed):
  """out(softmax(q k^T / sqrt(d)) v) with allowed [B, n, n] (True = query may see key)."""
  q, k, v = projected_heads(module, x)
  scores = jnp.einsum('bhnd,bhmd->bhnm', q, k) / jnp.sqrt(q.shape[-1])
  scores = jnp.where(allowed[:, None], scores, -1e30)
  return module.out(merge_heads(jax.nn.softmax(scores, axis=-1) @ v))


def real_rows(y, mask):
  return np.asarray(y)[np.asarray(mask)]


@pytest.mark.parametrize('name', BASELINES)
def test_output_shape_and_dtype(name):
  x, mask = inputs()
  y = make(name)(x, mask)
  assert y.shape == x.shape and y.dtype == jnp.float32
  assert np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize('name', BASELINES)
def test_padding_invariance(name):
  module = make(name)
  x, mask = inputs()
  noise = 10.0 * jax.random.normal(jax.random.key(7), x.shape)
  x_changed = jnp.where(mask[..., None], x, noise)
  np.testing.assert_allclose(real_rows(module(x, mask), mask),
                             real_rows(module(x_changed, mask), mask), atol=1e-5)


@pytest.mark.parametrize('name', BASELINES)
def test_jit_matches_eager(name):
  module = make(name)
  x, mask = inputs()
  jitted = nnx.jit(lambda m, x, mask: m(x, mask))
  np.testing.assert_allclose(jitted(module, x, mask), module(x, mask), atol=1e-5)


@pytest.mark.parametrize('name', BASELINES)
def test_training_mode_with_dropout_runs(name):
  module = make(name, attention_dropout=0.1)
  x, mask = inputs()
  y = module(x, mask, deterministic=False, rngs=nnx.Rngs(dropout=3))
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize('name', BASELINES)
def test_bfloat16_compute(name):
  module = make(name, dtype=jnp.bfloat16)
  x, mask = inputs()
  y = module(x.astype(jnp.bfloat16), mask)
  assert y.dtype == jnp.bfloat16 and np.isfinite(np.asarray(y, np.float32)).all()


@pytest.mark.parametrize('name', BASELINES)
def test_fully_padded_row_is_finite(name):
  x, mask = inputs(lengths=(LENGTH, 0))
  assert np.isfinite(np.asarray(make(name)(x, mask))).all()


@pytest.mark.parametrize('name', BASELINES)
def test_constructor_options_from_config_exist(name):
  cls = registry.attention_class(name)
  model = registry.get(name)
  for option in cls.CONFIG_OPTIONS:
    assert option in cls.__init__.__kwdefaults__, (name, option)
  for options in (model.options, model.test_options, *model.task_options.values()):
    assert set(options) <= set(cls.CONFIG_OPTIONS), (name, options)
    cls.check_options(max_length=64, **options)  # the registry's values are valid


@pytest.mark.parametrize('name, options, message', [
    ('linformer', {'projected_length': 0}, 'projected_length = 0 .*integer >= 1'),
    ('performer', {'num_features': -3}, 'num_features = -3 .*integer >= 1'),
    ('local', {'block_size': 0}, 'block_size = 0 .*integer >= 1'),
])
def test_impossible_option_is_one_line(name, options, message):
  with pytest.raises(ValueError, match=message) as error:
    make(name, **options)
  assert '\n' not in str(error.value) and registry.attention_class(name).__name__ in str(error.value)


# Linformer ---------------------------------------------------------------------------------


def test_linformer_matches_formula_with_first_n_columns():
  module = make('linformer')
  x, mask = inputs()
  q, k, v = projected_heads(module, x)
  real = mask[:, None, :, None]
  e = module.key_length_proj[...][:, :LENGTH]
  f = module.value_length_proj[...][:, :LENGTH]
  k_proj = jnp.einsum('kn,bhnd->bhkd', e, jnp.where(real, k, 0))
  v_proj = jnp.einsum('kn,bhnd->bhkd', f, jnp.where(real, v, 0))
  scores = jnp.einsum('bhnd,bhkd->bhnk', q, k_proj) / jnp.sqrt(q.shape[-1])
  expected = module.out(merge_heads(jax.nn.softmax(scores, axis=-1) @ v_proj))
  np.testing.assert_allclose(module(x, mask), expected, atol=1e-5)


def test_linformer_rejects_sequences_beyond_max_length():
  module = make('linformer')  # max_length=64
  x, mask = inputs(length=65, lengths=(65, 10))
  with pytest.raises(ValueError, match=r'65.*64.*raise `max_length`'):
    module(x, mask)


# Performer ---------------------------------------------------------------------------------


def test_orthogonal_features_blocks_are_orthogonal():
  features = orthogonal_gaussian_features(jax.random.key(0), 28, 8)  # 3 full blocks + 4 rows
  assert features.shape == (28, 8)
  for start in (0, 8, 16, 24):
    block = features[start:start + 8]
    gram = block @ block.T
    np.testing.assert_allclose(gram - jnp.diag(jnp.diag(gram)), 0, atol=1e-4)


def test_performer_approaches_softmax_attention():
  x, mask = inputs()
  # The estimator's relative variance grows like exp(|q + k|^2) (paper Lemma 2); half-scale
  # inputs keep q, k where 4096 features should be accurate to a few percent.
  x = 0.5 * x
  allowed = jnp.broadcast_to(mask[:, None, :], (2, LENGTH, LENGTH))
  errors = {}
  for num_features in (16, 4096):
    errors[num_features] = []
    for seed in range(2):
      module = PerformerAttention(DIM, HEADS, max_length=64, num_features=num_features,
                                  rngs=nnx.Rngs(seed))
      exact = softmax_attention_reference(module, x, allowed)
      error = real_rows(module(x, mask) - exact, mask)
      errors[num_features].append(np.sqrt(np.mean(error**2)) / np.std(real_rows(exact, mask)))
  coarse, fine = np.mean(errors[16]), np.mean(errors[4096])
  # Relative RMS error; 1/sqrt(m) scaling predicts a 16x drop from 16 to 4096 features.
  assert fine < coarse / 4, errors
  assert fine < 0.05, errors


def test_performer_features_are_not_params():
  module = make('performer')
  params = nnx.state(module, nnx.Param)
  assert 'features' not in params
  assert isinstance(module.features, RandomFeatures)
  assert not isinstance(module.features, nnx.Param)
  assert nnx.state(module, RandomFeatures)['features'][...].shape == (32, DIM // HEADS)


def test_performer_features_fixed_unless_redraw_requested():
  x, mask = inputs()
  fixed = make('performer')
  stored = np.asarray(fixed.features[...])
  eval_out = fixed(x, mask)
  train_out = fixed(x, mask, deterministic=False, rngs=nnx.Rngs(dropout=1))
  np.testing.assert_array_equal(eval_out, train_out)
  np.testing.assert_array_equal(fixed.features[...], stored)

  redraw = make('performer', redraw_features=True)
  stored = np.asarray(redraw.features[...])
  np.testing.assert_array_equal(redraw(x, mask), eval_out)  # same seed, same init draw
  rngs = nnx.Rngs(dropout=1)
  first = redraw(x, mask, deterministic=False, rngs=rngs)
  second = redraw(x, mask, deterministic=False, rngs=rngs)
  assert not np.allclose(first, eval_out) and not np.allclose(first, second)
  np.testing.assert_array_equal(redraw.features[...], stored)  # a redraw is for that call only
  np.testing.assert_array_equal(redraw(x, mask), eval_out)
  with pytest.raises(ValueError, match='rngs'):
    redraw(x, mask, deterministic=False)


def test_performer_redraw_prefers_features_stream():
  x, mask = inputs()
  module = make('performer', redraw_features=True)
  run = lambda features_seed: module(x, mask, deterministic=False,
                                     rngs=nnx.Rngs(dropout=0, features=features_seed))
  np.testing.assert_array_equal(run(1), run(1))
  assert not np.allclose(run(1), run(2))


# Linear Transformer ------------------------------------------------------------------------


def test_linear_attention_fast_form_equals_direct_formula():
  q, k, v = jax.random.normal(jax.random.key(0), (3, 2, HEADS, LENGTH, DIM // HEADS))
  for key_mask in (None, inputs(lengths=(LENGTH, 9))[1]):
    np.testing.assert_allclose(linear_attention(q, k, v, key_mask),
                               linear_attention_direct(q, k, v, key_mask), rtol=1e-5, atol=1e-5)


def test_linear_transformer_module_uses_linear_attention():
  module = make('linear_transformer')
  x, mask = inputs()
  q, k, v = projected_heads(module, x)
  expected = module.out(merge_heads(linear_attention_direct(q, k, v, mask)))
  np.testing.assert_allclose(module(x, mask), expected, atol=1e-5)


# Local attention ---------------------------------------------------------------------------


@pytest.mark.parametrize('length, lengths, block_size',
                         [(48, (48, 48), 16),    # exact multiple, no padding
                          (40, (40, 23), 16),    # internal padding + padding mask
                          (40, (40, 13), 50)])   # shorter than one block
def test_local_equals_block_diagonal_softmax(length, lengths, block_size):
  module = LocalAttention(DIM, HEADS, max_length=64, block_size=block_size, rngs=nnx.Rngs(0))
  x, mask = inputs(length, lengths)
  block = jnp.arange(length) // block_size
  allowed = (block[:, None] == block[None, :])[None] & mask[:, None, :]
  expected = softmax_attention_reference(module, x, allowed)
  np.testing.assert_allclose(real_rows(module(x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)
