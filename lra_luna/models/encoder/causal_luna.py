"""The causal Luna encoder (paper §3.3, eq. 7; luna.md §6): the shared embedding, then causal
Luna layers (`attention/causal_luna.py`), each with its own learned P, so that position t reads
positions <= t only. The encoder of Luna under the causal pretraining objective
(ModelConfig.causal; models/objectives), in pretraining and fine-tuning alike."""

from flax import nnx

from lra_luna.models.attention.causal_luna import CausalLunaDecoderLayer
from lra_luna.models.encoder.embedding import Embedding, compute_dtype
from lra_luna.models.model_config import ModelConfig


class CausalLunaEncoder(nnx.Module):
  """Embedding + a stack of post-LN causal Luna layers; returns (X, None): no P leaves a causal
  layer (a P' would carry the future), so only the 'mean' head reads it."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.embedding = Embedding.from_config(cfg, rngs)
    self.layers = nnx.List([
        CausalLunaDecoderLayer(cfg.dim, cfg.num_heads, cfg.ffn_dim, cfg.pack_length,
                               dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                               tie_kv=cfg.tie_kv, init=cfg.init, dtype=compute_dtype(cfg),
                               rngs=rngs)
        for _ in range(cfg.num_layers)])

  def __call__(self, ids, mask, *, deterministic=True, rngs=None, output_rows=None):
    """(X [B, n, D], None); padding follows the real tokens, so causality keeps it out."""
    x = self.embedding(ids, mask, deterministic=deterministic, rngs=rngs)
    for layer in self.layers:
      x = layer(x, deterministic=deterministic, rngs=rngs)
    return x[:, :output_rows], None
