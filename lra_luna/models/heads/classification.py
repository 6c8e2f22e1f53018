"""The classification head: pooling the encoder's output (luna.md §5, paper §4.1 Table 3) and
the MLP on top."""

import jax
import jax.numpy as jnp
from flax import nnx


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
