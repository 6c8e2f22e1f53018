"""LRA encoders and classifiers: Luna (paper §3, eq. 6), the softmax Transformer and the baselines.

All models share one embedding (`Embedding`), one classifier head (`ClassifierHead`) and one
pooling function (`pool`); only the encoder block differs. A learned [CLS] token (id =
vocab_size) is prepended to every sequence, so position 0 is always [CLS].

The block protocol (`BlockEncoder`): a model that is not attention brings its own block class,
named by its registry entry's `block_class` ('module:Class'; S4D: models/s4d.py):
  Block(cfg: ModelConfig, rngs)       options in cfg.attention_options
  block(x, mask, *, deterministic, rngs, query_rows=None) -> x' [B, n or query_rows, D]
  Block.final_norm(cfg) -> bool       whether the encoder ends with a LayerNorm
  Block.CONFIG_OPTIONS, Block.check_options(max_length=, **options)  (config_lib.validate)
x [B, n, D] in the compute dtype, mask [B, n] bool (True = real token; position 0 is [CLS]).
The embedding, heads, training, sweeps, profiler and report are the same for every block.
Call signature of every model: `model(batch, *, deterministic, rngs) -> logits [B, classes]`,
with `batch['inputs']` int [B, n] (Retrieval: `inputs1`, `inputs2`).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna import registry
from lra_luna.models import attention as attention_lib
from lra_luna.models.dropout import Dropout
from lra_luna.models import layers
from lra_luna.models import plugins
from lra_luna.models.model_config import ModelConfig


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

  Padded rows are zeroed so that they carry nothing into any layer.
  """

  def __init__(self, vocab_size: int, dim: int, max_length: int, *, positions: str,
               use_layernorm: bool, dropout: float, init: str, dtype, rngs: nnx.Rngs):
    # One extra row for [CLS] (id = vocab_size) and one extra position for it.
    self.cls_id = vocab_size
    self.tokens = nnx.Embed(vocab_size + 1, dim, embedding_init=embedding_init(init, dim),
                            dtype=dtype, rngs=rngs)
    self.max_positions = max_length + 1
    if positions == 'learned':
      self.positions = nnx.Param(embedding_init(init, dim)(rngs.params(), (max_length + 1, dim)))
    elif positions == 'sinusoidal':
      self.positions = nnx.Variable(jnp.asarray(sinusoidal_table(max_length + 1, dim)))
    else:  # 'none': the blocks know positions themselves (S4D's convolution)
      self.positions = None
    self.layernorm = layers.LayerNorm(dim, dtype=dtype) if use_layernorm else None
    self.dropout = Dropout(dropout)
    self.dtype = dtype

  @classmethod
  def from_config(cls, cfg: ModelConfig, rngs: nnx.Rngs) -> 'Embedding':
    return cls(cfg.vocab_size, cfg.dim, cfg.max_length, positions=cfg.positions,
               use_layernorm=cfg.embedding_layernorm, dropout=cfg.dropout, init=cfg.init,
               dtype=compute_dtype(cfg), rngs=rngs)

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


def build_self_attention(cfg: ModelConfig, rngs: nnx.Rngs):
  """The self-attention module of a Transformer-style block, chosen by `cfg.attention`: softmax,
  a baseline, or a plug-in ('file.py:Class', plugins.py)."""
  common = dict(attention_dropout=cfg.attention_dropout, init=cfg.init,
                dtype=compute_dtype(cfg), rngs=rngs)
  if cfg.attention == 'softmax':
    return attention_lib.SoftmaxAttention(cfg.dim, cfg.num_heads,
                                          implementation=cfg.attention_implementation, **common)
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
    elif isinstance(self.attention, attention_lib.SoftmaxAttention):
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


class LunaEncoderLayer(nnx.Module):
  """Luna layer, paper eq. 6 (luna.md §2).

  Post-LN (default): X1 = LN(X + Drop(Yx)); P' = LN_p(P + Drop(Yp)); X' = LN(X1 + Drop(FFN(X1))).
  Pre-LN (`normalize_before`): the norms move in front of attention and FFN; no norm after.
  P gets no feed-forward block.
  """

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    dtype = compute_dtype(cfg)
    self.normalize_before = cfg.normalize_before
    self.attention = attention_lib.LunaAttention(
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


def rows_read_by(head: str) -> int | None:
  """How many leading rows of the final X `pool` reads under `head`: [CLS] only (1), none (0:
  mean_p reads P) or all (None, mean). The last layer computes only those rows (same values;
  ModelConfig.prune_last_layer): under cls that skips its FFN, output projection and unpack
  queries for every other row, about a fifth of a 4-layer Luna step."""
  return {'cls': 1, 'mean_p': 0}.get(head)


def pool(head: str, x, mask, packed, *, mean_includes_cls: bool = False):
  """Sentence representation (luna.md §5).

  cls: final X at position 0; mean: mean of final X over real tokens ([CLS] excluded, or included
  with `mean_includes_cls` as the Luna authors' 'mp' pooling; their release also averages pad
  rows, which we never do, so on fixed-length inputs the two differ only by [CLS]);
  mean_p: mean over the (unmasked) rows of Luna's final P (paper §4.1, Table 3).
  `head` is one of ModelConfig's (checked there, with the rule that mean_p needs Luna's P).
  """
  if head == 'cls':
    return x[:, 0]
  if head == 'mean':
    token_mask = mask if mean_includes_cls else mask.at[:, 0].set(False)
    token_mask = token_mask[..., None].astype(jnp.float32)
    return jnp.sum(x * token_mask, axis=1) / jnp.maximum(jnp.sum(token_mask, axis=1), 1.0)
  p, p_mask = packed  # 'mean_p'
  slot_mask = p_mask[..., None].astype(jnp.float32)
  return jnp.sum(p * slot_mask, axis=1) / jnp.maximum(jnp.sum(slot_mask, axis=1), 1.0)


class ClassifierHead(nnx.Module):
  """Linear(in -> hidden) + ReLU + Linear(hidden -> classes), no dropout (luna.md §5).

  With several hidden widths (the LRA dual head: mlp_dim, mlp_dim / 2) one Linear+ReLU each.
  `last_bias=False` drops the bias of the last Linear (the Luna authors' release).
  """

  def __init__(self, in_dim: int, hidden: tuple, num_classes: int, *, init: str, dtype,
               rngs: nnx.Rngs, last_bias: bool = True):
    widths = (in_dim, *hidden)
    # BERT-style init: N(0, 0.02) for every Linear; otherwise Flax's default (LeCun normal).
    kernel = {'kernel_init': jax.nn.initializers.normal(0.02)} if init == 'bert' else {}
    self.hidden = nnx.List([nnx.Linear(a, b, dtype=dtype, rngs=rngs, **kernel)
                            for a, b in zip(widths[:-1], widths[1:])])
    self.logits = nnx.Linear(widths[-1], num_classes, use_bias=last_bias, dtype=dtype, rngs=rngs,
                             **kernel)

  def __call__(self, x):
    for layer in self.hidden:
      x = jax.nn.relu(layer(x))
    # Logits in float32 so the loss is computed at full precision.
    return self.logits(x).astype(jnp.float32)


def with_cls(ids, cls_id: int, mask_padding: bool):
  """Prepends [CLS] and builds the padding mask (pad id 0; pixel tasks have no padding)."""
  ids = ids.astype(jnp.int32)
  mask = ids != 0 if mask_padding else jnp.ones(ids.shape, bool)
  cls = jnp.full((ids.shape[0], 1), cls_id, jnp.int32)
  return (jnp.concatenate([cls, ids], axis=1),
          jnp.concatenate([jnp.ones((ids.shape[0], 1), bool), mask], axis=1))


def build_encoder(cfg: ModelConfig, rngs: nnx.Rngs):
  """Luna's encoder, or the block encoder with the model's own block (registry `block_class`)
  or the Transformer's block."""
  if cfg.attention == 'luna':
    return LunaEncoder(cfg, rngs)
  if cfg.attention in registry.block_classes():
    return BlockEncoder(cfg, rngs, registry.block_class(cfg.attention))
  return BlockEncoder(cfg, rngs)


class SequenceClassifier(nnx.Module):
  """Encoder + pooling + classifier for one input sequence (ListOps, Text, Image, Pathfinder)."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.head = cfg.head
    self.output_rows = rows_read_by(cfg.head) if cfg.prune_last_layer else None
    self.mean_includes_cls = cfg.mean_includes_cls
    self.mask_padding = cfg.mask_padding
    self.encoder = build_encoder(cfg, rngs)
    self.classifier = ClassifierHead(cfg.dim, (cfg.classifier_dim,), cfg.num_classes,
                                     init=cfg.init, dtype=compute_dtype(cfg), rngs=rngs,
                                     last_bias=cfg.classifier_bias)

  def encode(self, ids, *, deterministic=True, rngs=None):
    """ids [B, n] -> pooled representation [B, D]."""
    ids, mask = with_cls(ids, self.encoder.embedding.cls_id, self.mask_padding)
    x, packed = self.encoder(ids, mask, deterministic=deterministic, rngs=rngs,
                             output_rows=self.output_rows)
    return pool(self.head, x, mask, packed, mean_includes_cls=self.mean_includes_cls)

  def __call__(self, batch, *, deterministic=True, rngs=None):
    return self.classifier(self.encode(batch['inputs'], deterministic=deterministic, rngs=rngs))


class DualEncoderClassifier(SequenceClassifier):
  """Retrieval (lra.md §3): one shared encoder reads each document; the head sees [a, b]
  (or [a, b, a*b, a-b] with `cfg.pair_features = 'full'`, or the Luna authors' [b, a] with
  'concat_reversed') through two hidden layers (classifier_dim, classifier_dim / 2; LRA) or
  one (classifier_dim; the Luna authors) as `cfg.dual_head_layers` says."""

  PAIR_FEATURES = {'concat': lambda a, b: [a, b], 'full': lambda a, b: [a, b, a * b, a - b],
                   'concat_reversed': lambda a, b: [b, a]}

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    super().__init__(cfg, rngs)
    self.pair_features = cfg.pair_features
    in_dim = cfg.dim * (4 if cfg.pair_features == 'full' else 2)
    hidden = (cfg.classifier_dim, cfg.classifier_dim // 2)[:cfg.dual_head_layers]
    self.classifier = ClassifierHead(in_dim, hidden, cfg.num_classes, init=cfg.init,
                                     dtype=compute_dtype(cfg), rngs=rngs,
                                     last_bias=cfg.classifier_bias)

  def __call__(self, batch, *, deterministic=True, rngs=None):
    a = self.encode(batch['inputs1'], deterministic=deterministic, rngs=rngs)
    b = self.encode(batch['inputs2'], deterministic=deterministic, rngs=rngs)
    features = self.PAIR_FEATURES[self.pair_features](a, b)
    return self.classifier(jnp.concatenate(features, axis=-1))


def build_model(cfg: ModelConfig, seed: int) -> nnx.Module:
  """The classifier that `cfg` describes, its parameters drawn from `seed`."""
  rngs = nnx.Rngs(params=seed)
  if cfg.dual_encoder:
    return DualEncoderClassifier(cfg, rngs)
  return SequenceClassifier(cfg, rngs)


def count_params(model: nnx.Module) -> int:
  """Number of trainable parameters (nnx.Param leaves)."""
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param))))
