"""The encoder every model shares: the embedding (`embedding`), then Luna's layers and P (`luna`)
or the block encoder (`transformer`: the Transformer's block around any attention, or a model's
own block), or causal Luna's layers (`causal_luna`). `build_encoder` picks one for a config;
every encoder returns (X, packed) with packed = (P, p_mask) for Luna and None otherwise. Position
0 is always the learned [CLS] token (id = vocab_size), prepended by `with_cls`.
"""

import jax.numpy as jnp
from flax import nnx

from lra_luna import registry
from lra_luna.models.encoder.causal_luna import CausalLunaEncoder
from lra_luna.models.encoder.luna import LunaEncoder
from lra_luna.models.encoder.transformer import BlockEncoder
from lra_luna.models.model_config import ModelConfig


def with_cls(ids, cls_id: int, mask_padding: bool):
  """Prepends [CLS] and builds the padding mask (pad id 0; pixel tasks have no padding)."""
  ids = ids.astype(jnp.int32)
  mask = ids != 0 if mask_padding else jnp.ones(ids.shape, bool)
  cls = jnp.full((ids.shape[0], 1), cls_id, jnp.int32)
  return (jnp.concatenate([cls, ids], axis=1),
          jnp.concatenate([jnp.ones((ids.shape[0], 1), bool), mask], axis=1))


def build_encoder(cfg: ModelConfig, rngs: nnx.Rngs):
  """Luna's encoder (causal Luna's with `cfg.causal`), or the block encoder with the model's own
  block (registry `block_class`) or the Transformer's block (each causal with `cfg.causal`)."""
  if cfg.attention == 'luna' and cfg.causal:
    return CausalLunaEncoder(cfg, rngs)
  if cfg.attention == 'luna':
    return LunaEncoder(cfg, rngs)
  if cfg.attention in registry.block_classes():
    return BlockEncoder(cfg, rngs, registry.block_class(cfg.attention))
  return BlockEncoder(cfg, rngs)
