"""Mega and Mega-chunk (lra_luna/models/mega.py) against their formulas: the EMA kernel against
the damped EMA recurrence run step by step (values and gradients), the FFT convolution against a
direct sum, the gated attention against the paper's equations written out, chunked attention
against a block-diagonal mask, a chunk covering the sequence against full Mega, padding, jit,
bfloat16, option checks and the authors' protocol."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import config_lib
from lra_luna import protocols
from lra_luna.models import classifier as models
from lra_luna.models.heads import classification
from lra_luna.models import encoder
from lra_luna.models.blocks import mega
from lra_luna.models.model_config import ModelConfig
from lra_luna.training import steps

NAMES = ('mega', 'mega_chunk')


def ema_parameters(bidirectional=True, dim=3, ema_dim=4, seed=0):
  layer = mega.MultiDimensionalEMA(dim, ema_dim=ema_dim, bidirectional=bidirectional,
                                   truncation=0, rngs=nnx.Rngs(seed))
  return {name: getattr(layer, name)[...] for name in ('alpha', 'delta', 'beta', 'eta')}


def recurrence(params, u):
  """y [B, L, D] by the paper's damped EMA run step by step: s_t = a beta u_t + (1 - a d) s_{t-1},
  y_t = eta . s_t / sqrt(h); bidirectional: the second direction run backwards (lag 0 too)."""
  a, d = jax.nn.sigmoid(params['alpha']), jax.nn.sigmoid(params['delta'])
  scale = 1.0 / math.sqrt(a.shape[-1])

  def run(c, inputs):  # inputs [L, B, D] -> [L, B, D]
    def step(state, u_t):
      state = a[c] * params['beta'][c] * u_t[..., None] + (1.0 - a[c] * d[c]) * state
      return state, jnp.sum(params['eta'][c] * state, axis=-1) * scale
    return jax.lax.scan(step, jnp.zeros(inputs.shape[1:] + a.shape[-1:]), inputs)[1]

  steps_first = jnp.swapaxes(u, 0, 1)
  y = run(0, steps_first)
  if a.shape[0] == 2:
    y = y + jnp.flip(run(1, jnp.flip(steps_first, 0)), 0)
  return jnp.swapaxes(y, 0, 1)


def by_kernel(params, u):
  return mega.ema_convolution(u, mega.ema_kernel(**params, length=u.shape[1]))


@pytest.mark.parametrize('bidirectional', [False, True])
def test_ema_kernel_equals_the_recurrence_step_by_step(bidirectional):
  params = ema_parameters(bidirectional)
  u = jax.random.normal(jax.random.key(1), (2, 17, 3))
  np.testing.assert_allclose(jax.jit(by_kernel)(params, u), jax.jit(recurrence)(params, u),
                             rtol=1e-4, atol=1e-5)
  loss = lambda f: lambda p: jnp.sum(jnp.sin(f(p, u)))
  kernel_grads = jax.jit(jax.grad(loss(by_kernel)))(params)
  recurrence_grads = jax.jit(jax.grad(loss(recurrence)))(params)
  for name in params:
    np.testing.assert_allclose(kernel_grads[name], recurrence_grads[name], rtol=1e-3, atol=1e-5,
                               err_msg=name)


@pytest.mark.parametrize('channels', [1, 2])
def test_fft_convolution_equals_a_direct_sum(channels):
  kernel = np.asarray(jax.random.normal(jax.random.key(2), (channels, 3, 11)))
  u = np.asarray(jax.random.normal(jax.random.key(3), (2, 11, 3)))
  direct = np.zeros_like(u)
  for i in range(11):
    for j in range(i + 1):
      direct[:, i] += kernel[0, :, i - j] * u[:, j]
    if channels == 2:
      for j in range(i, 11):
        direct[:, i] += kernel[1, :, j - i] * u[:, j]
  np.testing.assert_allclose(mega.ema_convolution(jnp.asarray(u), jnp.asarray(kernel)), direct,
                             rtol=1e-5, atol=1e-5)


def test_truncation_cuts_the_kernel_and_keeps_its_head():
  layer = mega.MultiDimensionalEMA(3, ema_dim=2, bidirectional=True, truncation=5,
                                   rngs=nnx.Rngs(0))
  full = mega.ema_kernel(layer.alpha[...], layer.delta[...], layer.beta[...], layer.eta[...], 12)
  cut = layer.kernel(12)
  np.testing.assert_allclose(cut[..., :5], full[..., :5], rtol=1e-6)
  assert not np.asarray(cut[..., 5:]).any()


def block_config(name='mega', max_length=20, dtype='float32', num_layers=2, **options):
  c = config_lib.set_model(config_lib.base_config(), name)
  c.model.update(dim=16, num_heads=2, num_layers=num_layers, ffn_dim=24, classifier_dim=24,
                 dropout=0.0, attention_dropout=0.0, vocab_size=11, num_classes=3, max_length=max_length,
                 dtype=dtype)
  c.model.attention_options.update({'z_dim': 8, 'ema_dim': 2, **options})
  return ModelConfig.from_config(c.model)


def inputs(n=21, lengths=(21, 13), seed=0):
  x = jax.random.normal(jax.random.key(seed), (len(lengths), n, 16))
  return x, jnp.arange(n)[None, :] < jnp.array(lengths)[:, None]


def laplace(s):
  return 0.5 * (1 + np.vectorize(math.erf)((s - math.sqrt(0.5)) / math.sqrt(0.5 / math.pi)))


def silu(x):
  return x / (1 + np.exp(-x))


def gated_attention_by_the_equations(layer, x, mask, chunk):
  """The paper's gated attention (module docstring) written out sequence by sequence in numpy:
  block-diagonal chunks of `chunk`, bias b_ij = w[j - i], postnorm skipped (prenorm layers only)."""
  dense = lambda lin, t: t @ np.asarray(lin.kernel[...]) + np.asarray(lin.bias[...])
  xn, x_ema = map(np.asarray, nnx.jit(lambda l, x, m: (l.norm(x), l.ema(l.norm(x), m)))(
      layer, x, mask))
  d, z_dim = x.shape[-1], layer.z_dim
  table, positions = np.asarray(layer.position_bias.table[...]), layer.position_bias.max_positions
  out = np.zeros_like(np.asarray(x))
  for b in range(x.shape[0]):
    base = dense(layer.ema_projection, x_ema[b])
    phi = 1 / (1 + np.exp(-base[:, :d]))
    z, gamma = silu(base[:, d:d + z_dim]), silu(base[:, d + z_dim:-d])
    q = z * np.asarray(layer.qk_scale[0]) + np.asarray(layer.qk_offset[0])
    k = z * np.asarray(layer.qk_scale[1]) + np.asarray(layer.qk_offset[1])
    v = silu(dense(layer.value, xn[b]))
    n = x.shape[1]
    same_chunk = (np.arange(n)[:, None] // chunk) == (np.arange(n)[None, :] // chunk)
    allowed = same_chunk & np.asarray(mask[b])[None, :]
    offsets = np.arange(n)[None, :] - np.arange(n)[:, None]  # beyond a chunk: masked anyway
    bias = table[positions - 1 + np.clip(offsets, 1 - positions, positions - 1)]
    if layer.attention_function == 'softmax':
      s = np.where(allowed, q @ k.T / math.sqrt(z_dim) + bias, -1e30)
      weights = np.exp(s - s.max(-1, keepdims=True))
      weights /= weights.sum(-1, keepdims=True)
    else:
      real = np.maximum(allowed.sum(-1, keepdims=True), 1)
      weights = laplace(q @ k.T / real + bias) * allowed
    h = silu(dense(layer.output, gamma * (weights @ v)) + base[:, -d:])
    out[b] = phi * h + (1 - phi) * np.asarray(x[b])
  return out


@pytest.mark.parametrize('function', mega.ATTENTION_FUNCTIONS)
@pytest.mark.parametrize('chunk_size', [0, 8])
def test_gated_attention_equals_the_papers_equations(function, chunk_size):
  cfg = block_config(attention_function=function, chunk_size=chunk_size, prenorm=True)
  layer = mega.MegaBlock(cfg, nnx.Rngs(0)).attention
  x, mask = inputs()
  expected = gated_attention_by_the_equations(layer, x, mask, chunk_size or 21)
  real = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(nnx.jit(lambda l, x, m: l(x, m))(layer, x, mask))[real],
                             expected[real], rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize('function', mega.ATTENTION_FUNCTIONS)
def test_a_chunk_covering_the_sequence_is_full_mega(function):
  x, mask = inputs()
  full = mega.MegaBlock(block_config(attention_function=function), nnx.Rngs(0))
  # chunk_size = max_length + 1 ([CLS]): the same parameters (the bias table has 2 c - 1 rows).
  chunked = mega.MegaBlock(block_config('mega_chunk', attention_function=function,
                                        chunk_size=21), nnx.Rngs(0))
  call = nnx.jit(lambda block, x, mask: block(x, mask))
  np.testing.assert_array_equal(call(chunked, x, mask), call(full, x, mask))


@pytest.mark.parametrize('name, function', [('mega', 'softmax'), ('mega_chunk', 'laplace')])
def test_padding_changes_no_real_output(name, function):
  model = models.build_model(block_config(name, max_length=30, attention_function=function,
                                          **({'chunk_size': 8} if name == 'mega_chunk' else {})),
                             seed=0)
  real = np.random.RandomState(3).randint(1, 11, (2, 9))
  a = np.concatenate([real, np.zeros((2, 7), int)], 1)
  b = np.concatenate([real, np.full((2, 21), 7)], 1)  # garbage ids under the mask too
  ids_a, mask_a = encoder.with_cls(jnp.asarray(a), 11, True)
  ids_b, mask_b = encoder.with_cls(jnp.asarray(b), 11, True)
  mask_b = mask_b.at[:, 10:].set(False)
  encode = nnx.jit(lambda m, ids, mask: m.encoder(ids, mask)[0])
  xa, xb = encode(model, ids_a, mask_a), encode(model, ids_b, mask_b)
  np.testing.assert_allclose(xa[:, :10], xb[:, :10], atol=1e-5)
  np.testing.assert_allclose(classification.pool('mean', xa, mask_a, None),
                             classification.pool('mean', xb, mask_b, None), atol=1e-5)


@pytest.mark.parametrize('name', NAMES)
def test_jit_equals_eager_and_bfloat16_runs(name):
  batch = {'inputs': np.random.RandomState(0).randint(0, 11, (2, 20))}
  options = dict(num_layers=1, chunk_size=8 if name == 'mega_chunk' else 0)
  model = models.build_model(block_config(name, **options), 0)
  eager = model(batch)
  call = nnx.jit(lambda m, b: m(b))
  np.testing.assert_allclose(call(model, batch), eager, rtol=1e-5, atol=1e-5)
  logits = call(models.build_model(block_config(name, dtype='bfloat16', **options), 0), batch)
  assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()
  np.testing.assert_allclose(logits, eager, atol=0.1)


@pytest.mark.parametrize('task', ['listops', 'text', 'retrieval', 'image', 'pathfinder', 'pathx'])
def test_the_authors_protocol_sets_their_settings(task):
  config = config_lib.load_config(f'configs/{task}.py:mega_chunk,paper')
  config_lib.validate(config)
  row = protocols.MEGA_TASKS[task]
  assert (config.model.dim, config.model.num_layers, config.learning_rate,
          config.batch_size) == (row.dim, row.num_layers, row.learning_rate, row.batch_size)
  assert config.model.attention_options.z_dim == row.z_dim
  assert config.model.attention_options.chunk_size == (4096 if task == 'pathx' else 128)
  assert config.schedule == 'linear' and config.grad_clip_norm == 1.0


def test_linear_schedule_warms_up_then_decays_to_zero():
  config = config_lib.load_config('configs/listops.py:mega,paper')
  with config.unlocked():
    config.update(num_train_steps=100, warmup_steps=20, learning_rate=1e-2)
  schedule = steps.make_schedule(config)
  np.testing.assert_allclose([schedule(s) for s in (0, 10, 20, 60, 100)],
                             [0.0, 5e-3, 1e-2, 5e-3, 0.0], atol=1e-9)


def test_rotary_bias_depends_on_the_offset_only():
  bias = np.asarray(mega.RotaryPositionBias(6, nnx.Rngs(0))(9))
  a = np.asarray(mega.rotate(jnp.ones(6), 9))
  np.testing.assert_allclose(a[0], np.ones(6))  # position 0: no rotation
  for offset in range(-8, 9):
    diagonal = np.diagonal(bias, offset)
    np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-4, atol=1e-7)
  model = models.build_model(block_config(position_bias='rotary', num_layers=1), 0)
  logits = nnx.jit(lambda m, b: m(b))(model, {'inputs': np.ones((1, 20), int)})
  assert np.isfinite(np.asarray(logits)).all()
