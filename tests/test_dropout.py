"""Dropout's cheaper masks keep the distribution of independent Bernoulli(keep rate) draws and an
expected output equal to the input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.nn import dropout as dropout_lib

SIZE = 1 << 20  # Enough draws for a 5-sigma band of about 2e-3 on a keep rate.


def within_five_sigma(observed_rate, p, n):
  return abs(observed_rate - p) <= 5 * np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize('rate', [0.1, 0.3, 0.5])
def test_keep_rate_is_the_threshold_rate_and_close_to_one_minus_rate(rate):
  keep = 1.0 - rate
  threshold = dropout_lib.keep_threshold(keep)
  assert abs(threshold / 2**16 - keep) <= 2**-17
  mask = np.asarray(dropout_lib.keep_mask(jax.random.key(0), (4, SIZE // 4), keep))
  assert within_five_sigma(mask.mean(), threshold / 2**16, mask.size)


def test_kept_values_are_scaled_so_the_expectation_is_the_input():
  x = jnp.linspace(-2.0, 3.0, 4096).reshape(64, 64)
  y = np.asarray(dropout_lib.dropout(x, 0.3, jax.random.key(1)))
  kept = y != 0
  scale = 2**16 / dropout_lib.keep_threshold(0.7)
  np.testing.assert_allclose(y[kept], np.asarray(x)[kept] * scale, rtol=1e-6)
  assert scale * dropout_lib.keep_threshold(0.7) / 2**16 == 1.0  # E[y] = x P(keep) scale = x.


def test_masks_are_independent_across_elements_and_keys():
  keep = 0.7
  p = dropout_lib.keep_threshold(keep) / 2**16
  mask = np.asarray(dropout_lib.keep_mask(jax.random.key(2), (SIZE,), keep))
  other = np.asarray(dropout_lib.keep_mask(jax.random.key(3), (SIZE,), keep))
  pairs = {
      'same 32-bit word': (mask[0::2], mask[1::2]),
      'neighbouring words': (mask[1:-1:2], mask[2::2]),
      'the two halves of one Threefry block': (mask[:SIZE // 2], mask[SIZE // 2:]),
      'two keys': (mask, other),
  }
  for name, (a, b) in pairs.items():
    assert within_five_sigma((a & b).mean(), p * p, a.size), name
  assert within_five_sigma(other.mean(), p, SIZE)


def test_odd_sizes_and_any_key_implementation():
  for key in (jax.random.key(0), jax.random.key(0, impl='rbg')):
    mask = dropout_lib.keep_mask(key, (3, 5, 7), 0.5)
    assert mask.shape == (3, 5, 7) and mask.dtype == jnp.bool_
    assert 0 < int(mask.sum()) < mask.size


def test_module_draws_a_fresh_mask_per_call_and_is_identity_when_deterministic():
  x = jnp.ones((8, 128))
  layer = dropout_lib.Dropout(0.5)
  np.testing.assert_array_equal(layer(x, deterministic=True), x)
  rngs = nnx.Rngs(dropout=0)
  first, second = layer(x, deterministic=False, rngs=rngs), layer(x, deterministic=False, rngs=rngs)
  assert not np.array_equal(first, second)
  np.testing.assert_array_equal(dropout_lib.Dropout(0.0)(x, deterministic=False), x)
  np.testing.assert_array_equal(dropout_lib.Dropout(1.0)(x, deterministic=False), 0 * x)


def test_bad_rate_and_missing_rngs_are_clear_errors():
  with pytest.raises(ValueError, match=r'rate must be in \[0, 1\], got 1.5'):
    dropout_lib.Dropout(1.5)
  with pytest.raises(ValueError, match='needs rngs'):
    dropout_lib.Dropout(0.1)(jnp.ones(3), deterministic=False)
