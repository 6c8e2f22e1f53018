"""LRU: the Linear Recurrent Unit of Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu and De
(2023), "Resurrecting Recurrent Neural Networks for Long Sequences" (ICML 2023, arXiv
2303.06349), as an encoder block.

A diagonal complex linear recurrence of N modes over H features (the paper's Sec. 3, its
Appendix A code):
  x_k = Lambda x_{k-1} + gamma * (B u_k),   y_k = Re(C x_k) + D u_k
with the exponential parameterisation (Sec. 3) Lambda_j = exp(-exp(nu_log_j) + i exp(theta_log_j))
(|Lambda_j| < 1 for any parameters) and the normalisation (Sec. 3) gamma_j = exp(gamma_log_j),
initialised to sqrt(1 - |Lambda_j|^2). Ring initialisation (Sec. 3): Lambda uniform on
the ring r_min <= |Lambda| <= r_max with phases in [0, max_phase]:
  nu_log = log(-log(u1 (r_max^2 - r_min^2) + r_min^2) / 2),  theta_log = log(max_phase u2),
u1, u2 ~ U[0, 1]. B, C complex Glorot (B's parts N(0, 1/(2H)), C's N(0, 1/N)), D ~ N(0, 1).
The recurrence is S5's (`s5.apply_ssm`, `s5.recurrence`): by default a sequential
jax.lax.scan, on a 2-core CPU faster at 60 tokens and at 4K than jax.lax.associative_scan
(option scan='associative') and than the chunked scan (scan='chunked', chunk T), docs/s5_lru.md.
Bidirectional (classification): a second scan backwards through the same Lambda and gamma B,
read out by a second C. The parameters of SSM_PARAMETERS (nu, theta, gamma and B) train at
config.ssm_learning_rate without weight decay (as S5's, and the unofficial minimal-LRU
code's optimizer groups).

The block (the paper's Fig. 1): z = Norm(x) (pre-norm) or x; y = Drop(W1 g * sigmoid(W2 g)),
g = Drop(GELU(LRU(z))) (S5Block's 'full_glu'); x + y, then the norm (post-norm).
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.blocks import s5

# Parameter names that get config.ssm_learning_rate and no weight decay (training/steps.py).
SSM_PARAMETERS = ('nu_log', 'theta_log', 'gamma_log', 'input_matrix')


def ring_init(key, size: int, r_min: float, r_max: float, max_phase: float):
  """(nu_log, theta_log) [N]: Lambda uniform on the ring r_min <= |Lambda| <= r_max (uniform in
  area: |Lambda|^2 ~ U[r_min^2, r_max^2]) with phase ~ U[0, max_phase] (Sec. 3)."""
  u1, u2 = jax.random.uniform(key, (2, size))
  nu_log = jnp.log(-0.5 * jnp.log(u1 * (r_max**2 - r_min**2) + r_min**2))
  return nu_log, jnp.log(max_phase * u2)


def eigenvalues(nu_log, theta_log):
  """Lambda = exp(-exp(nu_log) + i exp(theta_log)) (Sec. 3), complex64."""
  return jnp.exp(jax.lax.complex(-jnp.exp(nu_log), jnp.exp(theta_log)))


def initial_gamma_log(nu_log, theta_log):
  """log gamma = log sqrt(1 - |Lambda|^2) (Sec. 3): a unit-variance input keeps a unit-variance
  state."""
  return jnp.log(jnp.sqrt(1.0 - jnp.abs(eigenvalues(nu_log, theta_log))**2))


def complex_normal(key, shape, variance_per_part: float):
  """[..., 2] real and imaginary parts, each N(0, variance_per_part)."""
  return jax.random.normal(key, (*shape, 2)) * math.sqrt(variance_per_part)


class LRU(nnx.Module):
  """The LRU of every feature: u [B, L, H] -> y [B, L, H] float32 (complex64 state)."""

  def __init__(self, dim: int, *, state_dim: int, r_min: float, r_max: float, max_phase: float,
               bidirectional: bool, rngs: nnx.Rngs, scan: str = 'associative',
               chunk: int = s5.DEFAULT_CHUNK):
    ring_key, b_key, c_key, d_key = jax.random.split(rngs.params(), 4)
    nu_log, theta_log = ring_init(ring_key, state_dim, r_min, r_max, max_phase)
    self.nu_log, self.theta_log = nnx.Param(nu_log), nnx.Param(theta_log)
    self.gamma_log = nnx.Param(initial_gamma_log(nu_log, theta_log))
    self.input_matrix = nnx.Param(complex_normal(b_key, (state_dim, dim), 0.5 / dim))
    channels = 2 if bidirectional else 1
    self.output_matrix = nnx.Param(complex_normal(c_key, (channels, dim, state_dim),
                                                  1.0 / state_dim))
    self.d = nnx.Param(jax.random.normal(d_key, (dim,)))
    self.scan, self.chunk = scan, chunk

  def __call__(self, u):
    u = u.astype(jnp.float32)
    b, c = self.input_matrix[...], self.output_matrix[...]
    b = jax.lax.complex(b[..., 0], b[..., 1]) * jnp.exp(self.gamma_log[...])[:, None]
    y = s5.apply_ssm(eigenvalues(self.nu_log[...], self.theta_log[...]), b,
                     jax.lax.complex(c[..., 0], c[..., 1]), u, conj_sym=False, method=self.scan,
                     chunk=self.chunk)
    return y + u * self.d[...]


class LRUBlock(s5.S5Block):
  """The paper's residual block around the LRU (module docstring; S5Block's call).

  The block protocol of classifier.BlockEncoder. Options (config.model.attention_options,
  DEFAULTS): state_dim N, r_min, r_max, max_phase, bidirectional, activation (default
  'full_glu', the paper's GLU), prenorm, scan ('sequential', the fastest on a CPU,
  'associative' or 'chunked', docs/s5_lru.md), chunk (positions per chunk of 'chunked').
  With cfg.causal the block is unidirectional whatever `bidirectional` says.
  """

  DEFAULTS = {'state_dim': 256, 'r_min': 0.0, 'r_max': 1.0, 'max_phase': 2 * math.pi,
              'bidirectional': True, 'activation': 'full_glu', 'prenorm': True,
              'scan': 'sequential', 'chunk': s5.DEFAULT_CHUNK}
  CONFIG_OPTIONS = tuple(DEFAULTS)

  def __init__(self, cfg, rngs: nnx.Rngs):
    # A causal encoder: the forward recurrence only (s5.causal_options).
    options = s5.causal_options({**self.DEFAULTS, **dict(cfg.attention_options)}, cfg)
    self.check_options(**options)
    activation, prenorm = options.pop('activation'), options.pop('prenorm')
    self.ssm = LRU(cfg.dim, **options, rngs=rngs)
    self.build_around_ssm(cfg, activation, prenorm, rngs)

  @staticmethod
  def check_options(*, max_length: int = 0, state_dim: int = 256, r_min: float = 0.0,
                    r_max: float = 1.0, max_phase: float = 2 * math.pi,
                    bidirectional: bool = True, activation: str = 'full_glu',
                    prenorm: bool = True, scan: str = 'sequential',
                    chunk: int = s5.DEFAULT_CHUNK) -> None:
    """ValueError naming the first option outside its valid range."""
    del max_length, bidirectional, prenorm
    if not (isinstance(state_dim, int) and state_dim >= 1):
      raise ValueError(f'LRUBlock option state_dim = {state_dim} is not valid: an integer >= 1.')
    if not 0.0 <= r_min < r_max <= 1.0:
      raise ValueError(f'LRUBlock options r_min = {r_min}, r_max = {r_max} are not valid: need '
                       '0 <= r_min < r_max <= 1 (a stable ring).')
    if not max_phase > 0:
      raise ValueError(f'LRUBlock option max_phase = {max_phase} is not valid: need > 0.')
    for name, value, choices in (('activation', activation, s5.ACTIVATIONS),
                                 ('scan', scan, s5.SCANS)):
      if value not in choices:
        raise ValueError(f'LRUBlock option {name} = {value!r} is not valid; valid choices: '
                         f'{list(choices)}.')
    s5.check_chunk('LRUBlock', chunk)
