"""The Luna encoder (paper §3, eq. 6; luna.md §2-5): the extra sequence P and a stack of Luna
layers around pack and unpack attention."""

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.luna import LunaAttention
from lra_luna.models.encoder.embedding import Embedding, compute_dtype, sinusoidal_table
from lra_luna.models.model_config import ModelConfig
from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout


class LunaEncoderLayer(nnx.Module):
  """Luna layer, paper eq. 6 (luna.md §2).

  Post-LN (default): X1 = LN(X + Drop(Yx)); P' = LN_p(P + Drop(Yp)); X' = LN(X1 + Drop(FFN(X1))).
  Pre-LN (`normalize_before`): the norms move in front of attention and FFN; no norm after.
  P gets no feed-forward block.
  """

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    dtype = compute_dtype(cfg)
    self.normalize_before = cfg.normalize_before
    self.attention = LunaAttention(
        cfg.dim, cfg.num_heads, cfg.num_pack_heads, attention_dropout=cfg.attention_dropout,
        tie_kv=cfg.tie_kv, init=cfg.init, dtype=dtype, rngs=rngs)
    self.attention_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.p_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.ffn_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.ffn = layers.FeedForward(cfg.dim, cfg.ffn_dim, init=cfg.init, dtype=dtype, rngs=rngs)
    self.dropout = Dropout(cfg.dropout)

  def __call__(self, x, p, x_mask, p_mask, *, deterministic=True, rngs=None, query_rows=None):
    """(X', P'); with `query_rows` X' holds only X's first rows (0: none), P' is whole."""
    # Independent dropout masks for X and P: each call draws a fresh key from rngs.
    drop = lambda y: self.dropout(y, deterministic=deterministic, rngs=rngs)
    if self.normalize_before:
      yx, yp = self.attention(self.attention_norm(x), self.p_norm(p), x_mask, p_mask,
                              deterministic=deterministic, rngs=rngs, query_rows=query_rows)
      x = x[:, :query_rows] + drop(yx)
      p = p + drop(yp)
      return x + drop(self.ffn(self.ffn_norm(x))), p
    yx, yp = self.attention(x, p, x_mask, p_mask, deterministic=deterministic, rngs=rngs,
                            query_rows=query_rows)
    x = self.attention_norm(x[:, :query_rows] + drop(yx))
    p = self.p_norm(p + drop(yp))
    return self.ffn_norm(x + drop(self.ffn(x))), p


class PackedSequence(nnx.Module):
  """The extra sequence P at a layer's input (paper §3.1, luna.md §3).

  'learned': a parameter [l, D] ~ N(0, D^-1/2); 'sinusoidal' (paper footnote): a fixed table.
  Either then goes through its own LayerNorm and dropout, broadcast over the batch.
  """

  def __init__(self, length: int, dim: int, *, p_init: str, dropout: float, dtype,
               rngs: nnx.Rngs):
    if p_init == 'learned':
      self.table = nnx.Param(jax.random.normal(rngs.params(), (length, dim)) * dim**-0.5)
    else:  # 'sinusoidal'
      self.table = nnx.Variable(jnp.asarray(sinusoidal_table(length, dim)))
    self.norm = layers.LayerNorm(dim, dtype=dtype)
    self.dropout = Dropout(dropout)

  def __call__(self, batch_size, p_mask, *, deterministic=True, rngs=None):
    p = self.norm(self.table[...])
    p = jnp.broadcast_to(p, (batch_size, *p.shape))
    p = self.dropout(p, deterministic=deterministic, rngs=rngs)
    return p * p_mask[..., None].astype(p.dtype)


def p_slot_mask(x_mask, pack_length):
  """luna.md §4: slot j of sequence b is padding when j >= its number of real tokens (with [CLS])."""
  lengths = jnp.sum(x_mask, axis=-1, keepdims=True)
  return jnp.arange(pack_length)[None, :] < lengths


class LunaEncoder(nnx.Module):
  """Luna LRA encoder (luna.md §5): embedding with LayerNorm, P, a stack of Luna layers.

  Contextual P (default): P' of layer i is P of layer i+1. Non-contextual P (paper §4.2, Table 5):
  each layer reads its own learnable P. Returns (X, (P, p_mask)).
  """

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    dtype = compute_dtype(cfg)
    self.contextual_p = cfg.contextual_p
    self.normalize_before = cfg.normalize_before
    self.pack_length = cfg.pack_length
    self.embedding = Embedding.from_config(cfg, rngs)
    num_p = 1 if cfg.contextual_p else cfg.num_layers
    self.packed_inputs = nnx.List([
        PackedSequence(cfg.pack_length, cfg.dim, p_init=cfg.p_init, dropout=cfg.dropout,
                       dtype=dtype, rngs=rngs) for _ in range(num_p)])
    self.layers = nnx.List([LunaEncoderLayer(cfg, rngs) for _ in range(cfg.num_layers)])
    if cfg.normalize_before:
      self.final_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
      self.final_p_norm = layers.LayerNorm(cfg.dim, dtype=dtype)

  def __call__(self, ids, mask, *, deterministic=True, rngs=None, output_rows=None):
    """(X [B, n, D], (P [B, l, D], p_mask)); with `output_rows` X holds only its first rows
    (`rows_read_by`)."""
    x = self.embedding(ids, mask, deterministic=deterministic, rngs=rngs)
    p_mask = p_slot_mask(mask, self.pack_length)
    make_p = lambda i: self.packed_inputs[i](ids.shape[0], p_mask, deterministic=deterministic,
                                             rngs=rngs)
    p = make_p(0)
    for i, layer in enumerate(self.layers):
      if i > 0 and not self.contextual_p:
        p = make_p(i)
      last = i == len(self.layers) - 1
      x, p = layer(x, p, mask, p_mask, deterministic=deterministic, rngs=rngs,
                   query_rows=output_rows if last else None)
    if self.normalize_before:
      x, p = self.final_norm(x), self.final_p_norm(p)
    return x, (p, p_mask)
