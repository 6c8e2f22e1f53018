"""S4D: the diagonal state space model of Gu, Gupta, Goel and Ré (2022), "On the
Parameterization and Initialization of Diagonal State Space Models", as an encoder block.

Per feature h (H = model width) a diagonal SSM with M = state_dim / 2 complex modes (their
conjugates are implied: the kernel is twice the real part):
  x'(t) = A x(t) + B u(t),  y(t) = C x(t),  A = -exp(log_a_real) + i a_imag,  B = 1.
Zero-order hold with step dt = exp(log_dt) gives dA = exp(dt A), dB = (exp(dt A) - 1) / A, and
the convolution kernel (the paper's eq. 5, a Vandermonde product):
  K[l] = 2 Re( sum_m C_m dB_m dA_m^l ),   l = 0 .. L-1.
The layer is y = K * u + D u, applied by FFT; bidirectional (classification) adds a second
kernel K' (its own C, the same A and dt) read backwards: y_i += sum_{j>i} K'[j-i-1] u_j.

Initialisation (the paper's §4): S4D-Lin a_imag = pi m; S4D-Inv a_imag = (N / pi)(N / (2m+1) - 1)
(N = state_dim); log_a_real = log(1/2); log_dt ~ U[log dt_min, log dt_max]; C complex normal
(variance 1). The SSM parameters `SSM_PARAMETERS` (A and dt) train with their own learning rate
and no weight decay (config.ssm_learning_rate; training/steps.py).

Padding: the block zeroes padded positions before every convolution, so the real positions'
outputs do not depend on how far a sequence is padded (the authors' LRA code convolves pad
tokens as data); pooling reads real positions only (classifier.pool).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear

INITS = ('inv', 'lin')
# Parameter names that get config.ssm_learning_rate and no weight decay (training/steps.py).
SSM_PARAMETERS = ('log_dt', 'log_a_real', 'a_imag')


def initial_a_imag(init: str, state_dim: int) -> np.ndarray:
  """Imaginary parts of A's M = state_dim / 2 modes: S4D-Inv or S4D-Lin (the paper's §4.2)."""
  m = np.arange(state_dim // 2, dtype=np.float64)
  if init == 'lin':
    return (math.pi * m).astype(np.float32)
  return (state_dim / math.pi * (state_dim / (2 * m + 1) - 1)).astype(np.float32)  # 'inv'


def vandermonde_kernel(log_dt, log_a_real, a_imag, c, length: int):
  """K [channels, H, L] (float32): K[l] = 2 Re(sum_m C_m (exp(dt A_m) - 1) / A_m exp(dt A_m l)).

  log_dt [H], log_a_real and a_imag [H, M], c [channels, H, M] complex64.
  The powers are blocked: with l = T q + r (T about sqrt(L)), dA^l = dA^(T q) dA^r, so only
  H M (T + L / T) complex exponentials are taken instead of H M L (the transcendentals were most
  of S4D's step), and the sum over m is two real batched matmuls (real and imaginary parts).
  """
  dt = jnp.exp(log_dt)[:, None]
  a = -jnp.exp(log_a_real) + 1j * a_imag
  dt_a = a * dt
  coefficients = c * (jnp.exp(dt_a) - 1.0) / a  # [channels, H, M]
  block = max(1, math.isqrt(length - 1) + 1) if length > 1 else 1
  num_blocks = -(-length // block)
  within = jnp.exp(dt_a[..., None] * jnp.arange(block))  # dA^r [H, M, T]
  across = jnp.exp(dt_a[..., None] * (block * jnp.arange(num_blocks)))  # dA^(Tq) [H, M, Q]
  weighted = coefficients[..., None] * across  # [channels, H, M, Q]
  # Re(w v) = Re w Re v - Im w Im v, summed over m: [channels, H, Q, T].
  kernel = (jnp.einsum('chmq,hmr->chqr', weighted.real, within.real)
            - jnp.einsum('chmq,hmr->chqr', weighted.imag, within.imag))
  return 2.0 * kernel.reshape(*kernel.shape[:2], block * num_blocks)[..., :length]


def fft_convolution(u, kernel, reverse_kernel=None):
  """y [B, L, H]: y_i = sum_{j<=i} K[i-j] u_j (+ sum_{j>i} K'[j-i-1] u_j with `reverse_kernel`).

  u [B, L, H] float32, kernels [H, L]. One FFT of length 2L: K and the reversed K' sit in the two
  halves of one circular kernel, so no product wraps around.
  """
  length = u.shape[1]
  tail = (jnp.zeros_like(kernel) if reverse_kernel is None else jnp.flip(reverse_kernel, -1))
  circular = jnp.concatenate([kernel, tail], axis=-1)  # [H, 2L]
  u_f = jnp.fft.rfft(u, n=2 * length, axis=1)
  k_f = jnp.fft.rfft(circular, n=2 * length, axis=-1).T  # [L + 1, H]
  return jnp.fft.irfft(u_f * k_f, n=2 * length, axis=1)[:, :length]


# The largest Toeplitz matrix [H, L, L] (elements) causal_convolution builds: 64 MiB of float32.
# Beyond it the depthwise convolution, whose gradient on a CPU is some 60 times slower.
TOEPLITZ_MAX_ELEMENTS = 1 << 24


def causal_convolution(u, kernel):
  """y [B, L, H]: y_i = sum_{j<=i} K[i-j] u_j, fft_convolution's one-sided case in the direct
  form (O(L^2) work): exactly causal, where an FFT spreads rounding (~1e-7) of every input over
  every output, the past included. u [B, L, H] float32, K [H, L]. A lower-triangular Toeplitz
  matrix per feature where it fits in TOEPLITZ_MAX_ELEMENTS, else a depthwise convolution."""
  length, features = u.shape[1], u.shape[2]
  if features * length * length <= TOEPLITZ_MAX_ELEMENTS:
    lag = jnp.arange(length)[:, None] - jnp.arange(length)[None, :]  # i - j
    toeplitz = jnp.where(lag >= 0, kernel[:, jnp.maximum(lag, 0)], 0).astype(u.dtype)
    return jnp.einsum('hij,bjh->bih', toeplitz, u, precision=jax.lax.Precision.HIGHEST)
  y = jax.lax.conv_general_dilated(
      jnp.transpose(u, (0, 2, 1)), kernel[:, None, ::-1].astype(u.dtype), window_strides=(1,),
      padding=[(length - 1, 0)], feature_group_count=features,
      precision=jax.lax.Precision.HIGHEST)
  return jnp.transpose(y, (0, 2, 1))


class S4D(nnx.Module):
  """The S4D convolution of every feature: u [B, L, H] -> K * u + D u (float32 inside)."""

  def __init__(self, dim: int, *, state_dim: int, init: str, dt_min: float, dt_max: float,
               bidirectional: bool, rngs: nnx.Rngs, num_ssm: int = 0, causal: bool = False):
    """num_ssm: copies of A, each shared by dim / num_ssm features (the authors' n_ssm);
    0: one A per feature. causal: one-sided, by causal_convolution (a causal encoder)."""
    self.causal = causal
    modes, copies = state_dim // 2, num_ssm or dim
    if dim % copies:
      raise ValueError(f'S4DBlock option num_ssm = {num_ssm} does not divide the width {dim}.')
    dt_key, c_key, d_key = jax.random.split(rngs.params(), 3)
    self.log_dt = nnx.Param(jax.random.uniform(dt_key, (dim,), minval=math.log(dt_min),
                                               maxval=math.log(dt_max)))
    self.log_a_real = nnx.Param(jnp.full((copies, modes), math.log(0.5), jnp.float32))
    self.a_imag = nnx.Param(jnp.tile(jnp.asarray(initial_a_imag(init, state_dim)), (copies, 1)))
    # C complex normal with unit variance, stored as (real, imaginary) pairs.
    channels = 2 if bidirectional else 1
    self.c = nnx.Param(jax.random.normal(c_key, (channels, dim, modes, 2)) * math.sqrt(0.5))
    self.d = nnx.Param(jax.random.normal(d_key, (dim,)))

  def kernel(self, length: int):
    """K [channels, H, L]."""
    c = self.c[...]
    # Feature h reads copy h mod num_ssm (the authors' repeat '(v t) n').
    share = lambda a: jnp.tile(a, (self.log_dt.shape[0] // a.shape[0], 1))
    return vandermonde_kernel(self.log_dt[...], share(self.log_a_real[...]),
                              share(self.a_imag[...]), jax.lax.complex(c[..., 0], c[..., 1]),
                              length)

  def __call__(self, u):
    kernel = self.kernel(u.shape[1])
    u = u.astype(jnp.float32)
    if self.causal:
      y = causal_convolution(u, kernel[0])
    else:
      y = fft_convolution(u, kernel[0], kernel[1] if kernel.shape[0] == 2 else None)
    return y + u * self.d[...]


class S4DBlock(nnx.Module):
  """The authors' residual block around S4D (their SequenceResidualBlock with an S4 layer):
  z = LN(x) (prenorm); y = GLU(W Drop(GELU(S4D(z)))); x + Drop(y), then LN (postnorm).

  The block protocol of classifier.BlockEncoder: Block(cfg, rngs), block(x, mask, *,
  deterministic, rngs, query_rows) and Block.final_norm(cfg). Options (config.model.
  attention_options): state_dim N, init ('inv' | 'lin'), dt_min, dt_max, bidirectional, prenorm,
  num_ssm (copies of A shared across the features; 0: one per feature).
  """

  CONFIG_OPTIONS = ('state_dim', 'init', 'dt_min', 'dt_max', 'bidirectional', 'prenorm',
                    'num_ssm')

  def __init__(self, cfg, rngs: nnx.Rngs):
    options = dict(cfg.attention_options)
    self.check_options(**options)
    dtype = getattr(jnp, cfg.dtype)
    self.prenorm = options.get('prenorm', True)
    self.norm = layers.LayerNorm(cfg.dim, dtype=dtype)
    self.s4d = S4D(cfg.dim, state_dim=options.get('state_dim', 64),
                   init=options.get('init', 'inv'), dt_min=options.get('dt_min', 1e-3),
                   dt_max=options.get('dt_max', 1e-1),
                   # A causal encoder (ModelConfig.causal) convolves with the past only.
                   bidirectional=options.get('bidirectional', True) and not cfg.causal, rngs=rngs,
                   num_ssm=options.get('num_ssm', 0), causal=cfg.causal)
    # Position-wise output linear D -> 2D, then GLU (the authors' final_act 'glu').
    self.output_linear = Linear(cfg.dim, 2 * cfg.dim, dtype=dtype, rngs=rngs)
    self.dropout = Dropout(cfg.dropout)
    self.dtype = dtype

  @staticmethod
  def final_norm(cfg) -> bool:
    """Whether the encoder ends with a LayerNorm: for pre-norm stacks only (the authors')."""
    return dict(cfg.attention_options).get('prenorm', True)

  @staticmethod
  def check_options(*, max_length: int = 0, state_dim: int = 64, init: str = 'inv',
                    dt_min: float = 1e-3, dt_max: float = 1e-1, bidirectional: bool = True,
                    prenorm: bool = True, num_ssm: int = 0) -> None:
    """ValueError naming the first option outside its valid range."""
    del max_length, bidirectional, prenorm
    if not (isinstance(state_dim, int) and state_dim >= 2 and state_dim % 2 == 0):
      raise ValueError(f'S4DBlock option state_dim = {state_dim} is not valid: an even integer '
                       '>= 2 (N; its M = N / 2 complex modes carry their conjugates).')
    if init not in INITS:
      raise ValueError(f'S4DBlock option init = {init!r} is not valid; valid choices: '
                       f'{list(INITS)}.')
    if not (isinstance(num_ssm, int) and num_ssm >= 0):
      raise ValueError(f'S4DBlock option num_ssm = {num_ssm} is not valid: an integer >= 0 (0: '
                       'one A per feature) that divides the width.')
    if not 0 < dt_min <= dt_max:
      raise ValueError(f'S4DBlock options dt_min = {dt_min}, dt_max = {dt_max} are not valid: '
                       'need 0 < dt_min <= dt_max.')

  def __call__(self, x, mask, *, deterministic=True, rngs=None, query_rows=None):
    """x [B, n, D] -> [B, n, D] (its first `query_rows` rows with `query_rows`)."""
    drop = lambda y: self.dropout(y, deterministic=deterministic, rngs=rngs)
    z = self.norm(x) if self.prenorm else x
    # Padded positions are zeroed before the convolution: they carry nothing into real ones.
    z = z * mask[..., None].astype(z.dtype)
    y = drop(layers.gelu(self.s4d(z))).astype(self.dtype)
    y = jax.nn.glu(self.output_linear(y), axis=-1)
    x = x + drop(y)
    if not self.prenorm:
      x = self.norm(x)
    return x[:, :query_rows]
