"""Multi-head softmax attention (Vaswani et al. 2017), the Transformer baseline: the vanilla
[B, H, n, n] form and the fused one (`jax.nn.dot_product_attention`, cuDNN's kernel where the
platform has it)."""

import contextlib

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.base import (causal_mask, merge_heads, project_together,
                                            projection, scaled_dot_product, split_heads)
from lra_luna.models.attention.rotary import rotate_queries_and_keys
from lra_luna.models.nn.dropout import Dropout

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


class SoftmaxAttention(nnx.Module):
  """Multi-head softmax attention (Vaswani et al. 2017), the Transformer baseline.

  implementation: 'vanilla' forms the [B, H, n, n] attention matrix (the LRA/Luna protocol);
  'fused' calls `jax.nn.dot_product_attention` with the kernel `fused_implementation` picks for
  the platform traced for: cuDNN's flash attention on an NVIDIA GPU with 16-bit compute, XLA's
  attention elsewhere (same values). 'fused' has no attention dropout (the fused kernels do not
  support it). `rotary`: q and k rotated at their positions first (RoFormer eq. 34), either way.
  `causal` (vanilla only): row i attends to positions <= i (causal_mask).
  """

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               implementation: str = 'vanilla', init: str = 'reference', dtype=jnp.float32,
               rngs: nnx.Rngs, rotary: bool = False, causal: bool = False):
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    if implementation not in ('vanilla', 'fused'):
      raise ValueError(f"Unknown attention implementation {implementation!r}; "
                       "valid choices: 'vanilla', 'fused'.")
    self.num_heads = num_heads
    self.implementation = implementation
    self.rotary = rotary
    self.causal = causal
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
    if self.rotary:  # RoFormer eq. 34 on [B, H, n, d], back to [B, n, D]
      q, k = (merge_heads(t) for t in rotate_queries_and_keys(split_heads(q, self.num_heads),
                                                                split_heads(k, self.num_heads)))
    if self.implementation == 'fused':
      # dot_product_attention takes [B, n, H, d] and applies the 1/sqrt(d) scale itself.
      heads = lambda y: y.reshape(*y.shape[:2], self.num_heads, head_dim)
      if fused_implementation(current_platform(), q.dtype, head_dim) == 'cudnn':
        y = cudnn_attention(heads(q), heads(k), heads(v), mask)
      else:
        y = jax.nn.dot_product_attention(heads(q), heads(k), heads(v),
                                         mask=mask[:, None, None, :], implementation='xla')
      return self.out(y.reshape(queries.shape))
    if self.causal:
      mask = causal_mask(mask, queries.shape[1])
    q = split_heads(q, self.num_heads) * head_dim**-0.5
    k = split_heads(k, self.num_heads)
    v = split_heads(v, self.num_heads)
    y = scaled_dot_product(q, k, v, mask, self.dropout, deterministic=deterministic, rngs=rngs)
    return self.out(merge_heads(y))
