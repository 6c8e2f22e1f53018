"""The pretraining losses at the positions an objective predicts, and nowhere else (Amos et al.
2024, §3: `ignore_val`, the loss at the masked positions only): cross-entropy over the task's own
vocabulary, or on pixel tasks the authors' L1 loss on normalised pixel values (`lm_loss: l1`)."""

import jax.numpy as jnp
import optax


def token_cross_entropy_sums(logits, targets, weights):
  """(sum of weighted losses, sum of weighted correct predictions, sum of weights) of logits
  [B, n, V] against targets [B, n]; weights [B, n] (0 at every position not predicted: its
  logits get exactly zero gradient)."""
  weights = weights.astype(jnp.float32)
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  return (jnp.sum(jnp.where(weights > 0, losses, 0.0) * weights), jnp.sum(correct * weights),
          jnp.sum(weights))


def pixel_l1_sums(values, pixels, weights, mean: float, std: float):
  """(sum of weighted |value - (pixel - mean) / std|, sum of weighted exact pixels, sum of
  weights) of predicted values [B, n] against grey levels pixels [B, n] (0..255); a prediction
  counts as exact when value * std + mean rounds to the pixel. weights as in
  token_cross_entropy_sums (exactly zero gradient where 0)."""
  weights = weights.astype(jnp.float32)
  targets = (pixels.astype(jnp.float32) - mean) / std
  losses = jnp.abs(values - targets)
  exact = (jnp.round(values * std + mean) == pixels).astype(jnp.float32)
  return (jnp.sum(jnp.where(weights > 0, losses, 0.0) * weights), jnp.sum(exact * weights),
          jnp.sum(weights))
