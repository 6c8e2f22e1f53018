"""The LRA block encoder (lra.md §3): the Transformer's pre-LN block around any self-attention
(softmax, a baseline or a plug-in), or a model's own block by the block protocol.

The block protocol (`BlockEncoder`): a model that is not attention brings its own block class,
named by its registry entry's `block_class` ('module:Class'; S4D: models/blocks/s4d.py):
  Block(cfg: ModelConfig, rngs)       options in cfg.attention_options
  block(x, mask, *, deterministic, rngs, query_rows=None) -> x' [B, n or query_rows, D]
  Block.final_norm(cfg) -> bool       whether the encoder ends with a LayerNorm
  Block.CONFIG_OPTIONS, Block.check_options(max_length=, **options)  (config_lib.validate)
x [B, n, D] in the compute dtype, mask [B, n] bool (True = real token; position 0 is [CLS]).
The embedding, heads, training, sweeps, profiler and report are the same for every block.
"""

import functools

from flax import nnx

from lra_luna import registry
from lra_luna.models import plugins
from lra_luna.models.attention.softmax import SoftmaxAttention
from lra_luna.models.encoder.embedding import Embedding, compute_dtype
from lra_luna.models.model_config import ModelConfig, check_causal
from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout


def build_self_attention(cfg: ModelConfig, rngs: nnx.Rngs):
  """The self-attention module of a Transformer-style block, chosen by `cfg.attention`: softmax,
  a baseline, or a plug-in ('file.py:Class', plugins.py); its causal form with `cfg.causal`
  (ValueError for an attention without one, model_config.CAUSAL_ATTENTIONS)."""
  common = dict(attention_dropout=cfg.attention_dropout, init=cfg.init,
                dtype=compute_dtype(cfg), rngs=rngs)
  if cfg.positions == 'rotary':  # only then: plug-ins and Linformer never see the argument
    common['rotary'] = True
  if cfg.causal:  # only then, as rotary: the attentions without a causal form never see it
    check_causal(cfg)  # also ModelConfig.check's; here for configs built field by field
    common['causal'] = True
  if cfg.attention == 'softmax':
    return SoftmaxAttention(cfg.dim, cfg.num_heads, implementation=cfg.attention_implementation,
                            **common)
  options = dict(cfg.attention_options)
  if plugins.is_plugin(cfg.attention):
    return plugins.build(cfg.attention, cfg.dim, cfg.num_heads, max_length=cfg.max_length + 1,
                         options=options, **common)
  attention_class = registry.attention_class(cfg.attention)  # imports the baseline's module
  return attention_class(cfg.dim, cfg.num_heads, max_length=cfg.max_length + 1, **common,
                         **options)


class TransformerBlock(nnx.Module):
  """Pre-LN block of LRA: x + Drop(Attn(LN(x))), then x + Drop(FFN(LN(x)))."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    dtype = compute_dtype(cfg)
    self.attention_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.attention = build_self_attention(cfg, rngs)
    self.ffn_norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.ffn = layers.FeedForward(cfg.dim, cfg.ffn_dim, init=cfg.init, dtype=dtype, rngs=rngs)
    self.dropout = Dropout(cfg.dropout)

  def __call__(self, x, mask, *, deterministic=True, rngs=None, query_rows=None):
    """x [B, n, D] -> [B, n, D], or its first `query_rows` rows only (the last block under a
    head that reads only those; every row is still attended to)."""
    drop = lambda y: self.dropout(y, deterministic=deterministic, rngs=rngs)
    attend = functools.partial(self.attention, self.attention_norm(x), mask,
                               deterministic=deterministic, rngs=rngs)
    if query_rows is None:
      y = attend()
    elif isinstance(self.attention, SoftmaxAttention):
      y = attend(query_rows=query_rows)
    else:  # Baselines and plug-ins compute every row; the FFN still runs on the kept ones only.
      y = attend()[:, :query_rows]
    x = x[:, :query_rows] + drop(y)
    return x + drop(self.ffn(self.ffn_norm(x)))

  @staticmethod
  def final_norm(cfg: ModelConfig) -> bool:
    del cfg
    return True  # LRA's pre-LN stack ends with a LayerNorm.


class BlockEncoder(nnx.Module):
  """LRA encoder (lra.md §3): embedding, a stack of blocks (the Transformer's pre-LN block, or a
  model's own by the block protocol above), a final LayerNorm where the block says so.
  Returns (X, None)."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, block_class=TransformerBlock):
    self.embedding = Embedding.from_config(cfg, rngs)
    self.blocks = nnx.List([block_class(cfg, rngs) for _ in range(cfg.num_layers)])
    self.final_norm = (layers.LayerNorm(cfg.dim, dtype=compute_dtype(cfg))
                       if block_class.final_norm(cfg) else None)

  def __call__(self, ids, mask, *, deterministic=True, rngs=None, output_rows=None):
    """(X [B, n, D], None); with `output_rows` X holds only its first rows (`rows_read_by`)."""
    x = self.embedding(ids, mask, deterministic=deterministic, rngs=rngs)
    for i, block in enumerate(self.blocks):
      last = i == len(self.blocks) - 1
      x = block(x, mask, deterministic=deterministic, rngs=rngs,
                query_rows=output_rows if last else None)
    return (x if self.final_norm is None else self.final_norm(x)), None
