"""The token heads of pretraining: logits over the task's own vocabulary at every position of
the encoder's output, read by the masked (denoising) and the next-token objectives
(`models/objectives`; Amos et al. 2024, §3). RoBERTa's LM head without its tied embedding
(Liu et al. 2019): Linear + GELU + LayerNorm, then Linear to the vocabulary (or to one pixel
value, for the L1 loss)."""

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.nn import layers


class TokenPredictionHead(nnx.Module):
  """x [B, n, D] -> logits [B, n, outputs] (float32)."""

  def __init__(self, dim: int, outputs: int, *, init: str, dtype, rngs: nnx.Rngs):
    kernel = {'kernel_init': jax.nn.initializers.normal(0.02)} if init == 'bert' else {}
    self.dense = nnx.Linear(dim, dim, dtype=dtype, rngs=rngs, **kernel)
    self.norm = layers.LayerNorm(dim, dtype=dtype)
    self.logits = nnx.Linear(dim, outputs, dtype=dtype, rngs=rngs, **kernel)

  def __call__(self, x):
    x = self.norm(jax.nn.gelu(self.dense(x), approximate=False))
    return self.logits(x).astype(jnp.float32)
