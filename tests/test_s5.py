"""S5 (lra_luna/models/blocks/s5.py) against its formulas: HiPPO-N and its eigendecomposition, the
block-diagonal initialisation, ZOH and bilinear against the matrix exponential and the bilinear
formula on the dense (non-diagonal) matrix, the parallel scan against the step-by-step recurrence
(values and gradients, both directions), the layer against its recurrence, padding, causality,
jit, low-precision compute with a float32 state, options and the optimizer's SSM group."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from flax import nnx

from lra_luna import config_lib
from lra_luna import registry
from lra_luna.models import classifier as models
from lra_luna.models.blocks import s5
from lra_luna.models.model_config import ModelConfig
from lra_luna.training import steps


# ----------------------------------------------------------------------------------------------
# Initialisation.
# ----------------------------------------------------------------------------------------------
def test_hippo_legs_entries():
  a = s5.hippo_legs(4)
  assert a[2, 1] == pytest.approx(-np.sqrt(5 * 3)) and a[3, 3] == pytest.approx(-4) and a[1, 2] == 0


@pytest.mark.parametrize('size', [2, 8, 16])
def test_hippo_n_eigendecomposition_is_the_spectrum_of_the_normal_part(size):
  s = s5.hippo_n(size)
  lambda_, v = s5.hippo_n_eigendecomposition(size)
  np.testing.assert_allclose(s, s5.hippo_legs(size) + np.sqrt(np.outer(
      np.arange(size) + 0.5, np.arange(size) + 0.5)), atol=1e-12)
  np.testing.assert_allclose(np.diag(s), -0.5)                  # -1/2 + a skew-symmetric part
  np.testing.assert_allclose(s + s.T, -np.eye(size), atol=1e-12)
  np.testing.assert_allclose(v.conj().T @ v, np.eye(size), atol=1e-10)   # unitary
  np.testing.assert_allclose(v @ np.diag(lambda_) @ v.conj().T, s, atol=1e-10)
  expected = np.linalg.eigvals(s)
  np.testing.assert_allclose(np.sort(lambda_.imag), np.sort(expected.imag), atol=1e-8)
  np.testing.assert_allclose(lambda_.real, -0.5)
  # Eigenvalues come in conjugate pairs: the first half are the conjugates of the second.
  np.testing.assert_allclose(np.sort(-lambda_.imag[: size // 2]),
                             np.sort(lambda_.imag[size // 2:]), atol=1e-8)


@pytest.mark.parametrize('conj_sym', [True, False])
def test_block_diagonal_init_repeats_hippo_n_per_block(conj_sym):
  lambda_, v, v_inv = s5.block_diagonal_init(12, 3, conj_sym)
  block, _ = s5.hippo_n_eigendecomposition(4)
  kept = 2 if conj_sym else 4
  assert lambda_.shape == (3 * kept,) and v.shape == (12, 3 * kept) and v_inv.shape == (3 * kept, 12)
  np.testing.assert_allclose(lambda_, np.tile(block[:kept], 3))
  if conj_sym:
    assert np.all(lambda_.imag < 0)
  np.testing.assert_allclose(v_inv @ v, np.eye(3 * kept), atol=1e-10)
  assert np.all(v[:4, kept:] == 0) and np.all(v[4:, :kept] == 0)  # block diagonal


# ----------------------------------------------------------------------------------------------
# Discretisation against the dense formulas.
# ----------------------------------------------------------------------------------------------
def test_zoh_per_mode_equals_the_augmented_matrix_exponential():
  """exp([[lambda D, D b^T], [0, 0]]) = [[lambda_bar, b_bar^T], [0, 1]] (Van Loan), per mode."""
  rng = np.random.RandomState(0)
  lambda_ = -rng.uniform(0.1, 1, 4) + 1j * rng.normal(size=4)
  b = rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))
  step = rng.uniform(0.01, 0.5, 4)
  lambda_bar, b_bar = s5.discretize_zoh(jnp.asarray(lambda_, jnp.complex64),
                                        jnp.asarray(b, jnp.complex64), jnp.asarray(step))
  for p in range(4):
    augmented = np.zeros((4, 4), complex)
    augmented[0, 0], augmented[0, 1:] = lambda_[p] * step[p], step[p] * b[p]
    exp = scipy.linalg.expm(augmented)
    np.testing.assert_allclose(lambda_bar[p], exp[0, 0], rtol=1e-5)
    np.testing.assert_allclose(b_bar[p], exp[0, 1:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('method', ['zoh', 'bilinear'])
def test_discretisation_of_the_diagonal_equals_the_dense_hippo_n(method):
  """With A = HiPPO-N = V diag(Lambda) V^H and B~ = V^H B: V diag(Lambda_bar) V^H and V B_bar
  equal the dense expm(A D), A^-1 (expm(A D) - I) B (ZOH) or (I - D/2 A)^-1 (I + D/2 A),
  (I - D/2 A)^-1 D B (bilinear)."""
  a = s5.hippo_n(8)
  lambda_, v = s5.hippo_n_eigendecomposition(8)
  b = np.random.RandomState(1).normal(size=(8, 3))
  delta = 0.3
  lambda_bar, b_bar = s5.DISCRETIZE[method](jnp.asarray(lambda_, jnp.complex64),
                                            jnp.asarray(v.conj().T @ b, jnp.complex64),
                                            jnp.full((8,), delta, jnp.float32))
  if method == 'zoh':
    a_bar = scipy.linalg.expm(a * delta)
    b_dense = np.linalg.solve(a, (a_bar - np.eye(8)) @ b)
  else:
    inverse = np.linalg.inv(np.eye(8) - delta / 2 * a)
    a_bar, b_dense = inverse @ (np.eye(8) + delta / 2 * a), inverse @ (delta * b)
  np.testing.assert_allclose(v @ np.diag(lambda_bar) @ v.conj().T, a_bar, atol=1e-5)
  np.testing.assert_allclose(v @ np.asarray(b_bar), b_dense, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# The scan against the step-by-step recurrence.
# ----------------------------------------------------------------------------------------------
def step_by_step(a, bu, reverse=False):
  """x_k = a_k x_{k-1} + bu_k (backwards: x_k = a_k x_{k+1} + bu_k), one Python step each."""
  order = range(bu.shape[1] - 1, -1, -1) if reverse else range(bu.shape[1])
  x, out = jnp.zeros_like(bu[:, 0]), [None] * bu.shape[1]
  for k in order:
    x = a[k] * x + bu[:, k]
    out[k] = x
  return jnp.stack(out, 1)


def random_recurrence(length=13, seed=0):
  rng = np.random.RandomState(seed)
  a = (rng.uniform(0.5, 0.99, (length, 3)) * np.exp(1j * rng.uniform(-3, 3, (length, 3))))
  bu = rng.normal(size=(2, length, 3)) + 1j * rng.normal(size=(2, length, 3))
  return jnp.asarray(a, jnp.complex64), jnp.asarray(bu, jnp.complex64)


@pytest.mark.parametrize('method', s5.SCANS)
@pytest.mark.parametrize('reverse', [False, True])
def test_scan_equals_the_step_by_step_recurrence_values_and_gradients(method, reverse):
  a, bu = random_recurrence()
  weights = jnp.asarray(np.random.RandomState(2).normal(size=bu.shape), jnp.float32)
  scan = lambda a, bu: s5.linear_recurrence(a, bu, reverse=reverse, method=method)
  reference = lambda a, bu: step_by_step(a, bu, reverse)
  np.testing.assert_allclose(scan(a, bu), reference(a, bu), rtol=1e-5, atol=1e-5)
  loss = lambda f: lambda a, bu: jnp.sum(weights * (f(a, bu).real + 2 * f(a, bu).imag))
  got = jax.grad(loss(scan), argnums=(0, 1))(a, bu)
  want = jax.grad(loss(reference), argnums=(0, 1))(a, bu)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
  # A constant a [P] is the same as a repeated per step.
  np.testing.assert_allclose(s5.linear_recurrence(a[0], bu, reverse=reverse, method=method),
                             reference(jnp.broadcast_to(a[0], a.shape), bu), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('chunk', [1, 4, 5, 13, 20])
@pytest.mark.parametrize('reverse', [False, True])
@pytest.mark.parametrize('per_step', [False, True])
def test_chunked_scan_equals_the_step_by_step_recurrence_values_and_gradients(chunk, reverse,
                                                                              per_step):
  """Chunks that divide the 13 steps or not, one step each, one chunk, a chunk past the end; a
  per step or one a for every step (its gradient summed over the steps)."""
  a, bu = random_recurrence(seed=chunk)
  a = a if per_step else a[0]
  weights = jnp.asarray(np.random.RandomState(5).normal(size=bu.shape), jnp.float32)
  scan = lambda a, bu: s5.linear_recurrence(a, bu, reverse=reverse, method='chunked',
                                            chunk=chunk)
  reference = lambda a, bu: step_by_step(jnp.broadcast_to(a, bu.shape[1:]), bu, reverse)
  np.testing.assert_allclose(scan(a, bu), reference(a, bu), rtol=1e-5, atol=1e-5)
  loss = lambda f: lambda a, bu: jnp.sum(weights * (f(a, bu).real - 3 * f(a, bu).imag))
  got = jax.grad(loss(scan), argnums=(0, 1))(a, bu)
  want = jax.grad(loss(reference), argnums=(0, 1))(a, bu)
  assert got[0].shape == a.shape
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('method', s5.SCANS)
@pytest.mark.parametrize('reverse', [False, True])
def test_one_a_for_every_step_has_the_gradient_of_the_recurrence(method, reverse):
  """The backward pass of one a [P] for every step: sum over steps and batch of its terms."""
  a, bu = random_recurrence(seed=7)
  weights = jnp.asarray(np.random.RandomState(6).normal(size=bu.shape), jnp.float32)
  scan = lambda a, bu: s5.linear_recurrence(a, bu, reverse=reverse, method=method, chunk=4)
  reference = lambda a, bu: step_by_step(jnp.broadcast_to(a, bu.shape[1:]), bu, reverse)
  loss = lambda f: lambda a, bu: jnp.sum(weights * (2 * f(a, bu).real + f(a, bu).imag))
  got = jax.grad(loss(scan), argnums=(0, 1))(a[0], bu)
  want = jax.grad(loss(reference), argnums=(0, 1))(a[0], bu)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def small_ssm(bidirectional=True, conj_sym=True, discretization='zoh', c_init='lecun_normal',
              seed=0, dim=3):
  return s5.S5SSM(dim, state_dim=8, blocks=2, c_init=c_init, discretization=discretization,
                  conj_sym=conj_sym, clip_eigs=False, bidirectional=bidirectional,
                  dt_min=0.01, dt_max=0.5, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize('bidirectional', [False, True])
@pytest.mark.parametrize('conj_sym', [False, True])
def test_layer_equals_its_recurrence(bidirectional, conj_sym):
  """y_k = Re(C1 x_k) + Re(C2 x'_k) (x2 with conjugate symmetry) + D u_k, x forwards and x'
  backwards through Lambda_bar, B_bar, stepped one position at a time."""
  layer = small_ssm(bidirectional, conj_sym, discretization='bilinear')
  u = jnp.asarray(np.random.RandomState(3).normal(size=(2, 11, 3)), jnp.float32)
  lambda_bar, b_bar = layer.discrete()
  bu = jnp.einsum('ph,blh->blp', b_bar, u.astype(jnp.complex64))
  a = jnp.broadcast_to(lambda_bar, (11, len(lambda_bar)))
  c = layer.c_tilde[...][..., 0] + 1j * layer.c_tilde[...][..., 1]
  y = jnp.einsum('hp,blp->blh', c[0], step_by_step(a, bu)).real
  if bidirectional:
    y = y + jnp.einsum('hp,blp->blh', c[1], step_by_step(a, bu, reverse=True)).real
  expected = (2 if conj_sym else 1) * y + u * layer.d[...]
  np.testing.assert_allclose(layer(u), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('c_init', s5.C_INITS)
def test_parameters_at_initialisation(c_init):
  layer = small_ssm(c_init=c_init)
  lambda_, _, _ = s5.block_diagonal_init(8, 2, True)
  np.testing.assert_allclose(layer.lambda_re[...], lambda_.real, rtol=1e-6)
  np.testing.assert_allclose(layer.lambda_im[...], lambda_.imag, rtol=1e-6)
  steps_ = np.exp(layer.log_step[...])
  assert steps_.shape == (4,) and np.all((steps_ >= 0.01) & (steps_ <= 0.5))
  assert layer.b_tilde.shape == (4, 3, 2) and layer.c_tilde.shape == (2, 3, 4, 2)


# ----------------------------------------------------------------------------------------------
# The block in the model: padding, causality, jit, precision, options, optimizer group.
# ----------------------------------------------------------------------------------------------
def model_config(name='s5', **overrides):
  config = config_lib.load_config(f'configs/listops.py:{name},quick')
  config.model.update(vocab_size=11, num_classes=3, max_length=24, dim=8, num_layers=2,
                      classifier_dim=8)
  config.model.attention_options.update(registry.get(name).test_options)
  options = {**dict(config.model.attention_options), **overrides.pop('attention_options', {})}
  return ModelConfig.from_config({**dict(config.model), 'attention_options': options,
                                  **overrides})


@pytest.mark.parametrize('prenorm', [True, False])
def test_padding_changes_no_real_output(prenorm):
  model = models.build_model(model_config(attention_options={'prenorm': prenorm}), seed=0)
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
  block = s5.S5Block(model_config(attention_options={'bidirectional': bidirectional}),
                     nnx.Rngs(0))
  x = jnp.asarray(np.random.RandomState(4).normal(size=(1, 12, 8)), jnp.float32)
  changed = x.at[:, 7].add(jnp.arange(8.0))  # not a constant: LayerNorm would remove it
  mask = jnp.ones((1, 12), bool)
  difference = np.abs(np.asarray(block(changed, mask) - block(x, mask)))
  assert difference[:, 7:].max() > 1e-3
  if bidirectional:
    assert difference[:, :7].max() > 1e-3  # the backward scan carries the change back
  else:
    assert difference[:, :7].max() == 0.0


def test_jit_equals_eager_and_every_dtype_keeps_a_float32_state():
  inputs = np.random.RandomState(1).randint(1, 11, (2, 20))
  model = models.build_model(model_config(), seed=0)
  eager = model({'inputs': inputs})
  jitted = nnx.jit(lambda m, x: m({'inputs': x}))(model, inputs)
  np.testing.assert_allclose(eager, jitted, rtol=1e-5, atol=1e-5)
  # The SSM reads a half-precision input as float32: the same output as its float32 copy.
  layer = small_ssm()
  u = jnp.asarray(np.random.RandomState(5).normal(size=(2, 9, 3)), jnp.bfloat16)
  out = layer(u)
  assert out.dtype == jnp.float32
  np.testing.assert_array_equal(out, layer(u.astype(jnp.float32)))
  for dtype in ('bfloat16', 'float16'):
    half = models.build_model(model_config(dtype=dtype), seed=0)
    loss = lambda m: jnp.mean(m({'inputs': inputs}, deterministic=False,
                                rngs=nnx.Rngs(dropout=0)) ** 2)
    value, grads = nnx.jit(nnx.value_and_grad(loss))(half)  # as training runs it: compiled
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    np.testing.assert_allclose(nnx.jit(lambda m, x: m({'inputs': x}))(half, inputs), eager,
                               atol=0.1)
    ssm = half.encoder.blocks[0].ssm
    assert ssm.lambda_re.dtype == jnp.float32 and ssm.discrete()[0].dtype == jnp.complex64


@pytest.mark.parametrize('options', [{'scan': 'sequential'}, {'scan': 'chunked', 'chunk': 3}])
def test_sequential_and_chunked_scans_give_the_same_model(options):
  inputs = np.random.RandomState(1).randint(1, 11, (2, 20))
  parallel = models.build_model(model_config(attention_options={'scan': 'associative'}), seed=0)
  other = models.build_model(model_config(attention_options=options), seed=0)
  np.testing.assert_allclose(parallel({'inputs': inputs}), other({'inputs': inputs}),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('options, message', [
    ({'state_dim': 12, 'blocks': 4}, 'state_dim = 12, blocks = 4 are not valid'),
    ({'c_init': 'normal'}, "c_init = 'normal' is not valid"),
    ({'discretization': 'euler'}, "discretization = 'euler' is not valid"),
    ({'activation': 'relu'}, "activation = 'relu' is not valid"),
    ({'dt_min': 0.5, 'dt_max': 0.1}, 'dt_min = 0.5, dt_max = 0.1 are not valid'),
    ({'chunk': 0}, 'chunk = 0 is not valid'),
])
def test_impossible_option_is_refused(options, message):
  with pytest.raises(ValueError, match=message):
    s5.S5Block.check_options(**options)


def test_ssm_parameters_are_the_optimizers_ssm_group():
  model = models.build_model(model_config(), seed=0)
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  groups = steps.parameter_groups(params)
  block = groups['encoder']['blocks'][0]
  assert {name: block['ssm'][name] for name in s5.SSM_PARAMETERS} == dict.fromkeys(
      s5.SSM_PARAMETERS, 'ssm')
  assert block['ssm']['c_tilde'] == block['ssm']['d'] == block['gate']['kernel'] == 'default'


def test_paper_protocol_is_the_authors_script():
  config = config_lib.load_config('configs/listops.py:s5,paper')
  assert (config.model.dim, config.model.num_layers, config.batch_size) == (128, 8, 50)
  assert config.learning_rate == pytest.approx(3e-3) and config.ssm_learning_rate == 1e-3
  assert config.num_train_steps == 40 * 1920 and config.warmup_steps == 1920
  assert dict(config.model.attention_options)['state_dim'] == 16
  pathx = config_lib.load_config('configs/pathx.py:s5,paper')
  assert pathx.model.attention_options.c_init == 'complex_normal'
  assert pathx.ssm_learning_rate == 6e-4 and pathx.learning_rate == pytest.approx(1.8e-3)


@pytest.mark.parametrize('model_name', ['s5', 'lru'])
def test_compiled_step_memory_grows_at_most_linearly(model_name):
  """XLA's memory estimate of the whole training step as the profiler measures it (the Text
  model with one of its layers, batch 1) at 1K, 2K and 4K tokens: fitted log-log slope at most
  1.05 (a quadratic term would push it towards 2). Every layer is the same: one compiles in a
  fraction of the time and shows the same growth."""
  from lra_luna.profile import measure, slopes
  lengths = (1024, 2048, 4096)
  memory = []
  for length in lengths:
    config = measure.point_config('configs/text.py', model_name, length, 1, 'float32',
                                  overrides=('model.num_layers=1',))
    step, state, batch, dropout_key, _ = measure.build_step(config)
    compiled = step.lower(state, batch, dropout_key).compile()
    memory.append(measure.compiled_memory(compiled)['estimated_bytes'])
  assert slopes.fitted_slope(lengths, memory)['slope'] <= 1.05
  assert memory[2] > 2 * memory[0]  # it does grow with n: the estimate sees the activations
