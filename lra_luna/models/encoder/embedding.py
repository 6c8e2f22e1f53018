"""The embedding every encoder starts with: tokens + positions, optional LayerNorm, dropout
(luna.md §5), and the compute dtype of a model config."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.model_config import ModelConfig
from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout


def compute_dtype(cfg: ModelConfig):
  """The dtype activations are computed in: jnp.float32, jnp.bfloat16 or jnp.float16."""
  return getattr(jnp, cfg.dtype)


def sinusoidal_table(length: int, dim: int) -> np.ndarray:
  """Vaswani et al. (2017) sinusoidal positions, [length, dim], sin on even and cos on odd features."""
  position = np.arange(length)[:, None]
  rates = np.exp(-math.log(10000.0) * np.arange(0, dim, 2) / dim)
  table = np.zeros((length, dim), np.float32)
  table[:, 0::2] = np.sin(position * rates)
  table[:, 1::2] = np.cos(position * rates)[:, : dim // 2]
  return table


def embedding_init(init: str, dim: int):
  """luna.md §5: N(0, D^-1/2) for the reference init, N(0, 0.02) for the BERT-style init."""
  return jax.nn.initializers.normal(0.02 if init == 'bert' else dim**-0.5)


class Embedding(nnx.Module):
  """Token + position embeddings (no sqrt(D) scale), optional LayerNorm, dropout (luna.md §5).
  Positions 'none' and 'rotary' add none here (rotary rotates queries and keys instead).

  Padded rows are zeroed so that they carry nothing into any layer.
  """

  def __init__(self, vocab_size: int, dim: int, max_length: int, *, positions: str,
               use_layernorm: bool, dropout: float, init: str, dtype, rngs: nnx.Rngs,
               mask_token: bool = False):
    # One extra row for [CLS] (id = vocab_size) and one extra position for it; with
    # `mask_token` one more row for the mask id of masked pretraining (vocab_size + 1).
    self.cls_id = vocab_size
    self.mask_id = vocab_size + 1 if mask_token else None
    self.tokens = nnx.Embed(vocab_size + 1 + int(mask_token), dim,
                            embedding_init=embedding_init(init, dim), dtype=dtype, rngs=rngs)
    self.max_positions = max_length + 1
    if positions == 'learned':
      self.positions = nnx.Param(embedding_init(init, dim)(rngs.params(), (max_length + 1, dim)))
    elif positions == 'sinusoidal':
      self.positions = nnx.Variable(jnp.asarray(sinusoidal_table(max_length + 1, dim)))
    else:  # 'none' (the blocks know positions: S4D) or 'rotary' (inside the attention)
      self.positions = None
    self.layernorm = layers.LayerNorm(dim, dtype=dtype) if use_layernorm else None
    self.dropout = Dropout(dropout)
    self.dtype = dtype

  @classmethod
  def from_config(cls, cfg: ModelConfig, rngs: nnx.Rngs) -> 'Embedding':
    return cls(cfg.vocab_size, cfg.dim, cfg.max_length, positions=cfg.positions,
               use_layernorm=cfg.embedding_layernorm, dropout=cfg.dropout, init=cfg.init,
               dtype=compute_dtype(cfg), rngs=rngs, mask_token=cfg.mask_token)

  def __call__(self, ids, mask, *, deterministic=True, rngs=None):
    """ids [B, n] (already with [CLS] at 0), mask [B, n] -> x [B, n, D]."""
    n = ids.shape[1]
    if n > self.max_positions:
      raise ValueError(f'Sequence of {n - 1} tokens is longer than max_length '
                       f'{self.max_positions - 1}; raise config.max_length.')
    x = self.tokens(ids)
    if self.positions is not None:
      x = x + self.positions[...][:n].astype(self.dtype)
    if self.layernorm is not None:
      x = self.layernorm(x)
    x = self.dropout(x, deterministic=deterministic, rngs=rngs)
    return x * mask[..., None].astype(x.dtype)
