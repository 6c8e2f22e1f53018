"""Luna's bidirectional attention: pack and unpack, paper eqs. 3-5 (luna.md §1)."""

import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.base import (merge_heads, project_together, projection,
                                            scaled_dot_product, split_heads)
from lra_luna.models.nn.dropout import Dropout


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
