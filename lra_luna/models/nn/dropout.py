"""Dropout whose masks cost a quarter of the random bits of `nnx.Dropout`'s.

`nnx.Dropout` draws a float32 uniform per element through `jax.random.bernoulli`; with JAX's
default partitionable Threefry that is one Threefry-2x32 block (64 bits, of which 32 are kept)
per element, and on a CPU drawing those bits costs more than the arithmetic the mask is applied
to (about a third of Luna-16's 4K training step). Here one Threefry-2x32 block gives the masks of
four elements: each element keeps a 16-bit slice of the 64 output bits, and an element is kept
when its slice is below round(keep_rate * 2**16).

Distribution: every element is kept independently with probability t / 2**16, t =
round(keep_rate * 2**16), which is within 2**-17 of keep_rate (nnx.Dropout's uniform is itself
quantised to 2**-23); kept values are scaled by 2**16 / t, so the expected output equals the
input exactly. The Threefry blocks are those of `jax.random` (same cipher, distinct counters), so
masks of different calls and elements are as independent as `jax.random`'s own draws.
"""

import jax
import jax.numpy as jnp
from flax import nnx

MASK_BITS = 16  # Bits of randomness per element; a Threefry-2x32 block holds 64.


def keep_threshold(keep_rate: float) -> int:
  """t such that an element whose 16-bit draw is below t is kept: P(keep) = t / 2**16."""
  return int(round(keep_rate * 2**MASK_BITS))


def keep_mask(key: jax.Array, shape, keep_rate: float) -> jax.Array:
  """Boolean mask of `shape`, each element True independently with probability
  keep_threshold(keep_rate) / 2**16; four elements per Threefry-2x32 block."""
  size = 1
  for dim in shape:
    size *= dim
  threefry_key = jax.random.bits(key, (2,), jnp.uint32)  # Any key implementation works.
  words = -(-size // 2)  # Two 16-bit draws per 32-bit word.
  counters = jax.lax.iota(jnp.uint32, words + words % 2)  # threefry_2x32 pairs two halves.
  bits = jax.extend.random.threefry_2x32(threefry_key, counters)
  draws = jax.lax.bitcast_convert_type(bits, jnp.uint16).reshape(-1)[:size].reshape(shape)
  return draws.astype(jnp.uint32) < keep_threshold(keep_rate)


def dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
  """x with each element zeroed with probability ~rate (see keep_mask), the rest scaled so that
  E[dropout(x)] = x exactly."""
  threshold = keep_threshold(1.0 - rate)
  scale = jnp.asarray(2**MASK_BITS / threshold, x.dtype)
  return jnp.where(keep_mask(key, x.shape, 1.0 - rate), x * scale, jnp.zeros((), x.dtype))


class Dropout(nnx.Module):
  """Drop-in for `nnx.Dropout(rate)` (same call: `(x, deterministic=, rngs=)`, keys from the
  'dropout' stream) with the cheaper masks of `dropout`."""

  def __init__(self, rate: float):
    if not 0.0 <= rate <= 1.0:
      raise ValueError(f'Dropout rate must be in [0, 1], got {rate}.')
    self.rate = rate

  def __call__(self, x, *, deterministic: bool, rngs=None):
    if deterministic or self.rate == 0.0:
      return x
    if keep_threshold(1.0 - self.rate) == 0:  # rate 1 (or within 2**-17 of it): nothing kept.
      return jnp.zeros_like(x)
    if rngs is None:
      raise ValueError('Dropout with deterministic=False needs rngs (a "dropout" stream).')
    key = rngs['dropout']() if isinstance(rngs, nnx.Rngs) else rngs() if callable(rngs) else rngs
    return dropout(x, self.rate, key)
