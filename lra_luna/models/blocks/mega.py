"""Mega: the moving average equipped gated attention of Ma, Zhou, Kong, He, Gui, Neubig, May and
Zettlemoyer (2023), "Mega: Moving Average Equipped Gated Attention" (ICLR 2023), as an encoder
block; Mega-chunk is the same block attending only inside fixed-size chunks (linear in n).

Multi-dimensional damped EMA (the paper's §3.1), per feature j with h expansion dimensions k:
  s_t = alpha_jk beta_jk x_tj + (1 - alpha_jk delta_jk) s_{t-1},   y_tj = sum_k eta_jk s_t / sqrt(h)
with alpha, delta in (0, 1) (sigmoids of their parameters). Unrolled it is a convolution with
  K_j[t] = sum_k eta_jk beta_jk alpha_jk (1 - alpha_jk delta_jk)^t / sqrt(h),   t = 0 .. L-1,
computed as one Vandermonde product and applied by FFT. Bidirectional (classification, as the
authors' LRA models): a second kernel K' (its own parameters) reads the sequence backwards,
y_i = sum_{j<=i} K[i-j] x_j + sum_{j>=i} K'[j-i] x_j. The EMA's output is
X' = SiLU(EMA(X) + omega * X) (the authors' code adds this residual inside the EMA).

Single-head gated attention (the paper's §3.2), X the block's (normalised) input:
  Z = SiLU(X' W_z + b_z)                       shared representation [n, z]
  Q = kappa_q * Z + mu_q,   K = kappa_k * Z + mu_k   (per-dimension scale and offset)
  V = SiLU(X W_v + b_v)                        [n, v]
  O = f(Q K^T + b_rel) V,  f = softmax (scores / sqrt(z)) or laplace (scores / n_real)
  gamma = SiLU(X' W_gamma + b_gamma)           reset gate [n, v]
  phi = sigmoid(X' W_phi + b_phi)              update gate [n, D]
  H = SiLU(X' W_h + (gamma * O) U_h + b_h)
  Y = phi * H + (1 - phi) * X                  (X before the norm: the residual)
laplace(s) = (1 + erf((s - mu) / (sigma sqrt 2))) / 2 with mu = sqrt(1/2), sigma = sqrt(1/(4 pi)).
b_rel: 'simple' (a learned scalar per offset j - i) or 'rotary' (RoPE-rotated learned vectors a, b:
b_ij = rot_i(a) . rot_j(b)). A normalised feed-forward block (X + FFN(X), SiLU) follows, each
sub-block with its own norm, before (prenorm) or after.

Mega-chunk: with chunk_size c the sequence is cut into chunks of c (padded to a multiple of c)
and queries attend only to keys of their own chunk; the EMA still runs over the whole sequence.
With c >= n it is full Mega (one chunk).

Padding: padded positions are zeroed before the EMA, masked out of the softmax, and neither
weighted nor counted in n_real under laplace, so the real positions' outputs do not depend on
how far a sequence is padded (the authors' code masks the same way).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.attention.rotary import rotate_queries_and_keys
from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear
from lra_luna.models.blocks.s4d import causal_convolution, fft_convolution

ATTENTION_FUNCTIONS = ('softmax', 'laplace')
NORMS = ('layernorm', 'scalenorm')
POSITION_BIASES = ('simple', 'rotary')
LAPLACE_MU = math.sqrt(0.5)
LAPLACE_SIGMA = math.sqrt(0.25 / math.pi)
SCALE_NORM_EPS = 1e-5  # the authors' SequenceNorm
INIT_STD = 0.02        # every projection, kappa and the position bias (the authors' init)


def ema_kernel(alpha, delta, beta, eta, length: int):
  """K [C, D, L] (float32): K[t] = sum_k eta_k beta_k a_k (1 - a_k d_k)^t / sqrt(h), with
  a = sigmoid(alpha), d = sigmoid(delta); every argument [C, D, h] (C: 1, or 2 directions)."""
  a, d = jax.nn.sigmoid(alpha), jax.nn.sigmoid(delta)
  decay = jnp.exp(jnp.log1p(-a * d)[..., None] * jnp.arange(length))  # [C, D, h, L]
  coefficients = eta * beta * a / math.sqrt(alpha.shape[-1])
  return jnp.einsum('cdh,cdhl->cdl', coefficients, decay)


def ema_convolution(u, kernel, causal: bool = False):
  """y [B, L, D] (float32) = K * u: causal with K [1, D, L]; with K [2, D, L] also K' backwards,
  y_i = sum_{j<=i} K[i-j] u_j + sum_{j>=i} K'[j-i] u_j (both kernels read the lag 0). `causal`
  (a causal encoder): K [1, D, L] in the exactly causal direct form (s4d.causal_convolution)."""
  u = u.astype(jnp.float32)
  if causal:
    return causal_convolution(u, kernel[0])
  if kernel.shape[0] == 1:
    return fft_convolution(u, kernel[0])
  forward = kernel[0].at[:, 0].add(kernel[1][:, 0])
  backward = jnp.pad(kernel[1][:, 1:], ((0, 0), (0, 1)))  # lag m + 1 at index m
  return fft_convolution(u, forward, backward)


class MultiDimensionalEMA(nnx.Module):
  """The damped EMA of every feature: x [B, n, D] -> X' = SiLU(EMA(x) + omega x) (float32 inside).

  Initialisation (the authors'): alpha, delta ~ N(0, 0.2) (pre-sigmoid), beta ~ 1, -1, 1, ...
  + N(0, 0.02), eta and omega ~ N(0, 1). `truncation` > 0 cuts the kernel to that many lags.
  """

  def __init__(self, dim: int, *, ema_dim: int, bidirectional: bool, truncation: int,
               rngs: nnx.Rngs, causal: bool = False):
    self.causal = causal
    shape = (2 if bidirectional else 1, dim, ema_dim)
    keys = jax.random.split(rngs.params(), 5)
    signs = jnp.where(jnp.arange(ema_dim) % 2 == 0, 1.0, -1.0)
    self.alpha = nnx.Param(0.2 * jax.random.normal(keys[0], shape))
    self.delta = nnx.Param(0.2 * jax.random.normal(keys[1], shape))
    self.beta = nnx.Param(signs + INIT_STD * jax.random.normal(keys[2], shape))
    self.eta = nnx.Param(jax.random.normal(keys[3], shape))
    self.omega = nnx.Param(jax.random.normal(keys[4], (dim,)))
    self.truncation = truncation

  def kernel(self, length: int):
    """K [C, D, length], zero beyond the truncation."""
    size = min(self.truncation, length) if self.truncation else length
    kernel = ema_kernel(self.alpha[...], self.delta[...], self.beta[...], self.eta[...], size)
    return jnp.pad(kernel, ((0, 0), (0, 0), (0, length - size)))

  def __call__(self, x, mask):
    """x [B, n, D], mask [B, n] -> X' [B, n, D] in x's dtype; padded inputs read as zero."""
    u = (x * mask[..., None].astype(x.dtype)).astype(jnp.float32)
    y = ema_convolution(u, self.kernel(x.shape[1]), self.causal)
    return jax.nn.silu(y + x.astype(jnp.float32) * self.omega[...]).astype(x.dtype)


class SimplePositionBias(nnx.Module):
  """b_ij = w[j - i], one learned scalar per offset up to max_positions - 1 (N(0, 0.02))."""

  def __init__(self, max_positions: int, rngs: nnx.Rngs):
    self.max_positions = max_positions
    self.table = nnx.Param(INIT_STD * jax.random.normal(rngs.params(), (2 * max_positions - 1,)))

  def __call__(self, length: int):
    """[length, length] float32."""
    offsets = jnp.arange(length)[None, :] - jnp.arange(length)[:, None]
    return self.table[...][self.max_positions - 1 + offsets]


def rotate(x, length: int):
  """RoPE of x [z] at positions 0 .. length-1 -> [length, z] (halves rotated by sinusoids)."""
  half = x.shape[-1] // 2
  rates = np.exp(-math.log(10000.0) * np.arange(half) / half)
  angles = np.arange(length)[:, None] * rates[None, :]
  sin, cos = jnp.asarray(np.sin(angles), jnp.float32), jnp.asarray(np.cos(angles), jnp.float32)
  x1, x2 = x[:half], x[half:]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class RotaryPositionBias(nnx.Module):
  """b_ij = rot_i(a) . rot_j(b) with learned a, b [z] (N(0, 0.02)): depends on j - i only."""

  def __init__(self, z_dim: int, rngs: nnx.Rngs):
    a_key, b_key = jax.random.split(rngs.params())
    self.a = nnx.Param(INIT_STD * jax.random.normal(a_key, (z_dim,)))
    self.b = nnx.Param(INIT_STD * jax.random.normal(b_key, (z_dim,)))

  def __call__(self, length: int):
    return rotate(self.a[...], length) @ rotate(self.b[...], length).T


class ScaleNorm(nnx.Module):
  """x * g / sqrt(mean(x^2) + eps), one learned scalar g (init 1) (the authors' scalenorm)."""

  def __init__(self, dtype):
    self.scale = nnx.Param(jnp.ones((), jnp.float32))
    self.dtype = dtype

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    mean_square = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * self.scale[...] * jax.lax.rsqrt(mean_square + SCALE_NORM_EPS)).astype(self.dtype)


def make_norm(norm: str, dim: int, dtype):
  return layers.LayerNorm(dim, dtype=dtype) if norm == 'layernorm' else ScaleNorm(dtype)


def laplace(scores):
  """The paper's laplace attention function: (1 + erf((s - mu) / (sigma sqrt 2))) / 2."""
  return 0.5 * (1.0 + jax.lax.erf((scores - LAPLACE_MU) / (LAPLACE_SIGMA * math.sqrt(2.0))))


def attention_weights(q, k, key_mask, bias, function: str, causal: bool = False):
  """Weights [B, K, c, c] (float32) of q, k [B, K, c, z] in K chunks; key_mask [B, K, c].

  softmax: softmax(q k^T / sqrt(z) + b) over real keys; laplace: laplace(q k^T / n_real + b) on
  real keys, 0 on padded ones (n_real: the chunk's real keys, at least 1). `causal`: a query
  reads the keys at or before it in its chunk only."""
  scores = jnp.einsum('bkqz,bkvz->bkqv', q, k, preferred_element_type=jnp.float32)
  keys = key_mask[:, :, None, :]
  if causal:
    c = q.shape[2]
    keys = keys & (jnp.arange(c)[None, :] <= jnp.arange(c)[:, None])
  if function == 'softmax':
    scores = scores / math.sqrt(q.shape[-1]) + bias
    # A chunk of padding only (its queries are discarded) gets uniform weights, not NaN.
    return jax.nn.softmax(jnp.where(keys, scores, -1e30), axis=-1)
  real = jnp.maximum(jnp.sum(keys, axis=-1, keepdims=True), 1).astype(jnp.float32)
  return laplace(scores / real + bias) * keys


def to_chunks(x, chunk: int):
  """[B, n, ...] -> [B, ceil(n / chunk), chunk, ...], zero-padded at the end."""
  padding = -x.shape[1] % chunk
  x = jnp.pad(x, ((0, 0), (0, padding)) + ((0, 0),) * (x.ndim - 2))
  return x.reshape(x.shape[0], -1, chunk, *x.shape[2:])


def projection(in_dim: int, out_dim: int, dtype, rngs: nnx.Rngs) -> Linear:
  """A Linear with N(0, 0.02) weights and zero bias (the authors' init of every projection)."""
  return Linear(in_dim, out_dim, kernel_init=jax.nn.initializers.normal(INIT_STD), dtype=dtype,
                rngs=rngs)


class MovingAverageGatedAttention(nnx.Module):
  """The paper's §3.2 sub-block (module docstring): EMA, single-head gated attention inside
  chunks of `chunk_size` (0: the whole sequence), the gated residual, and its norm."""

  def __init__(self, dim: int, *, z_dim: int, hidden_dim: int, ema_dim: int,
               attention_function: str, chunk_size: int, truncation: int, position_bias: str,
               max_positions: int, norm: str, prenorm: bool, bidirectional: bool,
               dropout: float, attention_dropout: float, hidden_dropout: float, dtype,
               rngs: nnx.Rngs, rotary: bool = False, causal: bool = False):
    self.dim, self.z_dim, self.hidden_dim = dim, z_dim, hidden_dim
    self.rotary = rotary  # config.model.positions 'rotary': Q and K rotated (RoFormer eq. 34)
    self.causal = causal
    self.attention_function, self.chunk_size, self.prenorm = attention_function, chunk_size, prenorm
    self.norm = make_norm(norm, dim, dtype)
    self.ema = MultiDimensionalEMA(dim, ema_dim=ema_dim, bidirectional=bidirectional,
                                   truncation=truncation, rngs=rngs, causal=causal)
    self.value = projection(dim, hidden_dim, dtype, rngs)
    # X' -> [phi (D), Z (z), gamma (v), X' W_h (D)]
    self.ema_projection = projection(dim, 2 * dim + z_dim + hidden_dim, dtype, rngs)
    self.output = projection(hidden_dim, dim, dtype, rngs)  # U_h
    self.qk_scale = nnx.Param(INIT_STD * jax.random.normal(rngs.params(), (2, z_dim)))
    self.qk_offset = nnx.Param(jnp.zeros((2, z_dim)))
    bias_positions = chunk_size or max_positions
    self.position_bias = (SimplePositionBias(bias_positions, rngs) if position_bias == 'simple'
                          else RotaryPositionBias(z_dim, rngs))
    self.dropout = Dropout(dropout)
    self.attention_dropout = Dropout(attention_dropout)
    self.hidden_dropout = Dropout(hidden_dropout)

  def attend(self, q, k, v, mask, *, deterministic, rngs):
    """O [B, n, v]: f(Q K^T + b_rel) V inside each chunk."""
    n = q.shape[1]
    chunk = n if not self.chunk_size or n <= self.chunk_size else self.chunk_size
    weights = attention_weights(to_chunks(q, chunk), to_chunks(k, chunk),
                                to_chunks(mask, chunk), self.position_bias(chunk),
                                self.attention_function, self.causal)
    weights = self.attention_dropout(weights, deterministic=deterministic, rngs=rngs)
    out = jnp.einsum('bkqv,bkvf->bkqf', weights.astype(v.dtype), to_chunks(v, chunk),
                     preferred_element_type=jnp.float32)
    return out.reshape(q.shape[0], -1, self.hidden_dim)[:, :n].astype(v.dtype)

  def __call__(self, x, mask, *, deterministic=True, rngs=None):
    """x [B, n, D] -> Y [B, n, D]."""
    drop = lambda y, layer=self.dropout: layer(y, deterministic=deterministic, rngs=rngs)
    residual = x
    if self.prenorm:
      x = self.norm(x)
    v = jax.nn.silu(self.value(x))
    x_ema = drop(self.ema(x, mask))
    update, shared, x_h = jnp.split(self.ema_projection(x_ema),
                                    [self.dim, self.dim + self.z_dim + self.hidden_dim], axis=-1)
    update = jax.nn.sigmoid(update)
    z, reset = jnp.split(jax.nn.silu(shared), [self.z_dim], axis=-1)
    q = z * self.qk_scale[0] + self.qk_offset[0]
    k = z * self.qk_scale[1] + self.qk_offset[1]
    if self.rotary:  # at their sequence positions, before the chunks: relative inside each
      q, k = rotate_queries_and_keys(q, k)
    o = self.attend(q.astype(x.dtype), k.astype(x.dtype), drop(v, self.hidden_dropout), mask,
                    deterministic=deterministic, rngs=rngs)
    h = drop(jax.nn.silu(x_h + self.output(o * reset)))
    y = (residual + update * (h - residual)).astype(residual.dtype)
    return y if self.prenorm else self.norm(y)


class NormalizedFeedForward(nnx.Module):
  """The authors' normalised FFN: x + Drop(W2 Drop_h(SiLU(W1 N(x)))) (prenorm), or N of that
  sum with N after (postnorm)."""

  def __init__(self, dim: int, hidden: int, *, norm: str, prenorm: bool, dropout: float,
               hidden_dropout: float, dtype, rngs: nnx.Rngs):
    self.prenorm = prenorm
    self.norm = make_norm(norm, dim, dtype)
    self.fc1 = projection(dim, hidden, dtype, rngs)
    self.fc2 = projection(hidden, dim, dtype, rngs)
    self.dropout = Dropout(dropout)
    self.hidden_dropout = Dropout(hidden_dropout)

  def __call__(self, x, *, deterministic=True, rngs=None):
    y = self.norm(x) if self.prenorm else x
    y = self.hidden_dropout(jax.nn.silu(self.fc1(y)), deterministic=deterministic, rngs=rngs)
    x = x + self.dropout(self.fc2(y), deterministic=deterministic, rngs=rngs)
    return x if self.prenorm else self.norm(x)


class MegaBlock(nnx.Module):
  """One Mega layer (the authors' MegaSentenceEncoderLayer): moving average gated attention, then
  the normalised FFN (hidden width config.model.ffn_dim).

  The block protocol of classifier.BlockEncoder: Block(cfg, rngs), block(x, mask, *,
  deterministic, rngs, query_rows) and Block.final_norm(cfg). Options (config.model.
  attention_options, DEFAULTS): z_dim z, hidden_dim v (0: 2 D, the authors' ratio), ema_dim h,
  attention_function, chunk_size (0: full Mega), truncation (0: none), position_bias, norm,
  prenorm, bidirectional, hidden_dropout (the authors' act-dropout). config.model.dropout and
  attention_dropout are the authors' dropout and attention-dropout; num_heads is unused (one head).
  """

  DEFAULTS = {'z_dim': 64, 'hidden_dim': 0, 'ema_dim': 16, 'attention_function': 'softmax',
              'chunk_size': 0, 'truncation': 0, 'position_bias': 'simple', 'norm': 'layernorm',
              'prenorm': False, 'bidirectional': True, 'hidden_dropout': 0.0}
  CONFIG_OPTIONS = tuple(DEFAULTS)

  def __init__(self, cfg, rngs: nnx.Rngs):
    options = {**self.DEFAULTS, **dict(cfg.attention_options)}
    self.check_options(max_length=cfg.max_length + 1, **options)
    dtype = getattr(jnp, cfg.dtype)
    hidden_dropout = options.pop('hidden_dropout')
    options['hidden_dim'] = options['hidden_dim'] or 2 * cfg.dim
    rotary = cfg.positions == 'rotary'
    if rotary and options['z_dim'] % 2:
      raise ValueError(f"MegaBlock option z_dim = {options['z_dim']} is not valid with "
                       "config.model.positions 'rotary': an even integer (RoPE rotates pairs).")
    # A causal encoder (ModelConfig.causal): the EMA reads the past only, attention too.
    options['bidirectional'] = options['bidirectional'] and not cfg.causal
    self.attention = MovingAverageGatedAttention(
        cfg.dim, **options, rotary=rotary, causal=cfg.causal, max_positions=cfg.max_length + 1,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout, hidden_dropout=hidden_dropout, dtype=dtype,
        rngs=rngs)
    self.ffn = NormalizedFeedForward(cfg.dim, cfg.ffn_dim, norm=options['norm'],
                                     prenorm=options['prenorm'], dropout=cfg.dropout,
                                     hidden_dropout=hidden_dropout, dtype=dtype, rngs=rngs)

  @classmethod
  def final_norm(cls, cfg) -> bool:
    """Whether the encoder ends with a LayerNorm: for prenorm stacks only (the authors')."""
    return {**cls.DEFAULTS, **dict(cfg.attention_options)}['prenorm']

  @staticmethod
  def check_options(*, max_length: int = 0, z_dim: int = 64, hidden_dim: int = 0,
                    ema_dim: int = 16, attention_function: str = 'softmax', chunk_size: int = 0,
                    truncation: int = 0, position_bias: str = 'simple', norm: str = 'layernorm',
                    prenorm: bool = False, bidirectional: bool = True,
                    hidden_dropout: float = 0.0) -> None:
    """ValueError naming the first option outside its valid range."""
    del max_length, prenorm, bidirectional
    for name, value, least in (('z_dim', z_dim, 1), ('hidden_dim', hidden_dim, 0),
                               ('ema_dim', ema_dim, 1), ('chunk_size', chunk_size, 0),
                               ('truncation', truncation, 0)):
      if not (isinstance(value, int) and value >= least):
        raise ValueError(f'MegaBlock option {name} = {value!r} is not valid: an integer >= '
                         f'{least}{" (0: the default)" if least == 0 else ""}.')
    for name, value, choices in (('attention_function', attention_function, ATTENTION_FUNCTIONS),
                                 ('position_bias', position_bias, POSITION_BIASES),
                                 ('norm', norm, NORMS)):
      if value not in choices:
        raise ValueError(f'MegaBlock option {name} = {value!r} is not valid; valid choices: '
                         f'{list(choices)}.')
    if position_bias == 'rotary' and z_dim % 2:
      raise ValueError(f'MegaBlock option z_dim = {z_dim} is not valid with position_bias '
                       "'rotary': an even integer (RoPE rotates pairs).")
    if not 0.0 <= hidden_dropout <= 1.0:
      raise ValueError(f'MegaBlock option hidden_dropout = {hidden_dropout} is not valid: a '
                       'rate in [0, 1].')

  def __call__(self, x, mask, *, deterministic=True, rngs=None, query_rows=None):
    """x [B, n, D] -> [B, n, D] (its first `query_rows` rows with `query_rows`)."""
    x = self.attention(x, mask, deterministic=deterministic, rngs=rngs)
    return self.ffn(x, deterministic=deterministic, rngs=rngs)[:, :query_rows]
