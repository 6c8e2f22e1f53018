"""Reformer's LSH attention (Kitaev et al. 2020, arXiv:2001.04451, §2-3), the LRA baseline.

Shared-QK attention restricted by angular locality-sensitive hashing: each round hashes the
queries into buckets, sorts the positions by bucket, cuts the sorted sequence into chunks and lets
every chunk attend to itself and to the chunk before it; rounds are combined by their
log-normalisers (paper §2, "Multi-round LSH attention"). See `ReformerAttention`.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.attention.base import (MASKED_SCORE, RandomFeatures, check_option, einsum32,
                                            fill_to, is_count, merge_heads, projection,
                                            split_heads)
from lra_luna.models.attention.rotary import apply_rotary
from lra_luna.models.nn.dropout import Dropout

# Paper §2 ("Causal masking for shared-QK attention"): a token's score with itself is lowered by
# 1e5, so it attends to itself only when no other key is available.
SELF_PENALTY = 1e5


def angular_buckets(vectors: jax.Array, rotations: jax.Array) -> jax.Array:
  """Angular LSH (paper §2, after Andoni et al. 2015): h(x) = argmax([xR; -xR]).

  vectors [..., n, d], rotations [rounds, d, B/2] (one random matrix per hash round) ->
  bucket ids [..., rounds, n] int32 in [0, B). Computed in float32. Scale invariant
  (h(a x) = h(x) for a > 0) and h(-x) = (h(x) + B/2) mod B.
  """
  rotated = jnp.einsum('...nd,rdk->...rnk', vectors.astype(jnp.float32), rotations)
  return jnp.argmax(jnp.concatenate([rotated, -rotated], axis=-1), axis=-1).astype(jnp.int32)


def chunk_layout(n: int, num_buckets: int, chunk_length: int) -> tuple[int, int]:
  """(padded length N, chunk length c) of a length-n sequence; N is a multiple of c.

  chunk_length 0 (LRA's layout): N = n rounded up to a multiple of num_buckets, c = N / B, so each
  round has B chunks whatever n is. chunk_length m > 0 (the paper's): c = min(m, n), N = n rounded
  up to a multiple of c. Chunks never straddle two hash rounds because N is a multiple of c.
  """
  if chunk_length == 0:
    padded = -(-n // num_buckets) * num_buckets
    return padded, padded // num_buckets
  chunk = min(chunk_length, n)
  return -(-n // chunk) * chunk, chunk


class ReformerAttention(nnx.Module):
  """LSH self-attention of the Reformer (Kitaev et al. 2020, §2 and §3, "shared-QK").

  Per head: queries q_i = x_i W_q, values v_i = x_i W_v; the keys are the queries (shared-QK),
  or k_j = q_j / |q_j| with `normalize_keys` (paper §2). For each of `num_hashes` rounds r a
  bucket h_r(q_i) = argmax([q_i R_r; -q_i R_r]) over `num_buckets` buckets (`angular_buckets`),
  R_r [d, B/2] ~ N(0, 1) drawn at construction from the params stream, kept as a
  `RandomFeatures` variable and shared by the heads (as LRA). Padded positions (mask False) and
  the internal filler get bucket B, past every real bucket, so they sort behind every real token
  and cannot move a real token's chunk.

  Each round stably sorts the positions by (bucket, position); the rounds' sorted sequences are
  concatenated and cut into chunks of c (`chunk_layout`: N / B with `chunk_length` 0, LRA's
  layout; `chunk_length` otherwise, the paper's). Chunk t attends to chunks t and t - 1
  (cyclically over all rounds' chunks, as LRA and the paper) with softmax(q_i . k_j / sqrt(d))
  over the real keys of that pair; a position seen twice in one pair (possible only where the
  pair spans two rounds) is counted once, and a lone chunk is not paired with itself. With
  `mask_self` the key j = i is lowered by 1e5 (paper: attend to yourself only if nothing else is
  available).
  The sort is undone and the rounds are combined as y_i = sum_r softmax_r(L_r(i)) o_r(i), L_r
  the round's log-normaliser (paper §2, multi-round LSH attention; a key seen by several rounds
  is not down-weighted by its count, as LRA). Heads are merged and projected by W_o.

  Cost per head: h N 2c scores ([chunks, c, 2c], never an [n, n] array), i.e. O(h n^2 / B) with
  LRA's layout (quadratic: c = N / B grows with n) and O(h n m) with a fixed chunk length m, plus
  an O(h n log n) sort. `attention_dropout` drops the chunk attention probabilities (LRA's
  Reformer had no attention dropout). A sequence shorter than `max_length` is filled with masked
  filler up to it first: the chunks (N / B) and the cyclic look-back of the first chunk depend on
  the padded length, so every input is computed at one length and a real row's output does not
  depend on how far its batch was padded (nor on the pad values).
  Config options (CONFIG_OPTIONS): num_hashes, num_buckets, chunk_length, normalize_keys,
  mask_self. `rotary` (config.model.positions): the shared q = k rotated at its positions
  (RoFormer eq. 34) before hashing, so the buckets group the vectors that are scored.
  """

  CONFIG_OPTIONS = ('num_hashes', 'num_buckets', 'chunk_length', 'normalize_keys', 'mask_self')

  @classmethod
  def check_options(cls, max_length: int, num_hashes: int = 1, num_buckets: int = 10,
                    chunk_length: int = 0, normalize_keys: bool = False,
                    mask_self: bool = False) -> None:
    """ValueError in one line for an option value outside its valid range."""
    del max_length  # Any chunk length works at any n (a chunk never exceeds n).
    name = cls.__name__
    check_option(name, 'num_hashes', num_hashes, is_count(num_hashes), 'an integer >= 1')
    check_option(name, 'num_buckets', num_buckets,
                 is_count(num_buckets, 2) and num_buckets % 2 == 0, 'an even integer >= 2')
    check_option(name, 'chunk_length', chunk_length, is_count(chunk_length, 0),
                 "an integer >= 0 (0: LRA's N / num_buckets)")
    for option, value in (('normalize_keys', normalize_keys), ('mask_self', mask_self)):
      check_option(name, option, value, isinstance(value, bool), 'True or False')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               num_hashes: int = 1, num_buckets: int = 10, chunk_length: int = 0,
               normalize_keys: bool = False, mask_self: bool = False, rotary: bool = False):
    self.check_options(max_length, num_hashes, num_buckets, chunk_length, normalize_keys,
                       mask_self)
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    self.num_heads = num_heads
    self.head_dim = dim // num_heads
    self.max_length = max_length
    self.num_hashes = num_hashes
    self.num_buckets = num_buckets
    self.chunk_length = chunk_length
    self.normalize_keys = normalize_keys
    self.mask_self = mask_self
    self.rotary = rotary
    # Shared-QK: no key projection.
    self.query = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.value = projection(dim, init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)
    self.rotations = RandomFeatures(jax.random.normal(
        rngs.params(), (num_hashes, self.head_dim, num_buckets // 2), jnp.float32))
    self.dropout = Dropout(attention_dropout)

  def buckets(self, q: jax.Array, mask: jax.Array) -> jax.Array:
    """Bucket ids [B, H, rounds, n] of queries q [B, H, n, d]: angular LSH, and num_buckets (past
    every real bucket) where mask [B, n] is False."""
    ids = angular_buckets(q, self.rotations[...])
    return jnp.where(mask[:, None, None, :], ids, self.num_buckets)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    n = x.shape[1]
    x, mask = fill_to(x, mask, self.max_length)
    return self.attend(x, mask, deterministic=deterministic, rngs=rngs)[:, :n]

  def attend(self, x, mask, *, deterministic: bool, rngs: nnx.Rngs | None):
    """The attention at x's own length (no fill to max_length)."""
    b, n, _ = x.shape
    heads, rounds = self.num_heads, self.num_hashes
    padded, chunk = chunk_layout(n, self.num_buckets, self.chunk_length)
    pad = padded - n
    q = split_heads(self.query(x), heads)
    if self.rotary:  # before hashing: the buckets group the rotated vectors that are scored
      q = apply_rotary(q, jnp.arange(n))
    v = split_heads(self.value(x), heads)
    q, v = (jnp.pad(t, ((0, 0), (0, 0), (0, pad), (0, 0))) for t in (q, v))
    mask = jnp.pad(mask, ((0, 0), (0, pad)), constant_values=False)  # filler: never real
    if self.normalize_keys:
      norm = jnp.linalg.norm(q.astype(jnp.float32), axis=-1, keepdims=True)
      k = q / jnp.maximum(norm, 1e-6).astype(q.dtype)
    else:
      k = q

    # Sort each round by (bucket, position): a stable sort on the bucket id.
    order = jnp.argsort(self.buckets(q, mask), axis=-1, stable=True)  # [B, H, rounds, N]
    order = order.reshape(b, heads, rounds * padded)  # the rounds one after another
    num_chunks = rounds * padded // chunk

    def to_chunks(t):  # [B, H, N, ...] gathered in sorted order -> [B, H, chunks, c, ...]
      index = order.reshape(order.shape + (1,) * (t.ndim - 3))
      t = jnp.take_along_axis(t, index, axis=2)
      return t.reshape(b, heads, num_chunks, chunk, *t.shape[3:])

    q_chunks = to_chunks(q) * jnp.asarray(self.head_dim**-0.5, q.dtype)
    k_chunks, v_chunks = to_chunks(k), to_chunks(v)
    positions = order.reshape(b, heads, num_chunks, chunk)
    real = to_chunks(jnp.broadcast_to(mask[:, None, :], (b, heads, padded)))

    key_positions, key_real = positions, real
    if num_chunks > 1:  # with one chunk, "the previous chunk" is the chunk itself
      previous = lambda t: jnp.roll(t, 1, axis=2)
      # A position already in the current chunk (same token from another round) counts once.
      seen = jnp.any(previous(positions)[..., :, None] == positions[..., None, :], axis=-1)
      key_positions = jnp.concatenate([positions, previous(positions)], axis=3)
      key_real = jnp.concatenate([real, previous(real) & ~seen], axis=3)
      k_chunks = jnp.concatenate([k_chunks, previous(k_chunks)], axis=3)
      v_chunks = jnp.concatenate([v_chunks, previous(v_chunks)], axis=3)

    scores = einsum32('bhtid,bhtjd->bhtij', q_chunks, k_chunks)
    if self.mask_self:
      is_self = positions[..., :, None] == key_positions[..., None, :]
      scores = jnp.where(is_self, scores - SELF_PENALTY, scores)
    scores = jnp.where(key_real[..., None, :], scores, MASKED_SCORE)
    log_normaliser = jax.nn.logsumexp(scores, axis=-1)  # [B, H, chunks, c]
    probs = jax.nn.softmax(scores, axis=-1)
    probs = self.dropout(probs, deterministic=deterministic, rngs=rngs)
    y = einsum32('bhtij,bhtjd->bhtid', probs.astype(v.dtype), v_chunks).astype(v.dtype)

    y = self.combine_rounds(y, log_normaliser, order, padded)
    return self.out(merge_heads(y[:, :, :n]))

  def combine_rounds(self, y, log_normaliser, order, padded: int):
    """Each position's output [B, H, N, d] from its sorted chunk outputs y [B, H, chunks, c, d]:
    the sort undone (the item of sorted slot s of round r is position order[r, s]), and the
    rounds averaged with weights softmax over rounds of their log-normalisers (Reformer §2.2)."""
    b, heads = y.shape[:2]
    rounds = self.num_hashes
    y = y.reshape(b, heads, rounds, padded, self.head_dim)
    log_normaliser = log_normaliser.reshape(b, heads, rounds, padded)
    unsort = jnp.argsort(order.reshape(b, heads, rounds, padded), axis=-1)
    y = jnp.take_along_axis(y, unsort[..., None], axis=3)
    if rounds == 1:
      return y[:, :, 0]
    log_normaliser = jnp.take_along_axis(log_normaliser, unsort, axis=3)
    weights = jax.nn.softmax(log_normaliser, axis=2)  # over rounds
    return jnp.sum(weights[..., None] * y.astype(jnp.float32), axis=2).astype(y.dtype)
