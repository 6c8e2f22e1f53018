"""The lean LayerNorm and FFN equal the textbook formulas (values and gradients) and keep less
memory for the backward pass than plain autodiff of those formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.nn import layers, linear
from lra_luna import profile


def plain_layer_norm(x, scale, bias, epsilon=layers.LAYER_NORM_EPS):
  mean = x.mean(-1, keepdims=True)
  variance = jnp.square(x - mean).mean(-1, keepdims=True)
  return (x - mean) / jnp.sqrt(variance + epsilon) * scale + bias


def plain_gelu_then_project(hidden, kernel, bias):
  return jax.nn.gelu(hidden, approximate=False) @ kernel + bias


def random_arrays(shapes, seed=0):
  keys = jax.random.split(jax.random.key(seed), len(shapes))
  return [jax.random.normal(key, shape) for key, shape in zip(keys, shapes)]


def test_layer_norm_values_and_gradients_match_the_formula():
  x, scale, bias, cotangent = random_arrays([(3, 7, 16), (16,), (16,), (3, 7, 16)])
  x = x * 3.0 + 1.5  # Off-centre rows with a large spread.
  lean = lambda x, s, b: layers.layer_norm(x, s, b, layers.LAYER_NORM_EPS)
  np.testing.assert_allclose(lean(x, scale, bias), plain_layer_norm(x, scale, bias),
                             rtol=1e-5, atol=1e-5)
  lean_grads = jax.vjp(lean, x, scale, bias)[1](cotangent)
  plain_grads = jax.vjp(plain_layer_norm, x, scale, bias)[1](cotangent)
  for got, want in zip(lean_grads, plain_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_gelu_then_project_values_and_gradients_match_the_formula():
  hidden, kernel, bias, cotangent = random_arrays([(2, 9, 32), (32, 8), (8,), (2, 9, 8)])
  hidden = hidden * 3.0  # Reach both tails of the GELU.
  np.testing.assert_allclose(layers.gelu_then_project(hidden, kernel, bias),
                             plain_gelu_then_project(hidden, kernel, bias), rtol=1e-5, atol=1e-5)
  lean_grads = jax.vjp(layers.gelu_then_project, hidden, kernel, bias)[1](cotangent)
  plain_grads = jax.vjp(plain_gelu_then_project, hidden, kernel, bias)[1](cotangent)
  for got, want in zip(lean_grads, plain_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_layer_norm_module_keeps_float32_statistics_in_bfloat16():
  norm = layers.LayerNorm(16, dtype=jnp.bfloat16)
  assert norm.scale[...].dtype == jnp.float32 and norm.bias[...].dtype == jnp.float32
  np.testing.assert_array_equal(norm.scale[...], np.ones(16))
  np.testing.assert_array_equal(norm.bias[...], np.zeros(16))
  (x,) = random_arrays([(4, 16)])
  x = (x * 2.0 + 3.0).astype(jnp.bfloat16)
  y = norm(x)
  assert y.dtype == jnp.bfloat16
  # Only the output's bf16 rounding separates it from the float32 formula on the same inputs.
  np.testing.assert_allclose(y.astype(jnp.float32), plain_layer_norm(x.astype(jnp.float32), 1, 0),
                             atol=2e-2)


def training_step_temp_bytes(model_name: str) -> int:
  """Temporary memory of a small Luna or Transformer's compiled training step (Text config)."""
  config = profile.point_config(str(profile.TEXT_CONFIG), model_name, 256, 2, 'float32')
  config.model.update(dim=32, ffn_dim=128, num_layers=2, classifier_dim=32)
  step, state, batch, dropout_key, _ = profile.build_step(config)
  compiled = step.lower(state, batch, dropout_key).compile()
  return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize('model_name', ['luna16', 'transformer'])
def test_lean_blocks_keep_less_memory_than_plain_autodiff(model_name, monkeypatch):
  """The whole training step needs less temporary memory with the lean LayerNorm and GELU than
  with the same formulas differentiated plainly (XLA's compiled estimate, deterministic).
  How much less depends on XLA: lean / plain here is 0.776 (Luna-16) and 0.935 (Transformer)
  with JAX 0.10.2, 0.853 and 0.950 with JAX 0.12.0.1. The lean step's bytes are the same on both
  (Luna-16 4,501,696); XLA 0.12 makes the plain one smaller (README, "Memory on XLA 0.12")."""
  lean_bytes = training_step_temp_bytes(model_name)
  monkeypatch.setattr(layers, 'layer_norm', plain_layer_norm)
  monkeypatch.setattr(layers, 'gelu_then_project', plain_gelu_then_project)
  plain_bytes = training_step_temp_bytes(model_name)
  assert lean_bytes < 0.985 * plain_bytes, (lean_bytes, plain_bytes)


def test_feed_forward_equals_its_formula():
  ffn = layers.FeedForward(8, 32, init='reference', dtype=jnp.float32, rngs=nnx.Rngs(0))
  (x,) = random_arrays([(2, 5, 8)])
  want = plain_gelu_then_project(x @ ffn.up.kernel[...] + ffn.up.bias[...],
                                 ffn.down.kernel[...], ffn.down.bias[...])
  np.testing.assert_allclose(ffn(x), want, rtol=1e-5, atol=1e-5)


def test_dense_values_and_gradients_match_autodiff():
  """models/linear.dense (hand-written kernel gradient) equals x @ W + b differentiated plainly,
  for a 3-D input (rows = batch x length) and a 2-D one."""
  for shape in [(2, 9, 16), (7, 16)]:
    x, kernel, bias, cotangent = random_arrays([shape, (16, 24), (24,), shape[:-1] + (24,)])
    plain = lambda x, k, b: x @ k + b
    np.testing.assert_allclose(linear.dense(x, kernel, bias), plain(x, kernel, bias),
                               rtol=1e-6, atol=1e-6)
    got = jax.vjp(linear.dense, x, kernel, bias)[1](cotangent)
    want = jax.vjp(plain, x, kernel, bias)[1](cotangent)
    for g, w in zip(got, want):
      assert g.shape == w.shape
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_project_values_and_gradients_match_autodiff():
  """models/linear.project (no bias, the SSMs' projections) equals x @ W differentiated plainly,
  for a 3-D input and a 2-D one."""
  for shape in [(4, 3, 16), (5, 16)]:
    x, kernel, cotangent = random_arrays([shape, (16, 10), shape[:-1] + (10,)])
    plain = lambda x, k: x @ k
    np.testing.assert_allclose(linear.project(x, kernel), plain(x, kernel), rtol=1e-6,
                               atol=1e-6)
    got = jax.vjp(linear.project, x, kernel)[1](cotangent)
    want = jax.vjp(plain, x, kernel)[1](cotangent)
    for g, w in zip(got, want):
      assert g.shape == w.shape
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_linear_is_nnx_linear_with_the_fast_gradient():
  """Same parameters and initialisation as nnx.Linear from the same seed, same outputs and
  parameter gradients; bfloat16 compute keeps float32 parameters and returns bfloat16."""
  ours = linear.Linear(16, 8, rngs=nnx.Rngs(3))
  theirs = nnx.Linear(16, 8, rngs=nnx.Rngs(3))
  np.testing.assert_array_equal(ours.kernel[...], theirs.kernel[...])
  (x,) = random_arrays([(3, 5, 16)])
  loss = lambda model: jnp.sum(jnp.sin(model(x)))
  np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-6, atol=1e-6)
  got, want = nnx.grad(loss)(ours), nnx.grad(loss)(theirs)
  np.testing.assert_allclose(got.kernel[...], want.kernel[...], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.bias[...], want.bias[...], rtol=1e-5, atol=1e-5)
  half = linear.Linear(16, 8, dtype=jnp.bfloat16, rngs=nnx.Rngs(3))
  assert half.kernel[...].dtype == jnp.float32
  assert half(x).dtype == jnp.bfloat16
  assert nnx.grad(lambda m: jnp.sum(m(x).astype(jnp.float32)))(half).kernel[...].dtype == jnp.float32
