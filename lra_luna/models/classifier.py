"""LRA classifiers: the shared encoder (`encoder/`) and the classification head
(`heads/classification.py`) for one input sequence (ListOps, Text, Image, Pathfinder) or a pair
(Retrieval). Call signature of every model: `model(batch, *, deterministic, rngs) -> logits
[B, classes]`, with `batch['inputs']` int [B, n] (Retrieval: `inputs1`, `inputs2`). An optional
`batch['visible']` bool [B, n] (Retrieval: `visible1`, `visible2`) masks the tokens where it is
False as padding (the context probe, lra_luna/probe.py); without it nothing changes.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.encoder import build_encoder, with_cls
from lra_luna.models.encoder.embedding import compute_dtype
from lra_luna.models.heads.classification import ClassifierHead, pool, rows_read_by
from lra_luna.models.model_config import ModelConfig
from lra_luna.models.recall import QueryTokenPredictor


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

  def encode(self, ids, *, deterministic=True, rngs=None, visible=None):
    """ids [B, n] -> pooled representation [B, D]; tokens where `visible` [B, n] is False are
    masked as padding ([CLS] stays)."""
    ids, mask = with_cls(ids, self.encoder.embedding.cls_id, self.mask_padding)
    if visible is not None:
      mask = mask & jnp.pad(jnp.asarray(visible, bool), ((0, 0), (1, 0)), constant_values=True)
    x, packed = self.encoder(ids, mask, deterministic=deterministic, rngs=rngs,
                             output_rows=self.output_rows)
    return pool(self.head, x, mask, packed, mean_includes_cls=self.mean_includes_cls)

  def __call__(self, batch, *, deterministic=True, rngs=None):
    return self.classifier(self.encode(batch['inputs'], deterministic=deterministic, rngs=rngs,
                                       visible=batch.get('visible')))


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
    a = self.encode(batch['inputs1'], deterministic=deterministic, rngs=rngs,
                    visible=batch.get('visible1'))
    b = self.encode(batch['inputs2'], deterministic=deterministic, rngs=rngs,
                    visible=batch.get('visible2'))
    features = self.PAIR_FEATURES[self.pair_features](a, b)
    return self.classifier(jnp.concatenate(features, axis=-1))


def build_model(cfg: ModelConfig, seed: int) -> nnx.Module:
  """The classifier that `cfg` describes, its parameters drawn from `seed`."""
  rngs = nnx.Rngs(params=seed)
  if cfg.predict == 'queries':
    return QueryTokenPredictor(cfg, rngs)
  if cfg.dual_encoder:
    return DualEncoderClassifier(cfg, rngs)
  return SequenceClassifier(cfg, rngs)


def count_params(model: nnx.Module) -> int:
  """Number of trainable parameters (nnx.Param leaves)."""
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param))))
