"""Tests of lra_luna.models.synthesizer: each mode against its formula (dense references built
here), the properties of synthetic attention, padding, prefixes, jit, dtypes and options."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.attention import merge_heads, split_heads
from lra_luna.models.attention.synthesizer import MODES, SynthesizerAttention

DIM, HEADS, LENGTH, MAX_LENGTH = 16, 2, 40, 48
ALL_MODES = [(mode, dot_product) for mode in MODES for dot_product in (True, False)]


def make(seed=0, **options):
  return SynthesizerAttention(DIM, HEADS, max_length=MAX_LENGTH, rngs=nnx.Rngs(seed),
                              **{'factor_rank': 3, **options})


@nnx.jit(static_argnames='deterministic')
def run(module, x, mask, deterministic=True, rngs=None):
  """module(x, mask) compiled: one XLA program per configuration instead of one per op."""
  return module(x, mask, deterministic=deterministic, rngs=rngs)


@nnx.jit
def weights(module, x, mask):
  return module.attention_weights(x, mask)


def inputs(length=LENGTH, lengths=(LENGTH, 23), seed=0):
  # numpy draws: jax.random would compile a sampler per shape (seconds on a small CPU).
  x = jnp.asarray(np.random.default_rng(seed).normal(size=(len(lengths), length, DIM)),
                  jnp.float32)
  mask = jnp.arange(length)[None, :] < jnp.array(lengths)[:, None]
  return x, mask


def real_rows(y, mask):
  return np.asarray(y)[np.asarray(mask)]


def reference(module, x, mask, synthetic):
  """out(softmax(S) v), S = [q k^T / sqrt(d)] + synthetic [B or 1, H, n, n], padded keys
  masked: dense, float64."""
  to_heads = lambda layer: np.asarray(split_heads(layer(x), HEADS), np.float64)
  v = to_heads(module.value)
  scores = np.broadcast_to(np.asarray(synthetic, np.float64), (x.shape[0],) + synthetic.shape[1:])
  if module.dot_product:
    q, k = to_heads(module.query), to_heads(module.key)
    scores = scores + np.einsum('bhnd,bhmd->bhnm', q, k) / math.sqrt(q.shape[-1])
  scores = np.where(np.asarray(mask)[:, None, None, :], scores, -1e30)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  y = np.einsum('bhnm,bhmd->bhnd', probs, v)
  return module.out(merge_heads(jnp.asarray(y, jnp.float32))), probs


def dense_synthetic_reference(module, x):
  """Row i of head h: W2 relu(W1 x_i)_h + b2, cut to n; W1 x_i's features [h d, (h+1) d) are
  head h's (split_heads' convention), W2 shared by the heads. [B, H, n, n], float64."""
  n = x.shape[1]
  hidden = np.maximum(np.asarray(module.dense_hidden(x), np.float64), 0.0)
  kernel = np.asarray(module.dense_out.kernel[...], np.float64)
  bias = np.asarray(module.dense_out.bias[...], np.float64)
  d = DIM // HEADS
  scores = np.zeros((x.shape[0], HEADS, n, n))
  for head in range(HEADS):
    for i in range(n):
      scores[:, head, i] = (hidden[:, i, head * d:(head + 1) * d] @ kernel + bias)[:, :n]
  return scores


# Formulas -----------------------------------------------------------------------------------


def test_zero_random_matrix_is_vanilla_softmax_attention():
  module = make()
  x, mask = inputs()
  vanilla, _ = reference(module, x, mask, np.zeros((1, HEADS, LENGTH, LENGTH)))
  # LRA's init is not zero: with R the output differs (so the comparison below can fail) ...
  assert not np.allclose(real_rows(run(module, x, mask), mask), real_rows(vanilla, mask),
                         atol=1e-3)
  module.random[...] = jnp.zeros_like(module.random[...])
  np.testing.assert_allclose(real_rows(run(module, x, mask), mask), real_rows(vanilla, mask),
                             atol=1e-5)


@pytest.mark.parametrize('mode, dot_product', ALL_MODES)
def test_matches_dense_reference(mode, dot_product):
  module = make(mode=mode, dot_product=dot_product)
  x, mask = inputs()
  if mode == 'random':
    synthetic = module.random[...][None, :, :LENGTH, :LENGTH]
  elif mode == 'factorized_random':
    synthetic = np.einsum('hik,hkj->hij', module.factor_left[...][:, :LENGTH],
                          module.factor_right[...][:, :, :LENGTH])[None]
  else:
    synthetic = dense_synthetic_reference(module, x)
  np.testing.assert_allclose(module.synthetic_scores(x), synthetic, atol=1e-5)
  expected, probs = reference(module, x, mask, synthetic)
  np.testing.assert_allclose(real_rows(run(module, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)
  attention = weights(module, x, mask)
  assert attention.shape == (2, HEADS, LENGTH, LENGTH)
  np.testing.assert_allclose(attention[0], probs[0], atol=1e-5)
  np.testing.assert_allclose(attention[1, :, :23], probs[1, :, :23], atol=1e-5)
  assert np.all(np.asarray(attention)[1, :, :, 23:] == 0)  # padded keys: never attended


def test_pure_random_attention_ignores_x_and_is_affine_in_x():
  module = make(mode='random', dot_product=False)
  x1, mask = inputs(seed=1)
  x2, _ = inputs(seed=2)
  np.testing.assert_array_equal(weights(module, x1, mask), weights(module, x2, mask))
  assert module.query is None and module.key is None  # only V (and W_o) read x
  # y = W_o (P (W_v x + b_v)) + b_o with P fixed: affine combinations are preserved.
  mix = run(module, 0.3 * x1 + 0.7 * x2, mask)
  np.testing.assert_allclose(mix, 0.3 * run(module, x1, mask) + 0.7 * run(module, x2, mask),
                             atol=1e-5)
  # With the dot product the attention depends on x (the checks above can fail).
  mixed = make(mode='random', dot_product=True)
  assert not np.allclose(weights(mixed, x1, mask), weights(mixed, x2, mask), atol=1e-3)


def test_dense_row_depends_only_on_its_token():
  module = make(mode='dense', dot_product=False)
  x, mask = inputs(lengths=(LENGTH, LENGTH))
  i, j = 7, 30
  base = np.asarray(weights(module, x, mask))
  changed = np.asarray(weights(module, x.at[:, j].add(3.0), mask))
  rows = np.arange(LENGTH) != j
  np.testing.assert_allclose(changed[:, :, rows], base[:, :, rows], atol=1e-6)
  assert not np.allclose(changed[:, :, j], base[:, :, j], atol=1e-3)
  assert not np.allclose(base[:, :, i], base[:, :, j], atol=1e-3)  # rows differ per token


def test_factorized_random_has_rank_at_most_k():
  module = make(mode='factorized_random', factor_rank=3)
  synthetic = np.asarray(module.synthetic_scores(inputs()[0]), np.float64)[0]
  for head in range(HEADS):
    assert np.linalg.matrix_rank(synthetic[head], tol=1e-5) == 3
  assert np.linalg.matrix_rank(np.asarray(make().synthetic_scores(inputs()[0]))[0, 0]) > 3


def test_parameters_of_each_mode():
  random = make(mode='random', dot_product=False)
  assert random.random[...].shape == (HEADS, MAX_LENGTH, MAX_LENGTH)
  assert random.query is None and random.key is None
  factorized = make(mode='factorized_random')
  assert factorized.factor_left[...].shape == (HEADS, MAX_LENGTH, 3)
  assert factorized.factor_right[...].shape == (HEADS, 3, MAX_LENGTH)
  assert make(mode='dense').dense_out.kernel[...].shape == (DIM // HEADS, MAX_LENGTH)
  # LRA's init: xavier-uniform of the [H, L, L] kernel, limit sqrt(6 / (2 H L)).
  limit = math.sqrt(3.0 / (HEADS * MAX_LENGTH))
  r = np.asarray(random.random[...])
  assert np.abs(r).max() <= limit and np.abs(r).max() > 0.9 * limit


# Padding, prefixes ---------------------------------------------------------------------------


@pytest.mark.parametrize('mode, dot_product', ALL_MODES)
def test_padding_invariance_and_prefix_consistency(mode, dot_product):
  module = make(mode=mode, dot_product=dot_product)
  x, mask = inputs()
  noise = 10.0 * inputs(seed=7)[0]
  x_changed = jnp.where(mask[..., None], x, noise)
  y = run(module, x, mask)
  np.testing.assert_allclose(real_rows(y, mask), real_rows(run(module, x_changed, mask), mask),
                             atol=1e-5)
  # The second sequence alone, unpadded, gives its rows of the padded batch.
  short = run(module, x[1:, :23], mask[1:, :23])
  np.testing.assert_allclose(short[0], y[1, :23], atol=1e-5)


def test_rejects_sequences_beyond_max_length():
  x, mask = inputs(length=MAX_LENGTH + 1, lengths=(10,))
  with pytest.raises(ValueError, match=r'49 > max_length 48.*raise `max_length`'):
    make()(x, mask)


# Protocol: jit, dtypes, dropout, fully padded rows ------------------------------------------


def test_jit_matches_eager():
  module = make(mode='dense')
  x, mask = inputs()
  np.testing.assert_allclose(run(module, x, mask), module(x, mask), atol=1e-5)


@pytest.mark.parametrize('mode', MODES)
def test_bfloat16_runs_and_is_close_to_float32(mode):
  x, mask = inputs()
  y32 = run(make(mode=mode), x, mask)
  y16 = run(make(mode=mode, dtype=jnp.bfloat16), x.astype(jnp.bfloat16), mask)
  assert y16.dtype == jnp.bfloat16
  np.testing.assert_allclose(real_rows(y16.astype(jnp.float32), mask), real_rows(y32, mask),
                             atol=0.05, rtol=0.05)


def test_training_mode_with_dropout_runs():
  module = make(attention_dropout=0.1)
  x, mask = inputs()
  y = run(module, x, mask, False, nnx.Rngs(dropout=3))
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()
  assert not np.allclose(y, run(module, x, mask, False, nnx.Rngs(dropout=4)))


@pytest.mark.parametrize('mode', MODES)
def test_fully_padded_row_is_finite(mode):
  module = make(mode=mode, dot_product=False)
  x, mask = inputs(lengths=(LENGTH, 0))
  assert np.isfinite(np.asarray(run(module, x, mask))).all()


# Options ------------------------------------------------------------------------------------


@pytest.mark.parametrize('option, value, valid', [
    ('mode', 'dense_random', "one of 'random', 'factorized_random', 'dense'"),
    ('mode', 'Random', "one of 'random', 'factorized_random', 'dense'"),
    ('factor_rank', 0, 'an integer >= 1'),
    ('factor_rank', 2.5, 'an integer >= 1'),
    ('dot_product', 'no', 'True or False'),
])
def test_check_options_refuses(option, value, valid):
  message = f'^SynthesizerAttention option {option} = {value!r} is not valid: {valid}'
  with pytest.raises(ValueError, match=message):
    SynthesizerAttention.check_options(max_length=64, **{option: value})
  with pytest.raises(ValueError, match=message):
    make(**{option: value})
  SynthesizerAttention.check_options(max_length=64)  # the defaults pass

