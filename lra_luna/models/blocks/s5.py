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
(a_j a_i, a_j b_i + b_j) (Secs. 2-3, the parallel scan), by a sequential `jax.lax.scan`, or in
chunks (sequential within chunks, then across them); the states run time-major as real arrays
(real parts, then imaginary parts), and the backward pass is the recurrence's own transpose, one
scan of the cotangents the other way (`recurrence_backward`). Conjugate symmetry (Sec. 3): only the P/2 modes with
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

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.nn import layers
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear, project

C_INITS = ('trunc_standard_normal', 'lecun_normal', 'complex_normal')
DISCRETIZATIONS = ('zoh', 'bilinear')
ACTIVATIONS = ('full_glu', 'half_glu1', 'half_glu2', 'gelu')
SCANS = ('associative', 'sequential', 'chunked')
DEFAULT_CHUNK = 64  # positions per chunk of the 'chunked' scan
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


# The states run as real arrays [..., 2P]: the real parts of the P modes, then the imaginary
# parts (float32 arithmetic only, no complex copies between the projections and the scan).
def stacked(z):
  """Complex [..., P] -> real [..., 2P]: real parts, then imaginary parts."""
  return jnp.concatenate([z.real, z.imag], -1)


def unstacked(s):
  """Real [..., 2P] -> complex [..., P] (the inverse of `stacked`)."""
  modes = s.shape[-1] // 2
  return jax.lax.complex(s[..., :modes], s[..., modes:])


def rotate(a, s):
  """The complex product a s of stacked arrays (a [..., 2P] broadcast against s [..., 2P])."""
  modes = s.shape[-1] // 2
  a_re, a_im, s_re, s_im = a[..., :modes], a[..., modes:], s[..., :modes], s[..., modes:]
  return jnp.concatenate([a_re * s_re - a_im * s_im, a_re * s_im + a_im * s_re], -1)


def conjugate(a):
  """The complex conjugate of a stacked array."""
  modes = a.shape[-1] // 2
  return jnp.concatenate([a[..., :modes], -a[..., modes:]], -1)


def stacked_combine(earlier, later):
  """`combine` on stacked arrays."""
  a_i, b_i = earlier
  a_j, b_j = later
  return rotate(a_j, a_i), rotate(a_j, b_i) + b_j


def check_chunk(block: str, chunk) -> None:
  """ValueError unless the chunked scan's `chunk` is an integer >= 1."""
  if not (isinstance(chunk, int) and chunk >= 1):
    raise ValueError(f'{block} option chunk = {chunk!r} is not valid: an integer >= 1.')


def scan_in_order(a, bu, *, reverse: bool, method: str, chunk: int):
  """x [L, B, 2P] (time-major, stacked): x_k = a_k x_{k-1} + bu_k from x_{-1} = 0 (backwards
  with `reverse`), a [2P] (every step) or [L, 2P], bu [L, B, 2P], by `method`
  (linear_recurrence); no gradient of its own."""
  per_step = a.ndim == 2
  if method == 'associative':
    a = jnp.broadcast_to(a, (bu.shape[0], a.shape[-1]))
    return jax.lax.associative_scan(stacked_combine, (a[:, None], bu), reverse=reverse,
                                    axis=0)[1]
  if method == 'chunked':
    return chunked_scan(jnp.broadcast_to(a, (bu.shape[0], a.shape[-1])), bu, reverse=reverse,
                        chunk=chunk)
  def step(x, inputs):
    a_k, bu_k = inputs if per_step else (a, inputs)
    x = rotate(a_k, x) + bu_k
    return x, x
  return jax.lax.scan(step, jnp.zeros_like(bu[0]), (a, bu) if per_step else bu,
                      reverse=reverse)[1]


def chunked_scan(a, bu, *, reverse: bool, chunk: int):
  """The recurrence of `scan_in_order` in chunks of T = `chunk` positions (the parallel scan's
  split of the sequence into blocks, Secs. 2-3): within every chunk c at once, a sequential
  scan from a zero state, x~_{c,t} = a_{c,t} x~_{c,t-1} + bu_{c,t}, with the products
  A_{c,t} = a_{c,1} ... a_{c,t}; then the states entering the chunks,
  h_c = A_{c,T} h_{c-1} + x~_{c,T} (a sequential scan over the L / T chunks); then
  x_{c,t} = x~_{c,t} + A_{c,t} h_{c-1}: T + L / T loop steps instead of L. a [L, 2P]."""
  if reverse:
    return chunked_scan(a[::-1], bu[::-1], reverse=False, chunk=chunk)[::-1]
  length, batch, width = bu.shape
  chunks = -(-length // chunk)
  pad = chunks * chunk - length  # trailing positions: no earlier state depends on them
  if pad:
    bu = jnp.pad(bu, ((0, pad), (0, 0), (0, 0)))
    a = jnp.pad(a, ((0, pad), (0, 0)))
  a_steps = a.reshape(chunks, chunk, width).transpose(1, 0, 2)  # [T, C, 2P]
  bu_steps = bu.reshape(chunks, chunk, batch, width).transpose(1, 0, 2, 3)  # [T, C, B, 2P]

  def within(carry, inputs):
    x, product = carry
    a_t, bu_t = inputs
    x, product = rotate(a_t[:, None], x) + bu_t, rotate(a_t, product)
    return (x, product), (x, product)

  one = jnp.concatenate([jnp.ones((chunks, width // 2)), jnp.zeros((chunks, width // 2))], -1)
  initial = (jnp.zeros(bu_steps.shape[1:], bu.dtype), one.astype(bu.dtype))
  _, (local, products) = jax.lax.scan(within, initial, (a_steps, bu_steps))

  def across(h, inputs):
    product_c, last_c = inputs
    return rotate(product_c[None], h) + last_c, h

  _, entering = jax.lax.scan(across, jnp.zeros((batch, width), bu.dtype),
                             (products[-1], local[-1]))  # [C, B, 2P]: h_{c-1}
  xs = local + rotate(products[:, :, None], entering[None])  # [T, C, B, 2P]
  return xs.transpose(1, 0, 2, 3).reshape(chunks * chunk, batch, width)[:length]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def recurrence(a, bu, reverse, method, chunk):
  """scan_in_order (time-major, stacked) with the recurrence's own backward pass
  (recurrence_backward)."""
  return scan_in_order(a, bu, reverse=reverse, method=method, chunk=chunk)


def recurrence_forward(a, bu, reverse, method, chunk):
  xs = scan_in_order(a, bu, reverse=reverse, method=method, chunk=chunk)
  return xs, (a, xs)


def recurrence_backward(reverse, method, chunk, residuals, cotangent):
  """The transpose of x_k = a_k x_{k-1} + bu_k (real and imaginary parts as real numbers): the
  cotangent of bu is the same recurrence run the other way through the next step's conjugate,
  lambda_k = g_k + conj(a_{k+1}) lambda_{k+1}, and that of a_k is conj(x_{k-1}) lambda_k summed
  over the batch (over the steps too for one a of every step): one scan, where autodiff through
  a scan keeps and steps through its residuals."""
  a, xs = residuals
  if a.ndim == 1:  # one a for every step: the next step's is the same
    adjoint = scan_in_order(conjugate(a), cotangent, reverse=not reverse, method=method,
                            chunk=chunk)
    # Steps with a previous state only: k >= 1 forwards, k <= L - 2 backwards.
    x_previous, later = (xs[1:], adjoint[:-1]) if reverse else (xs[:-1], adjoint[1:])
    return jnp.sum(rotate(conjugate(x_previous), later), axis=(0, 1)), adjoint
  zero_x, zero_a = jnp.zeros_like(xs[:1]), jnp.zeros_like(a[:1])
  if reverse:  # x_k = a_k x_{k+1} + bu_k: the next step is k - 1, the previous state x_{k+1}
    x_previous = jnp.concatenate([xs[1:], zero_x], 0)
    a_next = jnp.concatenate([zero_a, a[:-1]], 0)  # (its value past the last step is unused)
  else:
    x_previous = jnp.concatenate([zero_x, xs[:-1]], 0)
    a_next = jnp.concatenate([a[1:], zero_a], 0)
  adjoint = scan_in_order(conjugate(a_next), cotangent, reverse=not reverse, method=method,
                          chunk=chunk)
  return jnp.sum(rotate(conjugate(x_previous), adjoint), axis=1), adjoint


recurrence.defvjp(recurrence_forward, recurrence_backward)


def linear_recurrence(a, bu, *, reverse: bool = False, method: str = 'associative',
                      chunk: int = DEFAULT_CHUNK):
  """x [B, L, P]: x_k = a_k x_{k-1} + bu_k from x_{-1} = 0 along axis 1 (backwards with
  `reverse`: x_k = a_k x_{k+1} + bu_k). a [L, P] or [P] (the same at every step), bu [B, L, P],
  complex.

  'associative': jax.lax.associative_scan of `combine` (O(log L) depth); 'sequential': one
  jax.lax.scan step per position (the reference recurrence); 'chunked': sequential within
  chunks of `chunk` positions, all chunks at once, then across them (chunked_scan). Every
  method has the recurrence's own backward pass (recurrence_backward). The layers call
  `recurrence` on their time-major stacked states directly."""
  xs = recurrence(stacked(a), stacked(jnp.swapaxes(bu, 0, 1)), reverse, method, chunk)
  return jnp.swapaxes(unstacked(xs), 0, 1)


def project_input(u, b_bar):
  """B_bar u_k for every k, stacked: u [..., H] float32, b_bar [P, H] complex -> [..., 2P]
  (one matmul; its kernel gradient one 2-D dot over the rows, linear.project)."""
  return project(u, stacked(b_bar.T))


def read_out(xs, c_tilde):
  """Re(C~ x_k) = Re(C~) Re(x_k) - Im(C~) Im(x_k) [..., H] float32: xs [..., 2P] stacked,
  c_tilde [H, P] complex (one matmul, linear.project)."""
  return project(xs, stacked(c_tilde.conj()).T)


def apply_ssm(lambda_bar, b_bar, c_tilde, u, *, conj_sym: bool, method: str = 'associative',
              chunk: int = DEFAULT_CHUNK):
  """y [B, L, H] = Re(C~ x) (x2 with conjugate symmetry) of the discretised SSM on u [B, L, H]
  (float32). c_tilde [C, H, P]: C = 1 causal, C = 2 bidirectional (the second C~ reads the
  backward scan, x_k = Lambda_bar x_{k+1} + B_bar u_k). The states are time-major and stacked
  ([L, B, 2P] real); only the real [B, L, H] input and output are transposed."""
  bu = project_input(jnp.swapaxes(u, 0, 1), b_bar)
  scan = lambda reverse: recurrence(stacked(lambda_bar), bu, reverse, method, chunk)
  y = read_out(scan(False), c_tilde[0])
  if c_tilde.shape[0] == 2:
    y = y + read_out(scan(True), c_tilde[1])
  y = jnp.swapaxes(y, 0, 1)
  return 2.0 * y if conj_sym else y


# ----------------------------------------------------------------------------------------------
# The layer (the authors' S5SSM) and the block (their SequenceLayer).
# ----------------------------------------------------------------------------------------------
class S5SSM(nnx.Module):
  """The S5 SSM of every feature at once: u [B, L, H] -> y [B, L, H] float32 (complex64 state)."""

  def __init__(self, dim: int, *, state_dim: int, blocks: int, c_init: str, discretization: str,
               conj_sym: bool, clip_eigs: bool, bidirectional: bool, dt_min: float,
               dt_max: float, rngs: nnx.Rngs, scan: str = 'associative',
               chunk: int = DEFAULT_CHUNK):
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
    self.discretization, self.conj_sym, self.clip_eigs, self.scan, self.chunk = (
        discretization, conj_sym, clip_eigs, scan, chunk)

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
                  conj_sym=self.conj_sym, method=self.scan, chunk=self.chunk)
    return y + u * self.d[...]


def causal_options(options: dict, cfg) -> dict:
  """`options` with no backward scan under a causal encoder (ModelConfig.causal): the forward
  recurrence x_k = Lambda_bar x_{k-1} + B_bar u_k alone reads positions <= k (Sec. 2), whatever
  the `bidirectional` option says; the rest of the block is per position."""
  return {**options, 'bidirectional': options['bidirectional'] and not cfg.causal}


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
  dt_min, dt_max, activation, prenorm, scan ('sequential', the fastest on a CPU, |
  'associative' | 'chunked'), chunk (positions per chunk of the chunked scan). With cfg.causal
  the block is unidirectional whatever `bidirectional` says (causal_options).
  """

  DEFAULTS = {'state_dim': 256, 'blocks': 8, 'c_init': 'trunc_standard_normal',
              'discretization': 'zoh', 'conj_sym': True, 'clip_eigs': False,
              'bidirectional': True, 'dt_min': 1e-3, 'dt_max': 1e-1, 'activation': 'half_glu1',
              'prenorm': True, 'scan': 'sequential', 'chunk': DEFAULT_CHUNK}
  CONFIG_OPTIONS = tuple(DEFAULTS)

  def __init__(self, cfg, rngs: nnx.Rngs):
    options = causal_options({**self.DEFAULTS, **dict(cfg.attention_options)}, cfg)
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
                    prenorm: bool = True, scan: str = 'sequential',
                    chunk: int = DEFAULT_CHUNK) -> None:
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
    check_chunk('S5Block', chunk)
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
