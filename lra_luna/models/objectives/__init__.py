"""Pretraining objectives over a task's own training inputs (self-pretraining, SPT; Amos, Berant
and Gupta, "Never Train from Scratch", ICLR 2024, §3): which positions are masked or predicted
(`masking`) and the losses read at those positions only (`losses`). `Objective` is what the
training step needs to know of one, `token_loss_sums` the step's loss.
"""

import dataclasses

import jax
import jax.numpy as jnp

from lra_luna.models.objectives import losses, masking


@dataclasses.dataclass(frozen=True)
class Objective:
  """A pretraining objective as the step sees it (hashable: a static argument of jit).

  name: 'masked' (denoising: a share of the real tokens replaced by mask_id, predicted back) or
  'causal' (next-token prediction by a causal encoder). vocab_size: the task's vocabulary (the
  classes the token head predicts); eos_id: the end-of-sequence id or -1 (never masked nor
  predicted); mask_padding: id 0 is padding (False for pixels, where 0 is black). loss: 'ce'
  (the head predicts the token) or 'l1' (it predicts the pixel value, normalised by
  pixel_mean and pixel_std).
  """
  name: str
  mask_rate: float
  vocab_size: int
  mask_id: int
  eos_id: int = -1
  mask_padding: bool = True
  loss: str = 'ce'
  pixel_mean: float = 0.0
  pixel_std: float = 1.0

  @property
  def outputs(self) -> int:
    """The token head's outputs per position: a value (l1) or the vocabulary's logits (ce)."""
    return 1 if self.loss == 'l1' else self.vocab_size


def position_loss_sums(outputs, ids, weights, objective: Objective):
  """The objective's loss sums (losses.token_cross_entropy_sums or pixel_l1_sums) of the head's
  outputs [B, n, objective.outputs] against ids [B, n]."""
  if objective.loss == 'l1':
    return losses.pixel_l1_sums(outputs[..., 0], ids, weights, objective.pixel_mean,
                                objective.pixel_std)
  return losses.token_cross_entropy_sums(outputs, ids, weights)


def pretraining_sequences(batch: dict) -> jax.Array:
  """The int sequences [B', n] a batch holds: `inputs`, or Retrieval's two documents as
  separate sequences (inputs1 rows, then inputs2 rows)."""
  if 'inputs' in batch:
    return batch['inputs'].astype(jnp.int32)
  return jnp.concatenate([batch['inputs1'], batch['inputs2']], axis=0).astype(jnp.int32)


def row_weights(batch: dict, num_sequences: int) -> jax.Array:
  """[B'] the weight of each sequence: the batch's `weights` (0 on an evaluation batch's padding
  rows; repeated for Retrieval's two documents), else 1."""
  if 'weights' not in batch:
    return jnp.ones((num_sequences,), jnp.float32)
  weights = batch['weights'].astype(jnp.float32)
  return jnp.tile(weights, num_sequences // weights.shape[0])


def token_loss_sums(model, batch: dict, objective: Objective, key, *, deterministic, rngs):
  """(sum of token losses, sum of correct predictions, number of predicted tokens) of `model`
  (a `TokenPredictor`) on one batch: the masked positions (mask drawn from `key`) or every next
  token, padding, [CLS] and EOS never predicted."""
  ids = pretraining_sequences(batch)
  weights = row_weights(batch, ids.shape[0])[:, None]
  real = masking.predictable(ids, objective.mask_padding, objective.eos_id)
  if objective.name == 'masked':
    masked_ids, is_masked = masking.mask_tokens(key, ids, real, objective.mask_rate,
                                                objective.mask_id)
    outputs = model(masked_ids, deterministic=deterministic, rngs=rngs)[:, 1:]
    return position_loss_sums(outputs, ids, is_masked * weights, objective)
  outputs = model(ids, deterministic=deterministic, rngs=rngs)[:, :-1]
  return position_loss_sums(outputs, ids, real * weights, objective)
