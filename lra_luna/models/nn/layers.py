"""LayerNorm and the feed-forward block, with backward passes that keep few activations.

Every LRA model (Luna, the Transformer, the baselines) builds its LayerNorms and FFNs from
here, and causal Luna its LayerNorms, so whatever memory these save is saved for all of them
alike. Values and gradients are those of the textbook formulas (tests compare them with plain
autodiff); only what is kept between the forward and the backward pass differs:

- LayerNorm keeps its normalised input and one per-row statistic, where plain autodiff of
  (x - mean) * rsqrt(var + eps) * scale + bias keeps about three [..., D] tensors.
- The FFN's GELU keeps its input and output, where plain autodiff of the erf GELU also keeps its
  derivative terms: two more [..., ffn_dim] tensors, the largest activations of a layer.

The backward passes compute the rest elementwise. GELU's derivative is written with erf where the
forward pass uses erfc, on purpose: XLA would otherwise merge the two (common subexpression
elimination) and keep the forward pass's intermediates alive until the backward pass after all.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.attention import base as attention_base
from lra_luna.models.nn.linear import Linear, kernel_gradient, matmul

LAYER_NORM_EPS = 1e-5  # The Luna reference's (and PyTorch's) default.


# ----------------------------------------------------------------------------------------------
# GELU followed by a projection.
# ----------------------------------------------------------------------------------------------
def gelu(x):
  """Exact GELU, x Phi(x), as jax.nn.gelu(approximate=False) computes it: 0.5 x erfc(-x/sqrt 2)."""
  return jax.nn.gelu(x, approximate=False)


def gelu_slope(x):
  """gelu'(x) = Phi(x) + x phi(x), with Phi from erf (the forward pass uses erfc)."""
  cdf = 0.5 * (1.0 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))
  density = jnp.exp(-0.5 * x * x) * (1.0 / np.sqrt(2.0 * np.pi)).astype(x.dtype)
  return cdf + x * density


@jax.custom_vjp
def gelu_then_project(hidden, kernel, bias):
  """gelu(hidden) @ kernel + bias in hidden's dtype (kernel and bias cast to it, products
  accumulated in float32); the backward pass keeps only hidden and gelu(hidden)."""
  return matmul(gelu(hidden), kernel) + bias.astype(hidden.dtype)


def _gelu_then_project_forward(hidden, kernel, bias):
  activation = gelu(hidden)
  return matmul(activation, kernel) + bias.astype(hidden.dtype), (hidden, activation, kernel)


def _gelu_then_project_backward(residuals, grad_out):
  hidden, activation, kernel = residuals
  # One 2-D matmul over the flattened rows: contracting the batch and length axes together
  # (einsum '...i,...o->io') made XLA recompute GELU inside a transposing copy, the costliest
  # elementwise op of the CPU step.
  grad_kernel = kernel_gradient(activation, grad_out).astype(kernel.dtype)
  grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0, dtype=jnp.float32)
  grad_hidden = matmul(grad_out, kernel.T) * gelu_slope(hidden)
  return grad_hidden, grad_kernel, grad_bias.astype(kernel.dtype)


gelu_then_project.defvjp(_gelu_then_project_forward, _gelu_then_project_backward)


class FeedForward(nnx.Module):
  """W2 gelu(W1 x + b1) + b2 with the exact (erf) GELU of LRA."""

  def __init__(self, dim: int, hidden: int, *, init: str, dtype, rngs: nnx.Rngs):
    kernel_init = attention_base.projection_init(init, 'out')
    self.up = Linear(dim, hidden, kernel_init=kernel_init, dtype=dtype, rngs=rngs)
    self.down = Linear(hidden, dim, kernel_init=kernel_init, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    hidden = self.up(x)
    return gelu_then_project(hidden, self.down.kernel[...], self.down.bias[...])


# ----------------------------------------------------------------------------------------------
# LayerNorm.
# ----------------------------------------------------------------------------------------------
def layer_norm_statistics(x, epsilon):
  """Per-row mean and 1 / sqrt(var + eps) over the last axis, in float32."""
  x = x.astype(jnp.float32)
  mean = x.mean(-1, keepdims=True)
  variance = jnp.square(x - mean).mean(-1, keepdims=True)
  return mean, jax.lax.rsqrt(variance + epsilon)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x, scale, bias, epsilon):
  """(x - mean) / sqrt(var + eps) * scale + bias over the last axis; statistics in float32, the
  result in x's dtype. The backward pass keeps the normalised x and 1 / sqrt(var + eps)."""
  return _layer_norm_forward(x, scale, bias, epsilon)[0]


def _layer_norm_forward(x, scale, bias, epsilon):
  mean, inv_std = layer_norm_statistics(x, epsilon)
  normalized = (x.astype(jnp.float32) - mean) * inv_std
  return (normalized * scale + bias).astype(x.dtype), (normalized, inv_std, scale)


def _layer_norm_backward(epsilon, residuals, grad_out):
  del epsilon
  normalized, inv_std, scale = residuals
  x_dtype = grad_out.dtype  # The output's dtype, which is the input's.
  grad_out = grad_out.astype(jnp.float32)
  feature_axes = tuple(range(normalized.ndim - 1))
  grad_scale = jnp.sum(grad_out * normalized, axis=feature_axes)
  grad_bias = jnp.sum(grad_out, axis=feature_axes)
  grad_normalized = grad_out * scale
  grad_x = inv_std * (grad_normalized - grad_normalized.mean(-1, keepdims=True)
                      - normalized * (grad_normalized * normalized).mean(-1, keepdims=True))
  return grad_x.astype(x_dtype), grad_scale.astype(scale.dtype), grad_bias.astype(scale.dtype)


layer_norm.defvjp(_layer_norm_forward, _layer_norm_backward)


class LayerNorm(nnx.Module):
  """LayerNorm over the last axis with a learned scale (init 1) and bias (init 0), float32
  parameters and statistics whatever the compute dtype; output in the input's dtype."""

  def __init__(self, dim: int, *, epsilon: float = LAYER_NORM_EPS, dtype=jnp.float32):
    self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
    self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))
    self.epsilon = epsilon
    self.dtype = dtype

  def __call__(self, x):
    return layer_norm(x.astype(self.dtype), self.scale[...], self.bias[...], self.epsilon)
