"""What every attention module is built from: projections, heads, float32 products, the masked
softmax, the option checks, and `QKVOutAttention`, the base class of the baselines.

Every self-attention module has the same call signature,
`module(x, mask, *, deterministic, rngs) -> y`, with x [B, n, D], mask [B, n] (True = real token)
and y [B, n, D]; Luna's `LunaAttention` also takes and returns the extra sequence P.
Softmax is always computed in float32, whatever the compute dtype, and every attention product
(scores q k^T and probabilities x values) accumulates in float32 (`einsum32`): float16 scores of
a few hundred per feature would overflow to inf before any cast. The probabilities are then kept
in the compute dtype (the [B, H, n, n] tensor the backward pass keeps is 16-bit under
bfloat16/float16).
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.rotary import rotate_queries_and_keys
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear, dense

# Large negative score for masked keys. finfo.min rather than -inf keeps a fully masked row finite.
MASKED_SCORE = float(jnp.finfo(jnp.float32).min)


def xavier_uniform(gain: float = 1.0):
  """Xavier-uniform with a gain, as torch.nn.init.xavier_uniform_ (the Luna reference init)."""
  return jax.nn.initializers.variance_scaling(gain**2, 'fan_avg', 'uniform')


def projection_init(init: str, role: str):
  """Kernel initialiser of a D -> D projection.

  init: 'reference' (luna.md §1: xavier-uniform, gain 1/sqrt(2) for the q/k/v-style projections,
    gain 1 for the output projection), 'bert' (luna.md §5: N(0, 0.02) for every Linear) or
    'lecun' (LeCun-normal, Flax's default: q/k/v at twice the reference's variance, so that
    attention scores start less uniform; MQAR's configs, where the reference init stayed at
    chance on a 16-token MQAR, docs/mqar.md).
  role: 'qkv' or 'out'.
  """
  if init == 'bert':
    return jax.nn.initializers.normal(0.02)
  if init == 'lecun':
    return jax.nn.initializers.lecun_normal()
  if init == 'reference':
    return xavier_uniform(1.0 / math.sqrt(2.0) if role == 'qkv' else 1.0)
  raise ValueError(f"Unknown init {init!r}; valid choices: 'reference', 'bert', 'lecun'.")


def projection(dim: int, *, init: str, role: str, dtype, rngs: nnx.Rngs) -> Linear:
  """A D -> D Linear with bias (bias initialised to 0), float32 parameters."""
  return Linear(dim, dim, kernel_init=projection_init(init, role), dtype=dtype, rngs=rngs)


def project_together(x: jax.Array, layers) -> list:
  """[layer(x) for layer in layers] as one matmul over x with the kernels side by side.

  A `None` layer stands for the one before it (tied key and value), so it costs nothing.
  """
  distinct = [layer for layer in layers if layer is not None]
  kernel = jnp.concatenate([layer.kernel[...] for layer in distinct], axis=1)
  bias = jnp.concatenate([layer.bias[...] for layer in distinct], axis=0)
  dtype = distinct[0].dtype or x.dtype
  y = dense(x.astype(dtype), kernel, bias)  # float32 parameters, cast inside
  outputs = jnp.split(y, len(distinct), axis=-1)
  result = []
  for layer in layers:
    result.append(result[-1] if layer is None else outputs.pop(0))
  return result


def split_heads(x: jax.Array, num_heads: int) -> jax.Array:
  """[B, n, D] -> [B, heads, n, D / heads]; head h owns features [h*D/H, (h+1)*D/H)."""
  b, n, d = x.shape
  return x.reshape(b, n, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: jax.Array) -> jax.Array:
  """[B, heads, n, d] -> [B, n, heads * d]."""
  b, h, n, d = x.shape
  return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)


def einsum32(spec: str, *operands) -> jax.Array:
  """jnp.einsum accumulating in float32 whatever the operands' dtype (float32 result)."""
  return jnp.einsum(spec, *operands, preferred_element_type=jnp.float32)


def masked_softmax(scores: jax.Array, key_mask: jax.Array | None) -> jax.Array:
  """Softmax over the last axis in float32; key_mask [B, k] (True = attend) broadcasts over heads
  and queries; a [B, 1, m, k] mask (`causal_mask`) is one per query."""
  scores = scores.astype(jnp.float32)
  if key_mask is not None:
    mask = key_mask[:, None, None, :] if key_mask.ndim == 2 else key_mask
    scores = jnp.where(mask, scores, MASKED_SCORE)
  return jax.nn.softmax(scores, axis=-1)


def causal_mask(key_mask, num_queries: int) -> jax.Array:
  """[B, 1, m, n]: query i attends to the real keys j <= i only (a causal Transformer, Vaswani et
  al. 2017 §3.2.3); key_mask [B, n], the queries the first m positions."""
  n = key_mask.shape[-1]
  earlier = jnp.arange(n)[None, :] <= jnp.arange(num_queries)[:, None]
  return key_mask[:, None, None, :] & earlier[None, None]


def scaled_dot_product(query, key, value, key_mask, dropout: Dropout, *, deterministic,
                       rngs) -> jax.Array:
  """softmax(q k^T) v with q already scaled; q [B,h,m,d], k/v [B,h,n,d] -> [B,h,m,d]."""
  scores = einsum32('bhmd,bhnd->bhmn', query, key)
  probs = masked_softmax(scores, key_mask).astype(value.dtype)  # Kept in the compute dtype.
  probs = dropout(probs, deterministic=deterministic, rngs=rngs)
  return einsum32('bhmn,bhnd->bhmd', probs, value).astype(value.dtype)



def check_option(owner: str, option: str, value, valid: bool, valid_range: str) -> None:
  """ValueError "<owner> option <option> = <value> is not valid: <valid_range>." unless valid."""
  if not valid:
    raise ValueError(f'{owner} option {option} = {value!r} is not valid: {valid_range}.')


def is_count(value, minimum: int = 1) -> bool:
  """Whether value is an integer (not a bool) >= minimum."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


class QKVOutAttention(nnx.Module):
  """The base class of the baseline attentions: q/k/v/out projections (`projection`), the head split
  (`_heads`) and the option protocol (`CONFIG_OPTIONS`, `check_options`). Plug-ins may build on it.

  With `rotary` (config.model.positions = 'rotary'), `_heads` returns q and k rotated at their
  positions (`rotary.rotate_queries_and_keys`, RoFormer eq. 34); `_projected_heads` never rotates
  (linear attentions rotate their feature maps instead, RoFormer eq. 19)."""

  CONFIG_OPTIONS: tuple[str, ...] = ()

  @classmethod
  def check_options(cls, max_length: int, **options) -> None:
    """ValueError in one line for an option value outside its valid range (none here)."""
    del max_length, options

  def __init__(self, dim: int, num_heads: int, *, init: str, dtype, rngs: nnx.Rngs,
               rotary: bool = False):
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    self.rotary = rotary
    self.num_heads = num_heads
    self.head_dim = dim // num_heads
    self.query = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.key = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.value = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)

  def _projected_heads(self, x):
    """x [B, n, D] -> q, k, v [B, H, n, D/H], unscaled, never rotated."""
    return tuple(split_heads(layer(x), self.num_heads)
                 for layer in (self.query, self.key, self.value))

  def _heads(self, x):
    """x [B, n, D] -> q, k, v [B, H, n, D/H], unscaled; q and k rotated with `rotary`."""
    q, k, v = self._projected_heads(x)
    if self.rotary:
      q, k = rotate_queries_and_keys(q, k)
    return q, k, v



class RandomFeatures(nnx.Variable):
  """Performer random-feature matrix: module state, but not an `nnx.Param` (optimizers skip it)."""


def fill_to(x: jax.Array, mask: jax.Array, length: int) -> tuple[jax.Array, jax.Array]:
  """x [B, n, D] and mask [B, n] filled up to `length` rows with zeros, masked (False); as they
  are when n >= length. For the attentions whose real rows depend on the padded length
  (Reformer, BigBird), so that they always compute at max_length."""
  fill = max(length - x.shape[1], 0)
  return (jnp.pad(x, ((0, 0), (0, fill), (0, 0))),
          jnp.pad(mask, ((0, 0), (0, fill)), constant_values=False))
