"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", arXiv 2104.09864).

A query or key x at position m is rotated pair by pair, feature pair (2i, 2i+1) by the angle
m theta_i with theta_i = base^(-2i/d) (RoFormer eq. 15), computed as its eq. 34:

  R_m x = x * cos(m theta) + x' * sin(m theta),   x' = (-x_1, x_0, -x_3, x_2, ...).

Rotations compose, R_m^T R_n = R_(n-m), so q_m . k_n after rotation depends on the positions only
through n - m (eq. 16): the absolute rotation gives relative positions. Under linear attention
(eq. 19) the feature-mapped queries and keys phi(q), phi(k) are rotated in the numerator only;
the denominator keeps phi(q) . sum phi(k), which stays positive.

Pure functions, float32 inside, the input's dtype out. Positions are token indices ([CLS] = 0).
"""

import jax
import jax.numpy as jnp

ROTARY_BASE = 10000.0  # RoFormer eq. 15


def rotary_angles(positions: jax.Array, dim: int, base: float = ROTARY_BASE) -> jax.Array:
  """m theta_i [..., dim / 2] (float32) for integer positions m [...]: theta_i = base^(-2i/dim)
  (RoFormer eq. 15)."""
  if dim % 2:
    raise ValueError(f'rotary positions rotate pairs of features: dimension {dim} is odd.')
  rates = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  return jnp.asarray(positions, jnp.float32)[..., None] * rates


def rotate_pairs(x: jax.Array, angles: jax.Array) -> jax.Array:
  """x [..., n, d] with feature pair (2i, 2i+1) rotated by angles [n, d/2] (broadcast over the
  leading axes): RoFormer eq. 34. float32 in, float32 out."""
  cos, sin = jnp.repeat(jnp.cos(angles), 2, axis=-1), jnp.repeat(jnp.sin(angles), 2, axis=-1)
  pairs = x.reshape(*x.shape[:-1], -1, 2)
  swapped = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
  return x * cos + swapped * sin


def apply_rotary(x: jax.Array, positions: jax.Array) -> jax.Array:
  """x [..., n, d] rotated at integer positions [n] (RoFormer eq. 34), in x's dtype. All
  positions 0 (angles 0) leave x unchanged."""
  angles = rotary_angles(positions, x.shape[-1])
  return rotate_pairs(x.astype(jnp.float32), angles).astype(x.dtype)


def rotate_queries_and_keys(q: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
  """q [..., m, d] and k [..., n, d] of one sequence rotated at positions 0..m-1 and 0..n-1
  (m < n: the first m rows' queries only, as a pruned last layer computes)."""
  return (apply_rotary(q, jnp.arange(q.shape[-2])), apply_rotary(k, jnp.arange(k.shape[-2])))


def rotary_linear_attention(q_features, k_features, v):
  """RoFormer eq. 19: sum_j (R_i phi(q_i)) . (R_j phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j).

  q_features, k_features [B, h, n, m] (m even; padded keys already 0), v [B, h, n, d]; O(n) order,
  float32. Returns (numerator [B, h, n, d], denominator [B, h, n, 1]); the caller divides."""
  positions = jnp.arange(q_features.shape[-2])
  rotated_q = apply_rotary(q_features.astype(jnp.float32), positions)
  rotated_k = apply_rotary(k_features.astype(jnp.float32), positions)
  kv = jnp.einsum('bhnm,bhnd->bhmd', rotated_k, v.astype(jnp.float32))
  numerator = jnp.einsum('bhnm,bhmd->bhnd', rotated_q, kv)
  denominator = jnp.einsum('bhnm,bhm->bhn', q_features, jnp.sum(k_features, axis=2))
  return numerator, denominator[..., None]
