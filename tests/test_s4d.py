"""S4D (lra_luna/models/s4d.py) against its formulas: the Vandermonde kernel against the
discretised recurrence unrolled step by step (values and gradients), the FFT convolution against
a direct sum, the bidirectional form, padding, jit, bfloat16, and the optimizer's SSM group."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import config_lib
from lra_luna import protocols
from lra_luna import registry
from lra_luna.models import classifier as models
from lra_luna.models import encoder
from lra_luna.models.blocks import s4d
from lra_luna.models.model_config import ModelConfig
from lra_luna.training import steps


def small_layer(bidirectional=True, dim=3, state_dim=4, seed=0, num_ssm=0):
  return s4d.S4D(dim, state_dim=state_dim, init='inv', dt_min=0.01, dt_max=0.5,
                 bidirectional=bidirectional, rngs=nnx.Rngs(seed), num_ssm=num_ssm)


def ssm_parameters(layer):
  return {name: getattr(layer, name)[...] for name in ('log_dt', 'log_a_real', 'a_imag', 'c', 'd')}


def recurrence(params, u):
  """y [B, L, H] by unrolling x_k = dA x_{k-1} + dB u_k, y_k = 2 Re(C x_k) (ZOH) step by step,
  forwards with C[0] and, bidirectional, backwards with C[1] shifted one step, plus D u.
  A of one copy (num_ssm = 1, shape [1, M]) broadcasts to every feature."""
  dt = jnp.exp(params['log_dt'])[:, None]
  a = -jnp.exp(params['log_a_real']) + 1j * params['a_imag']
  d_a, d_b = jnp.exp(dt * a), (jnp.exp(dt * a) - 1.0) / a
  c = params['c'][..., 0] + 1j * params['c'][..., 1]  # [channels, H, M]

  def run(c_channel, inputs):  # inputs [L, B, H] -> outputs [L, B, H]
    def step(state, u_k):
      state = d_a * state + d_b * u_k[..., None]
      return state, 2.0 * jnp.sum(c_channel * state, axis=-1).real
    initial = jnp.zeros(inputs.shape[1:] + (a.shape[-1],), jnp.complex64)
    return jax.lax.scan(step, initial, inputs)[1]

  steps_first = jnp.swapaxes(u, 0, 1)
  y = run(c[0], steps_first)
  if c.shape[0] == 2:
    backward = jnp.flip(run(c[1], jnp.flip(steps_first, 0)), 0)  # sum_{j>=i} K'[j-i] u_j
    y = y + jnp.concatenate([backward[1:], jnp.zeros_like(backward[:1])], 0)
  return jnp.swapaxes(y, 0, 1) + u * params['d']


def layer_output(params, u, bidirectional, num_ssm=0):
  layer = small_layer(bidirectional, num_ssm=num_ssm)
  for name, value in params.items():
    getattr(layer, name)[...] = value
  return layer(u)


@pytest.mark.parametrize('bidirectional,num_ssm', [(False, 0), (True, 0), (True, 1)])
def test_kernel_convolution_equals_the_unrolled_recurrence(bidirectional, num_ssm):
  params = ssm_parameters(small_layer(bidirectional, num_ssm=num_ssm))
  assert params['a_imag'].shape == (num_ssm or 3, 2)
  u = jax.random.normal(jax.random.key(1), (2, 13, 3))
  by_layer = lambda p, u: layer_output(p, u, bidirectional, num_ssm)
  # Each side compiled once (value and gradient together): eager tracing is the slow part.
  value_and_grad = lambda f: jax.jit(jax.value_and_grad(lambda p: jnp.sum(jnp.sin(f(p, u)))))
  np.testing.assert_allclose(jax.jit(by_layer)(params, u), jax.jit(recurrence)(params, u),
                             rtol=1e-4, atol=1e-4)
  by_kernel = value_and_grad(by_layer)(params)[1]
  by_recurrence = value_and_grad(recurrence)(params)[1]
  for name in params:
    np.testing.assert_allclose(by_kernel[name], by_recurrence[name], rtol=2e-3, atol=2e-4,
                               err_msg=name)


def direct_vandermonde_kernel(log_dt, log_a_real, a_imag, c, length):
  """K[l] = 2 Re(sum_m C_m (exp(dt A_m) - 1) / A_m exp(dt A_m l)), every power taken directly
  in float64 (the paper's eq. 5 as written)."""
  log_dt, log_a_real, a_imag, c = (np.asarray(x, np.complex128) for x in
                                   (log_dt, log_a_real, a_imag, c))
  dt_a = (-np.exp(log_a_real) + 1j * a_imag) * np.exp(log_dt)[:, None]
  coefficients = c * (np.exp(dt_a) - 1.0) / (-np.exp(log_a_real) + 1j * a_imag)
  powers = np.exp(dt_a[..., None] * np.arange(length))
  return 2.0 * np.einsum('chm,hml->chl', coefficients, powers).real


def test_blocked_kernel_equals_every_power_taken_directly():
  """Values at lengths with no remainder, a remainder and a single block (1, 2, 7, 64, 601,
  1024); gradients at one length whose last block is partial (601)."""
  layer = small_layer(dim=5, state_dim=16)
  layer.log_dt[...] = jnp.linspace(-7.0, 0.0, 5)  # dt from 1e-3 to 1: slow and fast decay
  c = layer.c[...]
  args = (layer.log_dt[...], layer.log_a_real[...], layer.a_imag[...],
          jax.lax.complex(c[..., 0], c[..., 1]))
  for length in (1, 2, 7, 64, 601, 1024):
    np.testing.assert_allclose(s4d.vandermonde_kernel(*args, length),
                               direct_vandermonde_kernel(*args, length), rtol=1e-5, atol=1e-5,
                               err_msg=f'length {length}')
  # The gradient with respect to every SSM parameter, against the direct form in float32.
  length = 601
  def direct(*params):
    dt_a = (-jnp.exp(params[1]) + 1j * params[2]) * jnp.exp(params[0])[:, None]
    coefficients = params[3] * (jnp.exp(dt_a) - 1.0) / (-jnp.exp(params[1]) + 1j * params[2])
    return 2.0 * jnp.einsum('chm,hml->chl', coefficients,
                            jnp.exp(dt_a[..., None] * jnp.arange(length))).real
  weights = jax.random.normal(jax.random.PRNGKey(1), (2, 5, length))
  loss = lambda f: jax.jit(jax.grad(lambda *p: jnp.sum(weights * f(*p, args[3])), (0, 1, 2)))
  blocked = loss(lambda *p: s4d.vandermonde_kernel(*p, length))(*args[:3])
  expected = loss(direct)(*args[:3])
  for got, want in zip(blocked, expected):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(want))))


def direct_convolution(u, kernel, reverse_kernel):
  """y_i = sum_{j<=i} K[i-j] u_j + sum_{j>i} K'[j-i-1] u_j, term by term."""
  u, kernel, reverse_kernel = map(np.asarray, (u, kernel, reverse_kernel))
  length = u.shape[1]
  y = np.zeros_like(u)
  for i in range(length):
    for j in range(length):
      k = kernel[:, i - j] if j <= i else reverse_kernel[:, j - i - 1]
      y[:, i] += k * u[:, j]
  return y


def test_fft_convolution_equals_the_direct_sum():
  key_u, key_k, key_r = jax.random.split(jax.random.key(2), 3)
  u = jax.random.normal(key_u, (2, 11, 4))
  kernel, reverse = jax.random.normal(key_k, (4, 11)), jax.random.normal(key_r, (4, 11))
  np.testing.assert_allclose(s4d.fft_convolution(u, kernel, reverse),
                             direct_convolution(u, kernel, reverse), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(s4d.fft_convolution(u, kernel),
                             direct_convolution(u, kernel, 0 * reverse), rtol=1e-4, atol=1e-4)


def test_bidirectional_is_the_causal_convolution_plus_the_reversed_one():
  """The backward half is the causal convolution of the reversed sequence with [0, K'], reversed;
  the forward half alone is causal (a change at position j moves no earlier output)."""
  key_u, key_k, key_r = jax.random.split(jax.random.key(3), 3)
  u = jax.random.normal(key_u, (1, 9, 2))
  kernel, reverse = jax.random.normal(key_k, (2, 9)), jax.random.normal(key_r, (2, 9))
  shifted = jnp.concatenate([jnp.zeros((2, 1)), reverse[:, :-1]], axis=1)
  backward = jnp.flip(s4d.fft_convolution(jnp.flip(u, 1), shifted), 1)
  np.testing.assert_allclose(s4d.fft_convolution(u, kernel, reverse),
                             s4d.fft_convolution(u, kernel) + backward, rtol=1e-4, atol=1e-4)
  changed = u.at[:, 5].add(1.0)
  causal = s4d.fft_convolution(changed, kernel) - s4d.fft_convolution(u, kernel)
  both = s4d.fft_convolution(changed, kernel, reverse) - s4d.fft_convolution(u, kernel, reverse)
  np.testing.assert_allclose(causal[:, :5], 0.0, atol=1e-5)
  assert np.all(np.abs(both[:, :5]) > 1e-4)


def test_initialisations_are_the_papers():
  m = np.arange(4)
  np.testing.assert_allclose(s4d.initial_a_imag('lin', 8), np.pi * m, rtol=1e-6)
  np.testing.assert_allclose(s4d.initial_a_imag('inv', 8), 8 / np.pi * (8 / (2 * m + 1) - 1),
                             rtol=1e-6)
  layer = small_layer()
  np.testing.assert_allclose(-np.exp(layer.log_a_real[...]), -0.5, rtol=1e-6)
  assert np.all((np.exp(layer.log_dt[...]) >= 0.01) & (np.exp(layer.log_dt[...]) <= 0.5))


def model_config(**overrides):
  config = config_lib.load_config('configs/listops.py:s4d,quick')
  config.model.update(vocab_size=11, num_classes=3, max_length=24, dim=8, num_layers=2,
                      classifier_dim=8)
  config.model.attention_options.update(registry.get('s4d').test_options)
  model = dict(config.model)
  return ModelConfig.from_config({**model, **overrides})


@pytest.mark.parametrize('prenorm', [True, False])
def test_padding_changes_no_real_output(prenorm):
  """Padded positions are zeroed before every convolution, so real rows and the mean pooling do
  not depend on the padding's length or token ids."""
  options = {**registry.get('s4d').test_options, 'prenorm': prenorm}
  model = models.build_model(model_config(attention_options=options), seed=0)
  real = np.random.RandomState(0).randint(1, 11, (2, 7))
  short = np.concatenate([real, np.zeros((2, 2), int)], 1)
  long = np.concatenate([real, np.zeros((2, 12), int)], 1)
  ids_s, mask_s = encoder.with_cls(jnp.asarray(short), 11, True)
  ids_l, mask_l = encoder.with_cls(jnp.asarray(long), 11, True)
  ids_l = jnp.where(mask_l, ids_l, 5)  # garbage under the mask
  encode = nnx.jit(lambda m, ids, mask: m.encoder(ids, mask)[0])  # jitted: eager is slower
  classify = nnx.jit(lambda m, inputs: m({'inputs': inputs}))
  np.testing.assert_allclose(encode(model, ids_s, mask_s)[:, :8],
                             encode(model, ids_l, mask_l)[:, :8], atol=1e-5)
  np.testing.assert_allclose(classify(model, short), classify(model, long), atol=1e-5)
  assert model.encoder.embedding.positions is None
  assert (model.encoder.final_norm is None) == (not prenorm)


def test_jit_equals_eager_and_bfloat16_runs():
  inputs = np.random.RandomState(1).randint(1, 11, (2, 20))
  model = models.build_model(model_config(), seed=0)
  eager = model({'inputs': inputs})
  jitted = nnx.jit(lambda m, x: m({'inputs': x}))(model, inputs)
  np.testing.assert_allclose(eager, jitted, rtol=1e-5, atol=1e-5)
  half = models.build_model(model_config(dtype='bfloat16'), seed=0)
  loss = lambda m: jnp.mean(m({'inputs': inputs}, deterministic=False,
                              rngs=nnx.Rngs(dropout=0)) ** 2)
  value, grads = nnx.jit(nnx.value_and_grad(loss))(half)  # eagerly: seconds of dispatch
  assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  np.testing.assert_allclose(nnx.jit(lambda m, x: m({'inputs': x}))(half, inputs), eager, atol=0.1)


def test_ssm_parameters_get_their_own_rate_and_no_weight_decay():
  config = config_lib.load_config('configs/listops.py:s4d,quick')
  config.update(schedule='rsqrt', warmup_steps=1, learning_rate=1e-2, weight_decay=0.5)
  assert config.ssm_learning_rate == 1e-3
  model = models.build_model(model_config(), seed=0)
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  groups = steps.parameter_groups(params)
  ssm = {'log_dt', 'log_a_real', 'a_imag'}
  for path, group in jax.tree_util.tree_leaves_with_path(groups):
    assert group == ('ssm' if path[-1].key in ssm else 'default'), path
  tx = steps.make_optimizer(config)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  block = lambda tree: tree['encoder']['blocks'][0]
  # Adam's first step is -lr * g / |g|; AdamW adds -lr * wd * param.
  for name in ssm:
    np.testing.assert_allclose(block(updates)['s4d'][name], -1e-3, rtol=1e-4)
  c = block(params)['s4d']['c']
  np.testing.assert_allclose(block(updates)['s4d']['c'], -1e-2 * (1 + 0.5 * c), rtol=1e-4)
  # Without an SSM rate, A and dt train like every other parameter.
  config.ssm_learning_rate = 0.0
  tx = steps.make_optimizer(config)
  plain, _ = tx.update(grads, tx.init(params), params)
  log_dt = block(params)['s4d']['log_dt']
  np.testing.assert_allclose(block(plain)['s4d']['log_dt'], -1e-2 * (1 + 0.5 * log_dt),
                             rtol=1e-4)


@pytest.mark.parametrize('task', ['listops', 'text', 'retrieval', 'image', 'pathfinder', 'pathx'])
def test_paper_word_is_the_s4d_authors_protocol(task):
  config = config_lib.load_config(f'configs/{task}.py:s4d,paper')
  config_lib.validate(config)
  row = protocols.S4D_TASKS[task]
  assert config.protocol == 'paper'
  assert (config.model.dim, config.model.num_layers, config.batch_size,
          config.num_train_steps, config.learning_rate, config.weight_decay) == (
              row.dim, row.num_layers, row.batch_size, row.num_train_steps, row.learning_rate,
              row.weight_decay)
  assert config.model.attention_options.state_dim == row.state_dim
  assert config.model.attention_options.prenorm == row.prenorm
  assert config.model.attention_options.num_ssm == (0 if task.startswith('path') else 1)
  assert config.ssm_learning_rate == 1e-3 and config.schedule == 'cosine'
  assert config.adam_b2 == 0.999 and config.model.positions == 'none'
