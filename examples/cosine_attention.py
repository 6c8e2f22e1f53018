"""Cosine-similarity attention: an attention plug-in for lra_luna (README, "Bring your own
attention").

softmax(s_h cos(q_i, k_j)) v per head h, with a learned scale s_h (initialised to `scale`) in
place of 1/sqrt(d): the scores are bounded, so no logit can run away. Padded keys are masked.

  python run_lra.py --config configs/listops.py:transformer,quick \\
      --config.model.attention=examples/cosine_attention.py:CosineAttention \\
      --workdir runs/listops_cosine_quick
"""

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models import attention


class CosineAttention(nnx.Module):
  """Multi-head cosine-similarity attention; the plug-in protocol of lra_luna/models/plugins.py."""

  def __init__(self, dim, num_heads, *, attention_dropout, init, dtype, rngs, max_length,
               scale: float = 10.0):
    del max_length  # Any length works.
    self.num_heads = num_heads
    project = lambda role: attention.projection(dim, init=init, role=role, dtype=dtype, rngs=rngs)
    self.query, self.key, self.value, self.out = (project(r) for r in ('qkv', 'qkv', 'qkv', 'out'))
    self.scale = nnx.Param(jnp.full((num_heads, 1, 1), scale, jnp.float32))
    self.dropout = nnx.Dropout(attention_dropout)

  def __call__(self, x, mask, *, deterministic=True, rngs=None):
    q, k, v = (attention.split_heads(layer(x), self.num_heads)
               for layer in (self.query, self.key, self.value))
    # Unit vectors, in float32 whatever the compute dtype; rsqrt(|t|^2 + eps) keeps the gradient
    # finite at t = 0 (padded rows are all zeros), where that of |t| is not.
    unit = lambda t: t * jax.lax.rsqrt(jnp.sum(jnp.square(t.astype(jnp.float32)), axis=-1,
                                               keepdims=True) + 1e-6)
    scores = self.scale[...] * jnp.einsum('bhnd,bhmd->bhnm', unit(q), unit(k))
    probs = self.dropout(attention.masked_softmax(scores, mask), deterministic=deterministic,
                         rngs=rngs)
    y = jnp.einsum('bhnm,bhmd->bhnd', probs.astype(v.dtype), v)
    return self.out(attention.merge_heads(y))
