"""Attention modules that drop into the encoder blocks of `models.py`.

Every self-attention module here has the same call signature,
`module(x, mask, *, deterministic, rngs) -> y`, with x [B, n, D], mask [B, n] (True = real token)
and y [B, n, D]; Luna's `LunaAttention` also takes and returns the extra sequence P.
Softmax is always computed in float32, whatever the compute dtype, and every attention product
(scores q k^T and probabilities x values) accumulates in float32 (`einsum32`): float16 scores of
a few hundred per feature would overflow to inf before any cast. The probabilities are then kept
in the compute dtype (the [B, H, n, n] tensor the backward pass keeps is 16-bit under
bfloat16/float16).
"""

import contextlib
import math

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.dropout import Dropout
from lra_luna.models.linear import Linear, dense

# Large negative score for masked keys. finfo.min rather than -inf keeps a fully masked row finite.
MASKED_SCORE = float(jnp.finfo(jnp.float32).min)


def xavier_uniform(gain: float = 1.0):
  """Xavier-uniform with a gain, as torch.nn.init.xavier_uniform_ (the Luna reference init)."""
  return jax.nn.initializers.variance_scaling(gain**2, 'fan_avg', 'uniform')


def projection_init(init: str, role: str):
  """Kernel initialiser of a D -> D projection.

  init: 'reference' (luna.md §1: xavier-uniform, gain 1/sqrt(2) for the q/k/v-style projections,
    gain 1 for the output projection) or 'bert' (luna.md §5: N(0, 0.02) for every Linear).
  role: 'qkv' or 'out'.
  """
  if init == 'bert':
    return jax.nn.initializers.normal(0.02)
  if init == 'reference':
    return xavier_uniform(1.0 / math.sqrt(2.0) if role == 'qkv' else 1.0)
  raise ValueError(f"Unknown init {init!r}; valid choices: 'reference', 'bert'.")


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
  """Softmax over the last axis in float32; key_mask [B, k] (True = attend) broadcasts over heads."""
  scores = scores.astype(jnp.float32)
  if key_mask is not None:
    scores = jnp.where(key_mask[:, None, None, :], scores, MASKED_SCORE)
  return jax.nn.softmax(scores, axis=-1)


# ----------------------------------------------------------------------------------------------
# The fused Transformer: which kernel jax.nn.dot_product_attention runs.
# ----------------------------------------------------------------------------------------------
_TARGET_PLATFORM = []  # Stack of platforms set by `target_platform`; empty: the default backend.


@contextlib.contextmanager
def target_platform(platform: str):
  """Models traced inside choose their fused-attention kernel for `platform` ('cpu', 'cuda',
  'tpu', ...) instead of JAX's default backend: for lowering with jax.export for another
  platform than this machine's."""
  _TARGET_PLATFORM.append(platform)
  try:
    yield
  finally:
    _TARGET_PLATFORM.pop()


def current_platform() -> str:
  """The platform models are traced for: the innermost `target_platform`, else JAX's backend."""
  return _TARGET_PLATFORM[-1] if _TARGET_PLATFORM else jax.default_backend()


def fused_implementation(platform: str, dtype, head_dim: int | None = None) -> str:
  """The kernel of the 'fused' softmax attention: 'cudnn' (cuDNN's flash attention) on an NVIDIA
  GPU ('gpu' or 'cuda') with bfloat16 or float16 compute and a head dim that is a multiple of 8
  and at most 128 (cuDNN's limits before Hopper), else 'xla' (XLA's attention ops)."""
  if platform not in ('gpu', 'cuda') or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
    return 'xla'
  if head_dim is not None and (head_dim % 8 or head_dim > 128):
    return 'xla'
  return 'cudnn'


def attention_implementation(attention: str, implementation: str, platform: str, dtype) -> str:
  """What a run's attention ran as, for results and profiles: the fused softmax attention's
  kernel ('cudnn' | 'xla'), else the configured implementation ('vanilla')."""
  if attention == 'softmax' and implementation == 'fused':
    return fused_implementation(platform, dtype)
  return implementation


def pad_to_even(x: jax.Array, axis: int = 1) -> jax.Array:
  """x with one zero row appended along `axis` when its length there is odd (cuDNN's kernel
  needs even lengths; the row is masked as a key, and dropped as a query)."""
  if x.shape[axis] % 2 == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, 1)
  return jnp.pad(x, widths)


def cudnn_attention(q, k, v, mask) -> jax.Array:
  """softmax(q k^T / sqrt(d)) v with cuDNN's fused kernel; q [B, m, H, d], k/v [B, n, H, d],
  mask [B, n] True for a prefix of real keys (padding at the end, as every batch of the suite).
  The key mask is passed as per-sequence key lengths, the query rows past them (padding) give 0,
  and both lengths are padded to even."""
  # Under vmap (the seeds) JAX's batching rule of the cuDNN call folds the vmapped axis into the
  # batch of q and of the lengths alike, so the lengths must be batched whenever q is.
  batched_as_q = jax.lax.stop_gradient(q[:, 0, 0, 0]).astype(jnp.int32) * 0
  key_lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32) + batched_as_q
  y = jax.nn.dot_product_attention(
      pad_to_even(q), pad_to_even(k), pad_to_even(v), implementation='cudnn',
      query_seq_lengths=jnp.minimum(key_lengths, q.shape[1]), key_value_seq_lengths=key_lengths)
  return y[:, :q.shape[1]]


def scaled_dot_product(query, key, value, key_mask, dropout: Dropout, *, deterministic,
                       rngs) -> jax.Array:
  """softmax(q k^T) v with q already scaled; q [B,h,m,d], k/v [B,h,n,d] -> [B,h,m,d]."""
  scores = einsum32('bhmd,bhnd->bhmn', query, key)
  probs = masked_softmax(scores, key_mask).astype(value.dtype)  # Kept in the compute dtype.
  probs = dropout(probs, deterministic=deterministic, rngs=rngs)
  return einsum32('bhmn,bhnd->bhmd', probs, value).astype(value.dtype)


class SoftmaxAttention(nnx.Module):
  """Multi-head softmax attention (Vaswani et al. 2017), the Transformer baseline.

  implementation: 'vanilla' forms the [B, H, n, n] attention matrix (the LRA/Luna protocol);
  'fused' calls `jax.nn.dot_product_attention` with the kernel `fused_implementation` picks for
  the platform traced for: cuDNN's flash attention on an NVIDIA GPU with 16-bit compute, XLA's
  attention elsewhere (same values). 'fused' has no attention dropout (the fused kernels do not
  support it).
  """

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               implementation: str = 'vanilla', init: str = 'reference', dtype=jnp.float32,
               rngs: nnx.Rngs):
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    if implementation not in ('vanilla', 'fused'):
      raise ValueError(f"Unknown attention implementation {implementation!r}; "
                       "valid choices: 'vanilla', 'fused'.")
    self.num_heads = num_heads
    self.implementation = implementation
    self.query = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.key = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.value = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)
    self.dropout = Dropout(attention_dropout)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None,
               query_rows: int | None = None):
    """y [B, n, D]; with `query_rows` only its first rows (every key still attended to)."""
    head_dim = x.shape[-1] // self.num_heads
    queries = x[:, :query_rows]
    # One matmul over x for the projections that read every row (same values as three).
    if query_rows is None:
      q, k, v = project_together(x, [self.query, self.key, self.value])
    else:
      (k, v), q = project_together(x, [self.key, self.value]), self.query(queries)
    if self.implementation == 'fused':
      # dot_product_attention takes [B, n, H, d] and applies the 1/sqrt(d) scale itself.
      heads = lambda y: y.reshape(*y.shape[:2], self.num_heads, head_dim)
      if fused_implementation(current_platform(), q.dtype, head_dim) == 'cudnn':
        y = cudnn_attention(heads(q), heads(k), heads(v), mask)
      else:
        y = jax.nn.dot_product_attention(heads(q), heads(k), heads(v),
                                         mask=mask[:, None, None, :], implementation='xla')
      return self.out(y.reshape(queries.shape))
    q = split_heads(q, self.num_heads) * head_dim**-0.5
    k = split_heads(k, self.num_heads)
    v = split_heads(v, self.num_heads)
    y = scaled_dot_product(q, k, v, mask, self.dropout, deterministic=deterministic, rngs=rngs)
    return self.out(merge_heads(y))


class LunaAttention(nnx.Module):
  """Bidirectional Luna attention, paper eqs. 3-5 (luna.md §1).

  Pack (eq. 3): P attends to the context X with `num_pack_heads` heads; Yp = merged heads, with
  no output projection. Unpack (eq. 4): X attends to Yp with `num_heads` heads, then Linear_out.
  With `tie_kv` one projection serves as both key and value, in pack and in unpack.
  """

  def __init__(self, dim: int, num_heads: int, num_pack_heads: int | None = None, *,
               attention_dropout: float = 0.0, tie_kv: bool = False, init: str = 'reference',
               dtype=jnp.float32, rngs: nnx.Rngs):
    num_pack_heads = num_pack_heads or num_heads
    for heads in (num_heads, num_pack_heads):
      if dim % heads:
        raise ValueError(f'dim {dim} is not divisible by {heads} heads.')
    self.num_heads = num_heads
    self.num_pack_heads = num_pack_heads
    self.tie_kv = tie_kv
    qkv = dict(init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.pack_query = projection(dim, **qkv)
    self.pack_key = projection(dim, **qkv)
    self.pack_value = None if tie_kv else projection(dim, **qkv)
    self.unpack_query = projection(dim, **qkv)
    self.unpack_key = projection(dim, **qkv)
    self.unpack_value = None if tie_kv else projection(dim, **qkv)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)
    self.dropout = Dropout(attention_dropout)

  def __call__(self, x, p, x_mask, p_mask, *, deterministic: bool = True,
               rngs: nnx.Rngs | None = None, query_rows: int | None = None):
    """Returns (Yx [B, n, D], Yp [B, l, D]); with `query_rows` Yx holds only X's first rows
    (0: none, the unpack is skipped) while Yp still packs all of X."""
    dim = x.shape[-1]
    # Pack (eq. 3): Yp = Attn(P W_pq, X W_pk, X W_pv) with X's padding masked; no out projection.
    # The three projections that read the long X (pack key, pack value, unpack query) run as one
    # matmul: one pass over X instead of three (same parameters, same values).
    if query_rows is None:
      pack_key, pack_value, unpack_query = project_together(
          x, [self.pack_key, self.pack_value, self.unpack_query])
    else:
      pack_key, pack_value = project_together(x, [self.pack_key, self.pack_value])
      unpack_query = self.unpack_query(x[:, :query_rows])
    pack_dim = dim // self.num_pack_heads
    packed = merge_heads(scaled_dot_product(
        split_heads(self.pack_query(p), self.num_pack_heads) * pack_dim**-0.5,
        split_heads(pack_key, self.num_pack_heads),
        split_heads(pack_value, self.num_pack_heads),
        x_mask, self.dropout, deterministic=deterministic, rngs=rngs))
    if query_rows == 0:
      return unpack_query, packed  # [B, 0, D]: no row of Yx is read.
    # Unpack (eq. 4): Yx = Attn(X W_q, Yp W_k, Yp W_v) W_out with unused P slots masked.
    unpack_key, unpack_value = project_together(packed, [self.unpack_key, self.unpack_value])
    head_dim = dim // self.num_heads
    unpacked = scaled_dot_product(
        split_heads(unpack_query, self.num_heads) * head_dim**-0.5,
        split_heads(unpack_key, self.num_heads),
        split_heads(unpack_value, self.num_heads),
        p_mask, self.dropout, deterministic=deterministic, rngs=rngs)
    return self.out(merge_heads(unpacked)), packed


def fill_to(x: jax.Array, mask: jax.Array, length: int) -> tuple[jax.Array, jax.Array]:
  """x [B, n, D] and mask [B, n] filled up to `length` rows with zeros, masked (False); as they
  are when n >= length. For the attentions whose real rows depend on the padded length
  (Reformer, BigBird), so that they always compute at max_length."""
  fill = max(length - x.shape[1], 0)
  return (jnp.pad(x, ((0, 0), (0, fill), (0, 0))),
          jnp.pad(mask, ((0, 0), (0, fill)), constant_values=False))
