"""S5: the simplified state space layer of Smith, Warrington and Linderman (2023), "Simplified
State Space Layers for Sequence Modeling" (ICLR 2023, arXiv 2208.04933), as an encoder block.

One multi-input multi-output diagonal SSM per layer (the paper's Sec. 3), H features, P modes:
  x'(t) = Lambda x(t) + B~ u(t),  y(t) = C~ x(t) + D u(t)        (Sec. 2; diagonalised, Sec. 3)
with Lambda = lambda_re + i lambda_im diagonal, B~ = V^-1 B [P, H], C~ = C V [H, P], D [H]
diagonal. Per-mode steps Delta = exp(log_step) discretise it (Sec. 2 and the appendix):
  zero-order hold  Lambda_bar = exp(Lambda Delta),  B_bar = Lambda^-1 (Lambda_bar - 1) B~
  bilinear         Lambda_bar = (1 - Delta/2 Lambda)^-1 (1 + Delta/2 Lambda),
                   B_bar = (1 - Delta/2 Lambda)^-1 Delta B~
and the recurrence x_k = Lambda_bar x_{k-1} + B_bar u_k, y_k = Re(C~ x_k) + D u_k (Sec. 2)
is computed by `jax.lax.associative_scan` with the operator (a_i, b_i) . (a_j, b_j) =
(a_j a_i, a_j b_i + b_j) (Secs. 2-3, the parallel scan). Conjugate symmetry (Sec. 3): only the P/2 modes with
negative imaginary parts are kept, the output is 2 Re(C~ x). Bidirectional (the authors' LRA
models): a second scan runs backwards (inclusive of position k) through the same Lambda_bar and
B_bar, read out by a second C~.

Initialisation (Secs. 3-4, "HiPPO-N"): Lambda and V are the eigendecomposition of the normal
part of HiPPO-LegS, S = A_LegS + p p^T with p_n = sqrt(n + 1/2); with `blocks` J the state is J
copies of the HiPPO-N of size P / J on a block diagonal. B ~ LeCun normal then B~ = V^-1 B;
C ~ 'trunc_standard_normal' (LeCun normal per row), 'lecun_normal' (then C~ = C V) or
'complex_normal' (C~ itself, variance 1); D ~ N(0, 1); log_step ~ U[log dt_min, log dt_max].
The parameters named in SSM_PARAMETERS (Lambda, B~, the steps) train at config.ssm_learning_rate
without weight decay (the authors' opt_config 'standard'; training/steps.py).

Padding: the block zeroes padded positions before the SSM, so neither scan carries anything from
them into a real position (the authors feed pad tokens as data and pool the real ones).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear

C_INITS = ('trunc_standard_normal', 'lecun_normal', 'complex_normal')
DISCRETIZATIONS = ('zoh', 'bilinear')
ACTIVATIONS = ('full_glu', 'half_glu1', 'half_glu2', 'gelu')
SCANS = ('associative', 'sequential')
FLAX_LAYER_NORM_EPS = 1e-6  # flax.linen.LayerNorm's, the authors' norm outside BatchNorm
# Parameter names that get config.ssm_learning_rate and no weight decay (training/steps.py).
SSM_PARAMETERS = ('lambda_re', 'lambda_im', 'b_tilde', 'log_step')


# ----------------------------------------------------------------------------------------------
# Initialisation: HiPPO-N (Sec. 4) and the block-diagonal state matrix.
# ----------------------------------------------------------------------------------------------
def hippo_legs(size: int) -> np.ndarray:
  """The HiPPO-LegS matrix A [N, N]: -sqrt(2n+1) sqrt(2k+1) below the diagonal, -(n+1) on it."""
  p = np.sqrt(1.0 + 2.0 * np.arange(size))
  return -(np.tril(p[:, None] * p[None, :]) - np.diag(np.arange(size)))


def hippo_n(size: int) -> np.ndarray:
  """HiPPO-N [N, N]: the normal part of HiPPO-LegS, A + p p^T with p_n = sqrt(n + 1/2) (Sec. 4):
  -1/2 on the diagonal plus a skew-symmetric matrix."""
  p = np.sqrt(np.arange(size) + 0.5)
  return hippo_legs(size) + p[:, None] * p[None, :]


def hippo_n_eigendecomposition(size: int):
  """(Lambda [N] complex, V [N, N] unitary) with hippo_n(size) = V diag(Lambda) V^H, Lambda's
  imaginary parts ascending: real parts -1/2, imaginary parts the eigenvalues of the Hermitian
  -i K of the skew-symmetric part K (the authors' make_DPLR_HiPPO)."""
  s = hippo_n(size)
  skew = (s - s.T) / 2.0
  imaginary, v = np.linalg.eigh(-1j * skew)
  return np.mean(np.diag(s)) + 1j * imaginary, v


def block_diagonal_init(state_dim: int, blocks: int, conj_sym: bool):
  """(Lambda [P'], V [P, P'], V_inv [P', P]) of `blocks` copies of HiPPO-N of size P / blocks on
  a block diagonal (the paper's Secs. 3-4; the authors' train.py). With conjugate symmetry P' = P / 2: each
  block keeps its modes with negative imaginary parts (the first half), V its columns; V_inv is
  V^H block by block (the authors' train.py)."""
  size = state_dim // blocks
  lambda_, v = hippo_n_eigendecomposition(size)
  kept = size // 2 if conj_sym else size
  lambda_, v = lambda_[:kept], v[:, :kept]
  eye = np.eye(blocks)
  return np.tile(lambda_, blocks), np.kron(eye, v), np.kron(eye, v.conj().T)


def lecun_normal(key, shape, fan_in: int):
  """Truncated normal with variance 1 / fan_in (jax.nn.initializers.lecun_normal)."""
  std = math.sqrt(1.0 / fan_in) / 0.87962566103423978  # the truncation's standard deviation
  return std * jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32)


def initial_c_tilde(key, c_init: str, dim: int, v):
  """C~ [H, P'] complex64: 'trunc_standard_normal' (LeCun normal per row of C [H, P, 2], fan-in
  P), 'lecun_normal' (LeCun normal on all of C [H, P, 2], fan-in H P), each then C V;
  'complex_normal' C~ ~ CN(0, 1) directly (the authors' S5SSM)."""
  full, kept = v.shape
  if c_init == 'complex_normal':
    c = jax.random.normal(key, (dim, kept, 2)) * math.sqrt(0.5)
    return jax.lax.complex(c[..., 0], c[..., 1])
  fan_in = full if c_init == 'trunc_standard_normal' else full * dim
  c = lecun_normal(key, (dim, full, 2), fan_in)
  return (jax.lax.complex(c[..., 0], c[..., 1]) @ jnp.asarray(v, jnp.complex64))


# ----------------------------------------------------------------------------------------------
# The math: discretisations (Sec. 2) and the linear recurrence (Secs. 2-3).
# ----------------------------------------------------------------------------------------------
def discretize_zoh(lambda_, b_tilde, step):
  """Zero-order hold (Sec. 2): Lambda_bar = exp(Lambda Delta), B_bar = Lambda^-1 (Lambda_bar - 1)
  B~. lambda_ [P], b_tilde [P, H] complex, step [P] -> (Lambda_bar [P], B_bar [P, H])."""
  lambda_bar = jnp.exp(lambda_ * step)
  return lambda_bar, ((lambda_bar - 1.0) / lambda_)[:, None] * b_tilde


def discretize_bilinear(lambda_, b_tilde, step):
  """Bilinear (Tustin; the paper's appendix, the authors' discretize_bilinear): Lambda_bar = (1 - Delta/2 Lambda)^-1 (1 + Delta/2 Lambda),
  B_bar = (1 - Delta/2 Lambda)^-1 Delta B~."""
  inverse = 1.0 / (1.0 - step / 2.0 * lambda_)
  return inverse * (1.0 + step / 2.0 * lambda_), (inverse * step)[:, None] * b_tilde


DISCRETIZE = {'zoh': discretize_zoh, 'bilinear': discretize_bilinear}


def combine(earlier, later):
  """The scan's associative operator (the parallel scan, Secs. 2-3): (a_i, b_i) . (a_j, b_j) = (a_j a_i, a_j b_i + b_j),
  composing x -> a_i x + b_i then x -> a_j x + b_j."""
  a_i, b_i = earlier
  a_j, b_j = later
  return a_j * a_i, a_j * b_i + b_j


def linear_recurrence(a, bu, *, reverse: bool = False, method: str = 'associative'):
  """x [B, L, P]: x_k = a_k x_{k-1} + bu_k from x_{-1} = 0 along axis 1 (backwards with
  `reverse`: x_k = a_k x_{k+1} + bu_k). a [L, P] or [P] (the same at every step), bu [B, L, P].

  'associative': jax.lax.associative_scan of `combine` (O(log L) depth); 'sequential': one
  jax.lax.scan step per position (the reference recurrence)."""
  a = jnp.broadcast_to(a, bu.shape[1:])
  if method == 'associative':
    return jax.lax.associative_scan(combine, (a[None], bu), reverse=reverse, axis=1)[1]
  def step(x, inputs):
    a_k, bu_k = inputs
    x = a_k * x + bu_k
    return x, x
  initial = jnp.zeros((bu.shape[0], bu.shape[2]), bu.dtype)
  _, xs = jax.lax.scan(step, initial, (a, jnp.moveaxis(bu, 1, 0)), reverse=reverse)
  return jnp.moveaxis(xs, 0, 1)


def project_input(u, b_bar):
  """B_bar u_k for every k: u [B, L, H] float32, b_bar [P, H] complex -> [B, L, P] complex64."""
  return jax.lax.complex(u @ b_bar.real.T, u @ b_bar.imag.T)


def read_out(xs, c_tilde):
  """Re(C~ x_k) [B, L, H] float32: xs [B, L, P] complex, c_tilde [H, P] complex."""
  return xs.real @ c_tilde.real.T - xs.imag @ c_tilde.imag.T


def apply_ssm(lambda_bar, b_bar, c_tilde, u, *, conj_sym: bool, method: str = 'associative'):
  """y [B, L, H] = Re(C~ x) (x2 with conjugate symmetry) of the discretised SSM on u [B, L, H]
  (float32). c_tilde [C, H, P]: C = 1 causal, C = 2 bidirectional (the second C~ reads the
  backward scan, x_k = Lambda_bar x_{k+1} + B_bar u_k)."""
  bu = project_input(u, b_bar)
  y = read_out(linear_recurrence(lambda_bar, bu, method=method), c_tilde[0])
  if c_tilde.shape[0] == 2:
    y = y + read_out(linear_recurrence(lambda_bar, bu, reverse=True, method=method), c_tilde[1])
  return 2.0 * y if conj_sym else y


# ----------------------------------------------------------------------------------------------
# The layer (the authors' S5SSM) and the block (their SequenceLayer).
# ----------------------------------------------------------------------------------------------
class S5SSM(nnx.Module):
  """The S5 SSM of every feature at once: u [B, L, H] -> y [B, L, H] float32 (complex64 state)."""

  def __init__(self, dim: int, *, state_dim: int, blocks: int, c_init: str, discretization: str,
               conj_sym: bool, clip_eigs: bool, bidirectional: bool, dt_min: float,
               dt_max: float, rngs: nnx.Rngs, scan: str = 'associative'):
    lambda_, v, v_inv = block_diagonal_init(state_dim, blocks, conj_sym)
    b_key, c_key, d_key, step_key = jax.random.split(rngs.params(), 4)
    # B ~ LeCun normal [P, H] (fan-in P), then B~ = V^-1 B (the authors' init_VinvB).
    b_tilde = jnp.asarray(v_inv, jnp.complex64) @ lecun_normal(b_key, (state_dim, dim), state_dim)
    self.lambda_re = nnx.Param(jnp.asarray(lambda_.real, jnp.float32))
    self.lambda_im = nnx.Param(jnp.asarray(lambda_.imag, jnp.float32))
    self.b_tilde = nnx.Param(jnp.stack([b_tilde.real, b_tilde.imag], -1))
    c_keys = jax.random.split(c_key, 2 if bidirectional else 1)
    c = jnp.stack([initial_c_tilde(k, c_init, dim, v) for k in c_keys])
    self.c_tilde = nnx.Param(jnp.stack([c.real, c.imag], -1))  # [C, H, P', 2]
    self.d = nnx.Param(jax.random.normal(d_key, (dim,)))
    self.log_step = nnx.Param(jax.random.uniform(
        step_key, (len(lambda_),), minval=math.log(dt_min), maxval=math.log(dt_max)))
    self.discretization, self.conj_sym, self.clip_eigs, self.scan = (
        discretization, conj_sym, clip_eigs, scan)

  def discrete(self):
    """(Lambda_bar [P'], B_bar [P', H]) complex64 of the current parameters."""
    real = self.lambda_re[...]
    if self.clip_eigs:  # the left half plane (the authors' clip_eigs)
      real = jnp.minimum(real, -1e-4)
    b = self.b_tilde[...]
    return DISCRETIZE[self.discretization](jax.lax.complex(real, self.lambda_im[...]),
                                           jax.lax.complex(b[..., 0], b[..., 1]),
                                           jnp.exp(self.log_step[...]))

  def __call__(self, u):
    u = u.astype(jnp.float32)
    lambda_bar, b_bar = self.discrete()
    c = self.c_tilde[...]
    y = apply_ssm(lambda_bar, b_bar, jax.lax.complex(c[..., 0], c[..., 1]), u,
                  conj_sym=self.conj_sym, method=self.scan)
    return y + u * self.d[...]


class S5Block(nnx.Module):
  """The authors' S5 layer (their SequenceLayer) around S5SSM, z the (pre-normed) input:
    gelu       y = g = Drop(GELU(s)),  s = S5(z)  (GELU: tanh approximation, flax's nn.gelu)
    half_glu1  y = Drop(g * sigmoid(W g))
    half_glu2  y = Drop(s * sigmoid(W g))
    full_glu   y = Drop(W1 g * sigmoid(W2 g))
  then x + y, and the norm after it (post-norm) or before the SSM (pre-norm). Dropout masks are
  shared by every position of a sequence (the authors' broadcast_dims over the length).

  The block protocol of classifier.BlockEncoder. Options (config.model.attention_options,
  DEFAULTS): state_dim P, blocks J, c_init, discretization, conj_sym, clip_eigs, bidirectional,
  dt_min, dt_max, activation, prenorm, scan ('associative' | 'sequential').
  """

  DEFAULTS = {'state_dim': 256, 'blocks': 8, 'c_init': 'trunc_standard_normal',
              'discretization': 'zoh', 'conj_sym': True, 'clip_eigs': False,
              'bidirectional': True, 'dt_min': 1e-3, 'dt_max': 1e-1, 'activation': 'half_glu1',
              'prenorm': True, 'scan': 'associative'}
  CONFIG_OPTIONS = tuple(DEFAULTS)

  def __init__(self, cfg, rngs: nnx.Rngs):
    options = {**self.DEFAULTS, **dict(cfg.attention_options)}
    self.check_options(**options)
    activation, prenorm = options.pop('activation'), options.pop('prenorm')
    self.ssm = S5SSM(cfg.dim, **options, rngs=rngs)
    self.build_around_ssm(cfg, activation, prenorm, rngs)

  def build_around_ssm(self, cfg, activation: str, prenorm: bool, rngs: nnx.Rngs) -> None:
    """The norm, the activation's projections and the dropout around self.ssm."""
    dtype = getattr(jnp, cfg.dtype)
    self.activation, self.prenorm, self.dtype = activation, prenorm, dtype
    self.norm = layers.LayerNorm(cfg.dim, epsilon=FLAX_LAYER_NORM_EPS, dtype=dtype)
    if activation != 'gelu':
      self.gate = Linear(cfg.dim, cfg.dim, dtype=dtype, rngs=rngs)
    if activation == 'full_glu':
      self.value = Linear(cfg.dim, cfg.dim, dtype=dtype, rngs=rngs)
    self.dropout = Dropout(cfg.dropout)

  @staticmethod
  def final_norm(cfg) -> bool:
    """No norm after the stack (the authors' StackedEncoderModel has none)."""
    del cfg
    return False

  @staticmethod
  def check_options(*, max_length: int = 0, state_dim: int = 256, blocks: int = 8,
                    c_init: str = 'trunc_standard_normal', discretization: str = 'zoh',
                    conj_sym: bool = True, clip_eigs: bool = False, bidirectional: bool = True,
                    dt_min: float = 1e-3, dt_max: float = 1e-1, activation: str = 'half_glu1',
                    prenorm: bool = True, scan: str = 'associative') -> None:
    """ValueError naming the first option outside its valid range."""
    del max_length, clip_eigs, bidirectional, prenorm
    per_block = 2 if conj_sym else 1
    if not (isinstance(blocks, int) and blocks >= 1 and isinstance(state_dim, int)
            and state_dim >= per_block and state_dim % (blocks * per_block) == 0):
      raise ValueError(f'S5Block options state_dim = {state_dim}, blocks = {blocks} are not '
                       'valid: state_dim a multiple of blocks (of 2 x blocks with conj_sym).')
    for name, value, choices in (('c_init', c_init, C_INITS),
                                 ('discretization', discretization, DISCRETIZATIONS),
                                 ('activation', activation, ACTIVATIONS), ('scan', scan, SCANS)):
      if value not in choices:
        raise ValueError(f'S5Block option {name} = {value!r} is not valid; valid choices: '
                         f'{list(choices)}.')
    if not 0 < dt_min <= dt_max:
      raise ValueError(f'S5Block options dt_min = {dt_min}, dt_max = {dt_max} are not valid: '
                       'need 0 < dt_min <= dt_max.')

  def __call__(self, x, mask, *, deterministic=True, rngs=None, query_rows=None):
    """x [B, n, D] -> [B, n, D] (its first `query_rows` rows with `query_rows`)."""
    # One dropout mask per sequence and feature, shared by its positions; a new one per call.
    drop = lambda y: y * self.dropout(jnp.ones((y.shape[0], 1, y.shape[2]), y.dtype),
                                      deterministic=deterministic, rngs=rngs)
    z = self.norm(x) if self.prenorm else x
    # Padded positions are zeroed before the SSM: neither scan carries them into real ones.
    s = self.ssm(z * mask[..., None].astype(z.dtype)).astype(self.dtype)
    g = drop(jax.nn.gelu(s))  # flax's nn.gelu, the tanh approximation (the authors')
    if self.activation == 'half_glu1':
      g = drop(g * jax.nn.sigmoid(self.gate(g)))
    elif self.activation == 'half_glu2':
      g = drop(s * jax.nn.sigmoid(self.gate(g)))
    elif self.activation == 'full_glu':
      g = drop(self.value(g) * jax.nn.sigmoid(self.gate(g)))
    x = x + g
    if not self.prenorm:
      x = self.norm(x)
    return x[:, :query_rows]
