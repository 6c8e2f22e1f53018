"""Synthesizer attention (Tay et al. 2020, arXiv:2005.00743, §3), the LRA baseline.

Attention scores synthesised without (or besides) token-token dot products: a learnt matrix per
head (Random Synthesizer, §3.2), its low-rank factorisation (§3.3), or a per-token MLP (Dense
Synthesizer, §3.1). See `SynthesizerAttention`.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.base import (check_option, einsum32, is_count, masked_softmax,
                                            merge_heads, projection, split_heads)
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear

MODES = ('random', 'factorized_random', 'dense')


def synthetic_init(init: str):
  """Initialiser of the synthetic-score parameters: xavier-uniform (LRA's, of the whole [H, L, L]
  kernel for 'random') with init 'reference', N(0, 0.02) with 'bert' (as every other weight)."""
  if init == 'bert':
    return jax.nn.initializers.normal(0.02)
  return jax.nn.initializers.xavier_uniform()


class SynthesizerAttention(nnx.Module):
  """Synthesizer attention (Tay et al. 2020, §3): softmax(S_h) V_h per head, then W_o.

  S_h = [Q_h K_h^T / sqrt(d) if `dot_product`] + B_h + padding mask (padded keys never attended,
  whatever the mode), with the synthetic scores B_h [n, n] of `mode`:
  - 'random' (§3.2, eq. 5; LRA as run): a learnt R_h [L, L] per head, L = max_length, cut to
    R_h[:n, :n]; the same for every input.
  - 'factorized_random' (§3.3): R_h = A_h B_h, A_h [L, k], B_h [k, L], k = `factor_rank`.
  - 'dense' (§3.1, eq. 2): row i is F_h(x_i) = W_2 relu(W_1 x_i)[:n], W_1 a D -> D projection
    whose output is split into heads (W_1 per head), W_2 [d, L] shared by the heads (as LRA);
    row i depends on x_i only.
  With dot_product=True (LRA: the dot product is never switched off) the model is the paper's
  mixture "Random + Vanilla" (§3.4); with False it is the pure synthetic attention and there are
  no query/key projections. Quadratic by definition: [B, H, n, n] scores (as the Transformer)
  and H L^2 parameters per layer in 'random' mode. `attention_weights` returns softmax(S).
  Config options (CONFIG_OPTIONS): mode, factor_rank, dot_product.
  """

  CONFIG_OPTIONS = ('mode', 'factor_rank', 'dot_product')

  @classmethod
  def check_options(cls, max_length: int, mode: str = 'random', factor_rank: int = 32,
                    dot_product: bool = True) -> None:
    """ValueError in one line for an option value outside its valid range."""
    del max_length  # Any n <= max_length works in every mode.
    name = cls.__name__
    check_option(name, 'mode', mode, mode in MODES, 'one of ' + ', '.join(map(repr, MODES)))
    check_option(name, 'factor_rank', factor_rank, is_count(factor_rank), 'an integer >= 1')
    check_option(name, 'dot_product', dot_product, isinstance(dot_product, bool),
                 'True or False')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               mode: str = 'random', factor_rank: int = 32, dot_product: bool = True):
    self.check_options(max_length, mode, factor_rank, dot_product)
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    self.num_heads = num_heads
    self.head_dim = dim // num_heads
    self.max_length = max_length
    self.mode = mode
    self.dot_product = dot_product
    qkv = dict(init=init, role='qkv', dtype=dtype, rngs=rngs)
    # Pure synthetic attention reads x only through the values (and the dense MLP).
    self.query = projection(dim, **qkv) if dot_product else None
    self.key = projection(dim, **qkv) if dot_product else None
    self.value = projection(dim, **qkv)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)
    initializer = synthetic_init(init)
    shape = (num_heads, max_length)
    if mode == 'random':
      self.random = nnx.Param(initializer(rngs.params(), shape + (max_length,)))
    elif mode == 'factorized_random':
      self.factor_left = nnx.Param(initializer(rngs.params(), shape + (factor_rank,)))
      self.factor_right = nnx.Param(
          initializer(rngs.params(), (num_heads, factor_rank, max_length)))
    else:
      self.dense_hidden = projection(dim, **qkv)
      self.dense_out = Linear(self.head_dim, max_length, kernel_init=initializer, dtype=dtype,
                              rngs=rngs)
    self.dropout = Dropout(attention_dropout)

  def synthetic_scores(self, x: jax.Array) -> jax.Array:
    """The synthetic scores B [B or 1, H, n, n] (float32) of x [B, n, D]."""
    n = x.shape[1]
    if n > self.max_length:
      raise ValueError(f'SynthesizerAttention got a sequence of length {n} > max_length '
                       f'{self.max_length}; raise `max_length` to at least {n}.')
    if self.mode == 'random':
      return self.random[...][None, :, :n, :n]
    if self.mode == 'factorized_random':
      left = self.factor_left[...][:, :n]
      right = self.factor_right[...][:, :, :n]
      return jnp.einsum('hik,hkj->hij', left, right)[None]
    # split_heads transposes [B, n, H, d] to [B, H, n, d] (LRA reshaped, mixing heads and rows).
    hidden = jax.nn.relu(split_heads(self.dense_hidden(x), self.num_heads))
    return self.dense_out(hidden)[..., :n].astype(jnp.float32)

  def attention_weights(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """softmax(S) [B, H, n, n] in float32, padded keys (mask False) at 0 (before dropout)."""
    scores = self.synthetic_scores(x)
    if self.dot_product:
      q = split_heads(self.query(x), self.num_heads) * self.head_dim**-0.5
      k = split_heads(self.key(x), self.num_heads)
      scores = scores + einsum32('bhnd,bhmd->bhnm', q, k)
    scores = jnp.broadcast_to(scores, (x.shape[0],) + scores.shape[1:])
    return masked_softmax(scores, mask)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    probs = self.dropout(self.attention_weights(x, mask), deterministic=deterministic, rngs=rngs)
    v = split_heads(self.value(x), self.num_heads)
    y = einsum32('bhnm,bhmd->bhnd', probs.astype(v.dtype), v).astype(v.dtype)
    return self.out(merge_heads(y))
