"""The recall model of MQAR (Arora et al., "Zoology", ICLR 2024): the shared encoder
(`encoder/`) and the token head (`heads/token_prediction.py`) read at the query positions only.

Call signature: `model(batch, *, deterministic, rngs) -> logits [B, K, vocab]`, with
`batch['inputs']` int [B, n] and `batch['query_positions']` int [B, K]. The rows are gathered
before the head, so the vocabulary projection costs K rows per sequence, not n.
"""

import jax.numpy as jnp
from flax import nnx

from lra_luna.models.encoder import build_encoder, with_cls
from lra_luna.models.encoder.embedding import compute_dtype
from lra_luna.models.heads.token_prediction import TokenPredictionHead
from lra_luna.models.model_config import ModelConfig


def query_rows(x, query_positions):
  """x [B, n + 1, D] (position 0 is [CLS]) -> its rows at query_positions [B, K] -> [B, K, D]."""
  rows = query_positions.astype(jnp.int32) + 1
  return jnp.take_along_axis(x, rows[..., None], axis=1)


class QueryTokenPredictor(nnx.Module):
  """Encoder (causal with cfg.causal) + token head at each query position."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.mask_padding = cfg.mask_padding
    self.encoder = build_encoder(cfg, rngs)
    self.token_head = TokenPredictionHead(cfg.dim, cfg.num_classes, init=cfg.init,
                                          dtype=compute_dtype(cfg), rngs=rngs)

  def __call__(self, batch, *, deterministic=True, rngs=None):
    ids, mask = with_cls(batch['inputs'], self.encoder.embedding.cls_id, self.mask_padding)
    x, _ = self.encoder(ids, mask, deterministic=deterministic, rngs=rngs)
    return self.token_head(query_rows(x, batch['query_positions']))
