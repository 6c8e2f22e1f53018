"""Which tokens a pretraining objective reads: the real tokens of a sequence (never padding,
[CLS] or EOS) and the masked denoising objective's random mask (Amos et al. 2024, §3: a share
`mask_rate` of the tokens replaced by a mask id; BERT, Devlin et al. 2019, §3.1)."""

import jax
import jax.numpy as jnp
import numpy as np


def predictable(ids, mask_padding: bool, eos_id: int = -1) -> jax.Array:
  """[B, n] bool: the positions of ids [B, n] an objective may mask or predict: every token but
  padding (id 0 where mask_padding; pixel tasks have none) and EOS (eos_id; -1 for none). [CLS]
  is not in ids (the encoder prepends it)."""
  real = ids != 0 if mask_padding else jnp.ones(ids.shape, bool)
  return real & (ids != eos_id)


def mask_tokens(key, ids, maskable, rate: float, mask_id: int):
  """(ids with the masked positions set to mask_id, the masked positions [B, n] bool). Each
  maskable position is masked independently with probability `rate`, so a batch's masked share
  of its maskable tokens is `rate` up to binomial noise (std sqrt(rate (1 - rate) / tokens))."""
  is_masked = maskable & jax.random.bernoulli(key, rate, ids.shape)
  return jnp.where(is_masked, mask_id, ids), is_masked


def evaluation_key(ids) -> jax.Array:
  """The mask key of an evaluation batch: drawn from the batch's own tokens, so that a pass is
  the same at every evaluation and batches get different masks."""
  return jax.random.fold_in(jax.random.key(0), jnp.sum(ids, dtype=jnp.uint32))


def most_frequent_token(sequences, mask_padding: bool, eos_id: int = -1) -> tuple[int, float]:
  """(the most frequent token, its share) among the predictable tokens (`predictable`) of the
  int arrays `sequences`: the expected accuracy of always predicting that one token where the
  masked objective masks (every predictable token is masked with the same probability), the
  reference point of a pretraining's token accuracy. The lowest id wins a tie."""
  tokens = np.concatenate([np.asarray(ids)[np.asarray(predictable(np.asarray(ids), mask_padding,
                                                                    eos_id))].ravel()
                           for ids in sequences])
  if tokens.size == 0:
    raise ValueError('most_frequent_token: no predictable token in the inputs (all padding or '
                     'EOS); check the task data.')
  counts = np.bincount(tokens.astype(np.int64))
  return int(np.argmax(counts)), float(counts.max() / tokens.size)
