"""LRU (lra_luna/models/blocks/lru.py) against its formulas: the ring initialisation's moduli and
phases within their bounds and uniform on the ring, the gamma normalisation, the exponential
parameterisation's stability, the layer against the step-by-step recurrence (values and
gradients, both directions), padding, causality, jit, low-precision compute with a float32
state, options and the optimizer's SSM group."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models import classifier as models
from lra_luna.models.blocks import lru
from lra_luna.training import steps
from test_s5 import model_config, step_by_step  # the shared helpers (tests/test_s5.py)


@pytest.mark.parametrize('r_min, r_max, max_phase', [(0.0, 1.0, 2 * math.pi),
                                                     (0.9, 0.999, math.pi / 10),
                                                     (0.5, 0.8, 1.0)])
def test_ring_init_moduli_and_phases_within_their_bounds(r_min, r_max, max_phase):
  nu_log, theta_log = lru.ring_init(jax.random.key(0), 20000, r_min, r_max, max_phase)
  lambda_ = np.asarray(lru.eigenvalues(nu_log, theta_log))
  modulus, phase = np.abs(lambda_), np.exp(np.asarray(theta_log))
  assert modulus.min() >= r_min - 1e-6 and modulus.max() <= r_max + 1e-6
  assert phase.min() >= 0 and phase.max() <= max_phase * (1 + 1e-6)
  np.testing.assert_allclose(np.angle(lambda_), np.angle(np.exp(1j * phase)), atol=1e-4)
  # Uniform on the ring (in area): |lambda|^2 ~ U[r_min^2, r_max^2], phase ~ U[0, max_phase].
  np.testing.assert_allclose(np.mean(modulus**2), (r_min**2 + r_max**2) / 2, atol=0.01)
  np.testing.assert_allclose(np.mean(phase), max_phase / 2, rtol=0.02)


def test_gamma_normalises_the_state_and_every_parameter_is_stable():
  nu_log, theta_log = lru.ring_init(jax.random.key(1), 64, 0.5, 0.99, math.pi)
  gamma = np.exp(np.asarray(lru.initial_gamma_log(nu_log, theta_log)))
  modulus = np.abs(np.asarray(lru.eigenvalues(nu_log, theta_log)))
  np.testing.assert_allclose(gamma, np.sqrt(1 - modulus**2), rtol=1e-5)
  # A white-noise input of variance 1 gives a stationary state of variance gamma^2 / (1 - r^2) = 1.
  noise = jax.random.normal(jax.random.key(2), (1, 20000, 64)).astype(jnp.complex64)
  lambda_ = lru.eigenvalues(nu_log, theta_log)
  state = np.asarray(jax.jit(lru.s5.linear_recurrence)(lambda_, noise * gamma))[0, 2000:]
  np.testing.assert_allclose(np.mean(np.abs(state)**2, axis=0), 1.0, rtol=0.25)
  # exp(-exp(nu)) < 1 for any nu: the recurrence cannot blow up whatever the parameters.
  wild = lru.eigenvalues(jnp.asarray([-30.0, 0.0, 30.0]), jnp.asarray([-5.0, 1.0, 5.0]))
  assert np.all(np.abs(np.asarray(wild)) <= 1.0)


def small_lru(bidirectional=True, seed=0, **scan_options):
  return lru.LRU(3, state_dim=5, r_min=0.4, r_max=0.95, max_phase=math.pi,
                 bidirectional=bidirectional, rngs=nnx.Rngs(seed), **scan_options)


def recurrence(params, u, bidirectional):
  """x_k = Lambda x_{k-1} + gamma (B u_k) stepped one position at a time (and backwards with the
  second C); y = Re(C x) + D u."""
  lambda_ = lru.eigenvalues(params['nu_log'], params['theta_log'])
  b = params['input_matrix'][..., 0] + 1j * params['input_matrix'][..., 1]
  c = params['output_matrix'][..., 0] + 1j * params['output_matrix'][..., 1]
  bu = jnp.einsum('nh,blh->bln', b * jnp.exp(params['gamma_log'])[:, None], u)
  a = jnp.broadcast_to(lambda_, (u.shape[1], len(lambda_)))
  y = jnp.einsum('hn,bln->blh', c[0], step_by_step(a, bu)).real
  if bidirectional:
    y = y + jnp.einsum('hn,bln->blh', c[1], step_by_step(a, bu, reverse=True)).real
  return y + u * params['d']


@pytest.mark.parametrize('scan_options', [{'scan': 'associative'}, {'scan': 'sequential'},
                                          {'scan': 'chunked', 'chunk': 4}])
@pytest.mark.parametrize('bidirectional', [False, True])
def test_layer_equals_the_step_by_step_recurrence_values_and_gradients(bidirectional,
                                                                        scan_options):
  layer = small_lru(bidirectional, **scan_options)
  u = jnp.asarray(np.random.RandomState(3).normal(size=(2, 11, 3)), jnp.float32)
  graph, params = nnx.split(layer)
  pure = {k: v[...] for k, v in nnx.to_flat_state(params)}
  names = {k[0]: k for k in pure}
  flat = {k[0]: v for k, v in pure.items()}
  # Compiled, both sides: eagerly the associative scan's ops take seconds to dispatch.
  through_layer = jax.jit(lambda p: nnx.merge(graph, nnx.from_flat_state(
      {names[k]: v for k, v in p.items()}))(u))
  recurrence_of = jax.jit(recurrence, static_argnums=2)
  np.testing.assert_allclose(through_layer(flat), recurrence_of(flat, u, bidirectional),
                             rtol=1e-4, atol=1e-5)
  weights = jnp.asarray(np.random.RandomState(4).normal(size=u.shape), jnp.float32)
  got = jax.grad(lambda p: jnp.sum(weights * through_layer(p)))(flat)
  want = jax.grad(lambda p: jnp.sum(weights * recurrence_of(p, u, bidirectional)))(flat)
  for name in flat:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize('prenorm', [True, False])
def test_padding_changes_no_real_output(prenorm):
  model = models.build_model(model_config('lru', attention_options={'prenorm': prenorm}), seed=0)
  real = np.random.RandomState(0).randint(1, 11, (2, 7))
  short = np.concatenate([real, np.zeros((2, 2), int)], 1)
  long = np.concatenate([real, np.zeros((2, 12), int)], 1)
  ids_s, mask_s = models.with_cls(jnp.asarray(short), 11, True)
  ids_l, mask_l = models.with_cls(jnp.asarray(long), 11, True)
  ids_l = jnp.where(mask_l, ids_l, 5)  # garbage under the mask
  encode = nnx.jit(lambda m, ids, mask: m.encoder(ids, mask)[0])
  np.testing.assert_allclose(encode(model, ids_s, mask_s)[:, :8],
                             encode(model, ids_l, mask_l)[:, :8], atol=1e-5)
  np.testing.assert_allclose(model({'inputs': short}), model({'inputs': long}), atol=1e-5)


@pytest.mark.parametrize('bidirectional', [False, True])
def test_causal_form_sees_no_future(bidirectional):
  block = lru.LRUBlock(model_config('lru', attention_options={'bidirectional': bidirectional}),
                       nnx.Rngs(0))
  x = jnp.asarray(np.random.RandomState(4).normal(size=(1, 12, 8)), jnp.float32)
  changed = x.at[:, 7].add(jnp.arange(8.0))  # not a constant: LayerNorm would remove it
  mask = jnp.ones((1, 12), bool)
  difference = np.abs(np.asarray(block(changed, mask) - block(x, mask)))
  assert difference[:, 7:].max() > 1e-3
  if bidirectional:
    assert difference[:, :7].max() > 1e-3
  else:
    assert difference[:, :7].max() == 0.0


def test_jit_equals_eager_and_every_dtype_keeps_a_float32_state():
  inputs = np.random.RandomState(1).randint(1, 11, (2, 20))
  model = models.build_model(model_config('lru'), seed=0)
  eager = model({'inputs': inputs})
  jitted = nnx.jit(lambda m, x: m({'inputs': x}))(model, inputs)
  np.testing.assert_allclose(eager, jitted, rtol=1e-5, atol=1e-5)
  layer = small_lru()
  u = jnp.asarray(np.random.RandomState(5).normal(size=(2, 9, 3)), jnp.float16)
  assert layer(u).dtype == jnp.float32
  np.testing.assert_array_equal(layer(u), layer(u.astype(jnp.float32)))
  for dtype in ('bfloat16', 'float16'):
    half = models.build_model(model_config('lru', dtype=dtype), seed=0)
    loss = lambda m: jnp.mean(m({'inputs': inputs}, deterministic=False,
                                rngs=nnx.Rngs(dropout=0)) ** 2)
    value, grads = nnx.jit(nnx.value_and_grad(loss))(half)  # as training runs it: compiled
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    np.testing.assert_allclose(nnx.jit(lambda m, x: m({'inputs': x}))(half, inputs), eager,
                               atol=0.1)
    assert half.encoder.blocks[0].ssm.nu_log.dtype == jnp.float32


@pytest.mark.parametrize('options, message', [
    ({'r_min': 0.9, 'r_max': 0.5}, 'r_min = 0.9, r_max = 0.5 are not valid'),
    ({'r_max': 1.5}, 'r_min = 0.0, r_max = 1.5 are not valid'),
    ({'max_phase': 0.0}, 'max_phase = 0.0 is not valid'),
    ({'state_dim': 0}, 'state_dim = 0 is not valid'),
    ({'activation': 'relu'}, "activation = 'relu' is not valid"),
    ({'chunk': 2.5}, 'chunk = 2.5 is not valid'),
])
def test_impossible_option_is_refused(options, message):
  with pytest.raises(ValueError, match=message):
    lru.LRUBlock.check_options(**options)


def test_recurrence_parameters_are_the_optimizers_ssm_group():
  model = models.build_model(model_config('lru'), seed=0)
  groups = steps.parameter_groups(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  ssm = groups['encoder']['blocks'][0]['ssm']
  assert {name: ssm[name] for name in lru.SSM_PARAMETERS} == dict.fromkeys(
      lru.SSM_PARAMETERS, 'ssm')
  assert ssm['output_matrix'] == ssm['d'] == 'default'
