"""The pretraining losses: cross-entropy over the task's own vocabulary at the positions an
objective predicts, and nowhere else (Amos et al. 2024, §3: `ignore_val`, the loss at the masked
positions only)."""

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
