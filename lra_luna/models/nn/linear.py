"""The Linear layer of every projection that runs over the sequence, with a hand-written backward
pass whose kernel gradient XLA's CPU backend computes without a transposing copy.

Plain autodiff of x @ W + b gives the kernel gradient as dot(x, g) contracting the token axis, and
XLA's CPU backend lays it out by first copying g transposed ([out, tokens]) and then running a
generic dot with both operands in the wrong order for its fast matmul kernels: at 4K tokens that
was the slowest dot of the Luna training step (about 30 GFLOP/s on one core against about 88 for
the forward matmuls). Writing the gradient as x_rows^T @ g_rows (rows = every leading axis
flattened) gives one 2-D dot with no copy. Values are those of autodiff up to float32 summation
order (tests compare the two).

Under bfloat16/float16 compute the float32 parameters are cast to the inputs' dtype inside `dense`
and every product accumulates in float32; the kernel and bias gradients come back in float32,
so a float16 run's parameter gradients are never rounded to float16.
"""

import jax
import jax.numpy as jnp
from flax import nnx


def kernel_gradient(inputs: jax.Array, grad_out: jax.Array) -> jax.Array:
  """d(inputs @ W)/dW contracted with grad_out: sum over every leading axis of inputs^T grad_out,
  as one 2-D matmul over the flattened rows ([in, rows] @ [rows, out])."""
  rows_in = inputs.reshape(-1, inputs.shape[-1])
  rows_out = grad_out.reshape(-1, grad_out.shape[-1])
  return jnp.dot(rows_in.T, rows_out, preferred_element_type=jnp.float32)


def matmul(inputs: jax.Array, kernel: jax.Array) -> jax.Array:
  """inputs @ kernel in inputs' dtype (kernel cast to it), accumulated in float32."""
  return jnp.dot(inputs, kernel.astype(inputs.dtype),
                 preferred_element_type=jnp.float32).astype(inputs.dtype)


@jax.custom_vjp
def project(inputs: jax.Array, kernel: jax.Array) -> jax.Array:
  """inputs @ kernel over the last axis of inputs (`matmul`), with the kernel gradient of
  `kernel_gradient` (one 2-D dot over the flattened rows)."""
  return matmul(inputs, kernel)


def _project_forward(inputs, kernel):
  return project(inputs, kernel), (inputs, kernel)


def _project_backward(residuals, grad_out):
  inputs, kernel = residuals
  return (matmul(grad_out, kernel.T),
          kernel_gradient(inputs, grad_out).astype(kernel.dtype))


project.defvjp(_project_forward, _project_backward)


@jax.custom_vjp
def dense(inputs: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
  """inputs @ kernel + bias over the last axis of inputs, in inputs' dtype (kernel and bias are
  cast to it; their gradients come back in their own dtype)."""
  return matmul(inputs, kernel) + bias.astype(inputs.dtype)


def _dense_forward(inputs, kernel, bias):
  return dense(inputs, kernel, bias), (inputs, kernel)


def _dense_backward(residuals, grad_out):
  inputs, kernel = residuals
  grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0, dtype=jnp.float32)
  return (matmul(grad_out, kernel.T), kernel_gradient(inputs, grad_out).astype(kernel.dtype),
          grad_bias.astype(kernel.dtype))


dense.defvjp(_dense_forward, _dense_backward)


class Linear(nnx.Linear):
  """`nnx.Linear` (same parameters, initialisers and dtype promotion, bias always on) whose call
  goes through `dense`, so its kernel gradient is the fast one."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    dtype = self.dtype or jnp.result_type(inputs, self.kernel[...])
    return dense(inputs.astype(dtype), self.kernel[...], self.bias[...])
