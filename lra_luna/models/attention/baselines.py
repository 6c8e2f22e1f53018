"""Efficient-attention baselines of LRA: Linformer, Performer, Linear Transformer, local attention.

Each module drops into the same encoder block as `softmax.SoftmaxAttention`: constructor
`(dim, num_heads, *, attention_dropout, max_length, init, dtype, rngs, <own options>)` and call
`module(x, mask, *, deterministic=True, rngs=None) -> y`, x [B, n, D], mask [B, n] (True = real
token), y [B, n, D]. Each class lists in `CONFIG_OPTIONS` the constructor options a config sets,
and `check_options(max_length, **options)` refuses an impossible value in one line (the config
check calls it before any data is read). The models are registered in lra_luna/registry.py.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.base import (QKVOutAttention, RandomFeatures, check_option, einsum32,
                                            is_count, merge_heads, projection_init,
                                            scaled_dot_product)
from lra_luna.models.attention.rotary import apply_rotary, rotary_linear_attention
from lra_luna.models.nn.dropout import Dropout

# ----------------------------------------------------------------------------------------------
# Linformer


class LinformerAttention(QKVOutAttention):
  """Linformer attention (Wang et al. 2020, eq. 7): softmax(Q (E K)^T / sqrt(d)) (F V).

  E and F are learnable [projected_length, max_length] matrices that project keys and values
  along the length; one each for K and V, shared across heads (the paper's headwise sharing).
  A sequence of n < max_length uses their first n columns. Padded key/value rows are zeroed
  before the projection, so padding contributes nothing.
  Config options (CONFIG_OPTIONS): projected_length.
  """

  CONFIG_OPTIONS = ('projected_length',)

  @classmethod
  def check_options(cls, max_length: int, projected_length: int = 256) -> None:
    check_option(cls.__name__, 'projected_length', projected_length, is_count(projected_length),
                 'an integer >= 1')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               projected_length: int = 256):
    self.check_options(max_length, projected_length)
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs)
    self.max_length = max_length
    self.projected_length = projected_length
    length_init = projection_init(init, 'qkv')
    self.key_length_proj = nnx.Param(length_init(rngs.params(), (projected_length, max_length)))
    self.value_length_proj = nnx.Param(length_init(rngs.params(), (projected_length, max_length)))
    self.dropout = Dropout(attention_dropout)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    n = x.shape[1]
    if n > self.max_length:
      raise ValueError(f'LinformerAttention got a sequence of length {n} > max_length '
                       f'{self.max_length}; raise `max_length` to at least {n}.')
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    # Zeroed padded rows drop out of the length projection entirely.
    real = mask[:, None, :, None]
    k = jnp.where(real, k, 0)
    v = jnp.where(real, v, 0)
    e = self.key_length_proj[...][:, :n].astype(k.dtype)
    f = self.value_length_proj[...][:, :n].astype(v.dtype)
    k = einsum32('kn,bhnd->bhkd', e, k).astype(k.dtype)
    v = einsum32('kn,bhnd->bhkd', f, v).astype(v.dtype)
    # The projected_length slots are all real: no key mask.
    y = scaled_dot_product(q, k, v, None, self.dropout, deterministic=deterministic, rngs=rngs)
    return self.out(merge_heads(y))


# ----------------------------------------------------------------------------------------------
# Performer (FAVOR+)


def orthogonal_gaussian_features(key: jax.Array, num_features: int, dim: int) -> jax.Array:
  """[num_features, dim] orthogonal random features (Choromanski et al. 2020, §2.4, ORF).

  Blocks of `dim` exactly orthogonal rows (QR of a Gaussian matrix, signs fixed by diag(R) so
  each block is Haar-distributed), rows rescaled by chi(dim)-distributed norms so each row has
  the marginal of an N(0, I_dim) vector, as the unbiased estimator requires.
  """
  num_blocks = -(-num_features // dim)
  block_key, norm_key = jax.random.split(key)
  gaussian = jax.random.normal(block_key, (num_blocks, dim, dim), jnp.float32)
  q, r = jnp.linalg.qr(gaussian)
  q = q * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[:, None, :]
  directions = jnp.swapaxes(q, -1, -2).reshape(num_blocks * dim, dim)[:num_features]
  norms = jnp.linalg.norm(jax.random.normal(norm_key, (num_features, dim), jnp.float32), axis=-1)
  return directions * norms[:, None]


def positive_softmax_features(x: jax.Array, features: jax.Array, *, is_query: bool,
                              key_mask: jax.Array | None = None,
                              stabilizer: float = 1e-6) -> jax.Array:
  """FAVOR+ positive random features, Choromanski et al. 2020 §2.3, Lemma 1.

  phi(x) = exp(w_i . x - |x|^2 / 2) / sqrt(m), in float32; x [B, h, n, d] already scaled by
  d^-1/4, features [m, d]. For stability the max log-feature is subtracted before exp (the
  paper's implementation practice): per query row (cancels in that row's normalisation) and per
  (batch, head) over all real keys (one shared constant, cancels across keys). Padded keys
  (key_mask False) get zero features. `stabilizer` keeps features strictly positive.
  """
  x = x.astype(jnp.float32)
  log_features = (jnp.einsum('bhnd,md->bhnm', x, features)
                  - 0.5 * jnp.sum(x * x, axis=-1, keepdims=True))
  if is_query:
    shift = jnp.max(log_features, axis=-1, keepdims=True)
  else:
    real = True if key_mask is None else key_mask[:, None, :, None]
    # Max over real keys only, so padded token vectors cannot move the shift.
    shift = jnp.max(log_features, axis=(-2, -1), keepdims=True, where=real,
                    initial=-jnp.inf)
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
  shift = jax.lax.stop_gradient(shift)
  phi = (jnp.exp(log_features - shift) + stabilizer) / math.sqrt(features.shape[0])
  if not is_query and key_mask is not None:
    phi = jnp.where(key_mask[:, None, :, None], phi, 0.0)
  return phi


def _linear_attention_from_features(q_features, k_features, v):
  """phi(Q) (phi(K)^T V) row-normalised by phi(Q) . sum_j phi(K_j); float32, fully masked -> 0."""
  kv = jnp.einsum('bhnm,bhnd->bhmd', k_features, v.astype(jnp.float32))
  numerator = jnp.einsum('bhnm,bhmd->bhnd', q_features, kv)
  denominator = jnp.einsum('bhnm,bhm->bhn', q_features, jnp.sum(k_features, axis=2))
  return numerator, denominator[..., None]


class PerformerAttention(QKVOutAttention):
  """Performer attention with FAVOR+ (Choromanski et al. 2020, §2.2-2.4).

  softmax(Q K^T / sqrt(d)) V ~ D^-1 (phi(Q') (phi(K')^T V)), Q' = Q / d^1/4, K' = K / d^1/4, with
  positive orthogonal random features phi (`positive_softmax_features`), one [num_features, d]
  matrix shared across heads. The features are a `RandomFeatures` variable (not an
  `nnx.Param`), drawn at init from the rngs' 'features' stream if it has one, else `params`.
  With `redraw_features=True` and deterministic=False, each call draws fresh features from the
  call's rngs ('features' stream if present, else `dropout`) and uses them for that call only:
  the stored features are not overwritten, so evaluation always uses the init draw.
  `attention_dropout` is accepted for the shared signature but unused: the linear form never
  builds the attention matrix it would drop from. `max_length` is unused.
  Config options (CONFIG_OPTIONS): num_features, redraw_features.
  """

  CONFIG_OPTIONS = ('num_features', 'redraw_features')

  @classmethod
  def check_options(cls, max_length: int, num_features: int = 256,
                    redraw_features: bool = False) -> None:
    check_option(cls.__name__, 'num_features', num_features, is_count(num_features),
                 'an integer >= 1')
    check_option(cls.__name__, 'redraw_features', redraw_features,
                 isinstance(redraw_features, bool), 'True or False')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               num_features: int = 256, redraw_features: bool = False, rotary: bool = False):
    self.check_options(max_length, num_features, redraw_features)
    del attention_dropout, max_length  # Unused; see the docstring.
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.num_features = num_features
    self.redraw_features = redraw_features
    key = rngs.features() if 'features' in rngs else rngs.params()
    self.features = RandomFeatures(
        orthogonal_gaussian_features(key, num_features, self.head_dim))

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    if self.redraw_features and not deterministic:
      if rngs is None:
        raise ValueError('PerformerAttention(redraw_features=True) needs `rngs` when '
                         'deterministic=False, to draw fresh features.')
      key = rngs.features() if 'features' in rngs else rngs.dropout()
      features = orthogonal_gaussian_features(key, self.num_features, self.head_dim)
    else:
      features = self.features[...]
    q, k, v = self._projected_heads(x)
    # d^-1/4 on both sides gives exp(q . k / sqrt(d)), the softmax kernel of scaled attention.
    scale = self.head_dim**-0.25
    q_features = positive_softmax_features(q * scale, features, is_query=True)
    k_features = positive_softmax_features(k * scale, features, is_query=False, key_mask=mask)
    features_attention = (rotary_linear_attention if self.rotary
                          else _linear_attention_from_features)
    numerator, denominator = features_attention(q_features, k_features, v)
    # Denominator is 0 only when every key is padding; output 0 there instead of NaN.
    y = numerator / jnp.where(denominator > 0, denominator, 1.0)
    return self.out(merge_heads(y.astype(v.dtype)))


# ----------------------------------------------------------------------------------------------
# Linear Transformer


def elu_feature_map(x: jax.Array) -> jax.Array:
  """phi(x) = elu(x) + 1 (Katharopoulos et al. 2020, eq. 7), in float32."""
  return jax.nn.elu(x.astype(jnp.float32)) + 1.0


CAUSAL_CHUNK = 64  # positions per chunk of the causal Linear Transformer (see below)


def causal_linear_attention_from_features(q_features, k_features, v, *, rotary: bool = False,
                                          chunk: int = CAUSAL_CHUNK):
  """Katharopoulos et al. 2020, eq. 9 (causal masking, §3.3): numerator phi(q_i)^T S_i with
  S_i = sum_{j<=i} phi(k_j) v_j^T, denominator phi(q_i)^T z_i with z_i = sum_{j<=i} phi(k_j).
  `rotary`: phi(q_i), phi(k_j) rotated at their positions in the numerator only (RoFormer eq. 19,
  as rotary_linear_attention).

  Computed by chunks of `chunk` positions: within a chunk the masked quadratic form
  (phi(q_i) . phi(k_j) for the chunk's j <= i), across chunks the sums S and z of the earlier
  chunks. The same sums as prefix sums along the length, without keeping S_i at every position
  ([B, h, n, m, d]: at MQAR's 64 tokens the prefix-sum step was the slowest of any model): the
  states are [B, h, n / chunk, m, d], the scores [B, h, n, chunk].

  q_features, k_features [B, h, n, m] (padded keys already 0), v [B, h, n, d]; float32. Returns
  (numerator [B, h, n, d], denominator [B, h, n, 1]); the caller divides."""
  q_numerator, k_numerator = q_features, k_features
  if rotary:
    positions = jnp.arange(q_features.shape[-2])
    q_numerator = apply_rotary(q_features, positions)
    k_numerator = apply_rotary(k_features, positions)
  batch, heads, length, _ = q_features.shape
  size = min(chunk, length)
  padding = -length % size  # zero rows at the end: a zero key adds nothing to any sum

  def chunked(x):  # [B, h, n, f] -> [B, h, n / size, size, f]
    x = jnp.pad(x.astype(jnp.float32), ((0, 0), (0, 0), (0, padding), (0, 0)))
    return x.reshape(batch, heads, -1, size, x.shape[-1])

  q_num, k_num, q_den, k_den, values = map(
      chunked, (q_numerator, k_numerator, q_features, k_features, v))
  causal = jnp.tril(jnp.ones((size, size), bool))
  scores = jnp.where(causal, jnp.einsum('bhcim,bhcjm->bhcij', q_num, k_num), 0.0)
  norms = jnp.where(causal, jnp.einsum('bhcim,bhcjm->bhcij', q_den, k_den), 0.0)

  def earlier(x):  # the sum over the chunks before each chunk (axis 2), 0 for the first
    return jnp.cumsum(jnp.pad(x, ((0, 0), (0, 0), (1, 0)) + ((0, 0),) * (x.ndim - 3))[:, :, :-1],
                      axis=2)

  states = earlier(jnp.einsum('bhcjm,bhcjd->bhcmd', k_num, values))  # S before the chunk
  sums = earlier(jnp.sum(k_den, axis=3))                              # z before the chunk
  numerator = (jnp.einsum('bhcij,bhcjd->bhcid', scores, values)
               + jnp.einsum('bhcim,bhcmd->bhcid', q_num, states))
  denominator = jnp.sum(norms, axis=-1) + jnp.einsum('bhcim,bhcm->bhci', q_den, sums)
  numerator = numerator.reshape(batch, heads, -1, v.shape[-1])[:, :, :length]
  denominator = denominator.reshape(batch, heads, -1)[:, :, :length]
  return numerator, denominator[..., None]


def linear_attention(q, k, v, key_mask, *, eps: float = 1e-6, rotary: bool = False,
                     causal: bool = False) -> jax.Array:
  """Katharopoulos et al. 2020, §3.2, in the O(n) order: phi(q_i) (sum_j phi(k_j) v_j^T) / norm.

  q, k, v [B, h, n, d]; key_mask [B, n] (True = real) or None; padded keys get phi = 0.
  `rotary`: phi(q), phi(k) rotated at their positions in the numerator (RoFormer eq. 19).
  `causal`: row i reads the keys j <= i only (eq. 9, causal_linear_attention_from_features).
  Computed in float32, returned in v's dtype.
  """
  q_features = elu_feature_map(q)
  k_features = elu_feature_map(k)
  if key_mask is not None:
    k_features = jnp.where(key_mask[:, None, :, None], k_features, 0.0)
  if causal:
    numerator, denominator = causal_linear_attention_from_features(q_features, k_features, v,
                                                                   rotary=rotary)
  else:
    features_attention = rotary_linear_attention if rotary else _linear_attention_from_features
    numerator, denominator = features_attention(q_features, k_features, v)
  return (numerator / (denominator + eps)).astype(v.dtype)


def linear_attention_direct(q, k, v, key_mask, *, eps: float = 1e-6,
                            causal: bool = False) -> jax.Array:
  """Katharopoulos et al. 2020, eq. 2 with sim(q, k) = phi(q) . phi(k): the O(n^2) reference;
  `causal`: sim(q_i, k_j) = 0 for j > i (eq. 8's mask)."""
  similarity = jnp.einsum('bhnd,bhmd->bhnm', elu_feature_map(q), elu_feature_map(k))
  if key_mask is not None:
    similarity = jnp.where(key_mask[:, None, None, :], similarity, 0.0)
  if causal:
    similarity = jnp.tril(similarity)
  numerator = jnp.einsum('bhnm,bhmd->bhnd', similarity, v.astype(jnp.float32))
  denominator = jnp.sum(similarity, axis=-1, keepdims=True)
  return (numerator / (denominator + eps)).astype(v.dtype)


class LinearTransformerAttention(QKVOutAttention):
  """Linear Transformer attention (Katharopoulos et al. 2020, §3.2), phi(x) = elu(x) + 1 (eq. 7).

  out_i = phi(q_i) sum_j phi(k_j) v_j^T / (phi(q_i) . sum_j phi(k_j) + eps), padded keys
  excluded (`linear_attention`). `causal` (a causal encoder, ModelConfig.causal): the sums over
  j <= i only (eq. 9, by chunks). `attention_dropout` is accepted for the shared signature
  but unused (no attention matrix is formed); `max_length` is unused.
  Config options (CONFIG_OPTIONS): none.
  """

  CONFIG_OPTIONS = ()

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               eps: float = 1e-6, rotary: bool = False, causal: bool = False):
    del attention_dropout, max_length  # Unused; see the docstring.
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.eps = eps
    self.causal = causal

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    q, k, v = self._projected_heads(x)
    return self.out(merge_heads(linear_attention(q, k, v, mask, eps=self.eps,
                                                 rotary=self.rotary, causal=self.causal)))


# ----------------------------------------------------------------------------------------------
# Local (block) attention


class LocalAttention(QKVOutAttention):
  """Local attention of the LRA baselines (Tay et al. 2021): softmax attention within blocks.

  The sequence is cut into non-overlapping blocks of `block_size` (50 in LRA); each query
  attends, with softmax(q k^T / sqrt(d)), only to the real keys of its own block. The length is
  padded internally up to a multiple of the block size (those positions masked) and sliced back.
  `max_length` is unused.
  Config options (CONFIG_OPTIONS): block_size.
  """

  CONFIG_OPTIONS = ('block_size',)

  @classmethod
  def check_options(cls, max_length: int, block_size: int = 50) -> None:
    check_option(cls.__name__, 'block_size', block_size, is_count(block_size), 'an integer >= 1')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               block_size: int = 50, rotary: bool = False):
    self.check_options(max_length, block_size)
    del max_length  # Unused.
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.block_size = block_size
    self.dropout = Dropout(attention_dropout)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    b, n, _ = x.shape
    # A sequence shorter than one block is one block; no need to pad it to block_size.
    block = min(self.block_size, n)
    num_blocks = -(-n // block)
    pad = num_blocks * block - n
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    mask = jnp.pad(mask, ((0, 0), (0, pad)), constant_values=False)

    def to_blocks(t):
      # [B, H, n, d] -> [B * blocks, H, block, d]: blocks fold into the batch so the shared
      # scaled_dot_product (and its [B, k] key mask) applies unchanged.
      t = jnp.pad(t, ((0, 0), (0, 0), (0, pad), (0, 0)))
      t = t.reshape(b, self.num_heads, num_blocks, block, self.head_dim).transpose(0, 2, 1, 3, 4)
      return t.reshape(b * num_blocks, self.num_heads, block, self.head_dim)

    block_mask = mask.reshape(b * num_blocks, block)
    y = scaled_dot_product(to_blocks(q), to_blocks(k), to_blocks(v), block_mask, self.dropout,
                           deterministic=deterministic, rngs=rngs)
    y = y.reshape(b, num_blocks, self.num_heads, block, self.head_dim).transpose(0, 2, 1, 3, 4)
    y = y.reshape(b, self.num_heads, num_blocks * block, self.head_dim)[:, :, :n]
    return self.out(merge_heads(y))
