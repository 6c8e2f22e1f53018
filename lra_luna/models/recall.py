"""The recall model of MQAR (Arora et al., "Zoology", ICLR 2024): the shared encoder
(`encoder/`) read at the query positions only, and an output projection tied to the token
embedding (as Zoology's language models): logits = x E^T over the vocabulary.

Call signature: `model(batch, *, deterministic, rngs) -> logits [B, K, vocab]`, with
`batch['inputs']` int [B, n] and `batch['query_positions']` int [B, K]. The rows are gathered
before the projection, so the vocabulary costs K rows per sequence, not n. Tied, a value copied
to its query scores itself from the first step, as in Zoology (single-seed comparisons with an
untied head: docs/mqar.md).
"""

import jax.numpy as jnp
from flax import nnx

from lra_luna.models.encoder import build_encoder, with_cls
from lra_luna.models.model_config import ModelConfig


def query_rows(x, query_positions):
  """x [B, n + 1, D] (position 0 is [CLS]) -> its rows at query_positions [B, K] -> [B, K, D]."""
  rows = query_positions.astype(jnp.int32) + 1
  return jnp.take_along_axis(x, rows[..., None], axis=1)


class QueryTokenPredictor(nnx.Module):
  """Encoder (causal with cfg.causal), then the tied vocabulary projection at each query."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.mask_padding = cfg.mask_padding
    self.num_classes = cfg.num_classes
    self.encoder = build_encoder(cfg, rngs)

  def __call__(self, batch, *, deterministic=True, rngs=None):
    ids, mask = with_cls(batch['inputs'], self.encoder.embedding.cls_id, self.mask_padding)
    x, _ = self.encoder(ids, mask, deterministic=deterministic, rngs=rngs)
    rows = query_rows(x, batch['query_positions'])
    # The embedding's rows past the vocabulary ([CLS]) are no label.
    logits = self.encoder.embedding.tokens.attend(rows)[..., :self.num_classes]
    return logits.astype(jnp.float32)
