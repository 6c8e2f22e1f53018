"""Block-sparse attention baselines of LRA: BigBird (ITC) and Sparse Sinkhorn attention.

Both cut the sequence into contiguous blocks of `block_size` tokens and attend only to the blocks
their pattern names, gathered into dense [.., keys per block row, d] tensors: no [n, n] score,
mask or bias exists anywhere. A length that is not a multiple of the block is padded internally
with masked filler (never counted as a real token) and the output sliced back to n, as
`baselines.LocalAttention` does; a sequence shorter than one block is one block.

Same protocol as `baselines.py`: constructor `(dim, num_heads, *, attention_dropout, max_length,
init, dtype, rngs, <own options>)`, call `module(x, mask, *, deterministic=True, rngs=None) -> y`,
x [B, n, D] (float32 or bfloat16), mask [B, n] (True = real token), y [B, n, D]; softmax in
float32; `CONFIG_OPTIONS` lists the options a config sets and `check_options` refuses impossible
values before anything is built.
"""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.attention.base import (MASKED_SCORE, QKVOutAttention, RandomFeatures,
                                            check_option, einsum32, fill_to, is_count,
                                            merge_heads, projection_init)
from lra_luna.models.nn.dropout import Dropout


# ----------------------------------------------------------------------------------------------
# Shared helpers


def _with_defaults(cls, options: dict) -> dict:
  """options completed with the constructor's defaults; ValueError for an unknown name."""
  unknown = sorted(set(options) - set(cls.CONFIG_OPTIONS))
  if unknown:
    raise ValueError(f'{cls.__name__} has no option {unknown[0]!r}; its options: '
                     f'{", ".join(cls.CONFIG_OPTIONS)}.')
  defaults = cls.__init__.__kwdefaults__
  return {name: options.get(name, defaults[name]) for name in cls.CONFIG_OPTIONS}


def _block_layout(block_size: int, n: int) -> tuple[int, int]:
  """(block, number of blocks) for a length-n sequence: a sequence shorter than one block is
  one block (no filler needed)."""
  block = min(block_size, n)
  return block, -(-n // block)


def _to_blocks(t: jax.Array, block: int, num_blocks: int) -> jax.Array:
  """[B, H, n, d] -> [B, H, blocks, block, d], zero filler appended."""
  pad = num_blocks * block - t.shape[2]
  t = jnp.pad(t, ((0, 0), (0, 0), (0, pad), (0, 0)))
  return t.reshape(*t.shape[:2], num_blocks, block, t.shape[-1])


def _mask_to_blocks(mask: jax.Array, block: int, num_blocks: int) -> jax.Array:
  """[B, n] -> [B, blocks, block]; the filler is masked (False)."""
  pad = num_blocks * block - mask.shape[1]
  return jnp.pad(mask, ((0, 0), (0, pad)), constant_values=False).reshape(-1, num_blocks, block)


def _from_blocks(y: jax.Array, n: int) -> jax.Array:
  """[B, H, blocks, block, d] -> [B, H, n, d] (filler rows dropped)."""
  return y.reshape(*y.shape[:2], -1, y.shape[-1])[:, :, :n]


def _attend(q, k, v, key_mask, dropout: Dropout, *, deterministic, rngs,
            key_bias=None) -> jax.Array:
  """softmax(q k^T + key_bias) v with q pre-scaled: q [..., m, d], k/v [..., s, d], key_mask (and
  key_bias, float32) broadcastable to [..., m, s] (True = attend). Softmax in float32; a row with
  no key left stays finite."""
  scores = einsum32('...md,...sd->...ms', q, k)
  if key_bias is not None:
    scores = scores + key_bias
  scores = jnp.where(key_mask, scores, MASKED_SCORE)
  probs = dropout(jax.nn.softmax(scores, axis=-1), deterministic=deterministic, rngs=rngs)
  return einsum32('...ms,...sd->...md', probs.astype(v.dtype), v).astype(v.dtype)


# ----------------------------------------------------------------------------------------------
# BigBird


def _random_candidates(num_blocks: int, limit: int | None):
  """Static description of every query block's random-block candidates (numpy, per block i).

  Candidates of a middle block i (1 <= i <= nb-2): blocks 1..last minus the window {i-1, i, i+1},
  last = nb-2, or min(nb-2, limit-1) with a `limit` (blocks 0..limit-1 lie in the first
  `random_within` positions). They are two runs, 1..first-1 and first+excluded..last, so the t-th
  candidate (0-based) is 1+t if t < first-1, else 1+t+excluded. Global blocks (0, nb-1) have none.
  Returns (first, excluded, count), int arrays [nb].
  """
  rows = np.arange(num_blocks)
  last = num_blocks - 2 if limit is None else min(num_blocks - 2, limit - 1)
  first = np.maximum(rows - 1, 1)
  excluded = np.maximum(np.minimum(rows + 1, last) - first + 1, 0)
  count = np.maximum(max(last, 0) - excluded, 0)
  count = np.where((rows >= 1) & (rows <= num_blocks - 2), count, 0)
  return first, excluded, count


def random_block_table(key: jax.Array, num_heads: int, num_blocks: int, num_random: int,
                       limit: int | None) -> tuple[jax.Array, jax.Array]:
  """BigBird's random blocks R(i) (Zaheer et al. 2020, §2 "random attention", App. D blocks).

  For each head and query block i, min(num_random, #candidates(i)) distinct blocks drawn
  uniformly from i's candidates (`_random_candidates`), by Floyd's sampling algorithm: step
  j = c-m .. c-1 draws t uniform in [0, j] and keeps t, or j if t was already kept. It needs only
  m uniforms per row (no [nb, nb] score table), so it works for any nb under jit and vmap.
  key: a typed PRNG key. Returns (blocks, valid), [H, nb, slots] int32 and bool, slots =
  min(num_random, largest candidate count); invalid slots (a row with fewer candidates, global
  rows) hold block 0 and must be masked.
  """
  first, excluded, count = _random_candidates(num_blocks, limit)
  slots = min(num_random, int(count.max(initial=0)))
  if slots == 0:
    empty = jnp.zeros((num_heads, num_blocks, 0), jnp.int32)
    return empty, empty.astype(bool)
  uniforms = jax.random.uniform(key, (num_heads, num_blocks, slots))
  picks = []
  for slot in range(slots):
    top = count - slots + slot  # [nb]: this Floyd step draws from 0..top; top < 0: slot unused.
    draw = jnp.minimum(jnp.floor(uniforms[..., slot] * (top + 1)), top).astype(jnp.int32)
    taken = jnp.zeros(draw.shape, bool)
    for previous in picks:
      taken = taken | (previous == draw)
    pick = jnp.where(taken, jnp.asarray(top, jnp.int32), draw)
    picks.append(jnp.where(top >= 0, pick, -1))  # -1 never equals a later draw (>= 0).
  picks = jnp.stack(picks, axis=-1)
  valid = picks >= 0
  first, excluded = first[:, None], excluded[:, None]
  blocks = jnp.where(picks < first - 1, 1 + picks, 1 + picks + excluded)
  return jnp.where(valid, blocks, 0).astype(jnp.int32), valid


class BigBirdAttention(QKVOutAttention):
  """BigBird block-sparse attention, ITC variant (Zaheer et al. 2020, arXiv:2007.14062, §2 and
  App. D "blockified" attention; LRA's `bigbird` baseline).

  Blocks of b = `block_size` tokens, nb of them. G = {0, nb-1} are global blocks (ITC: existing
  tokens made global; [CLS] is in block 0). Query block i attends, in one softmax per row, to
  the key blocks window(i) = {i-1, i, i+1} ∪ G ∪ R(i), R(i) = `num_random_blocks` distinct
  random blocks from 1..nb-2 minus window(i) (and, with `random_within` > 0, only among blocks
  lying in the first `random_within` positions, as LRA and the BigBird code do); rows of global
  blocks attend to every key. Dense form: block mask M(i, j) = [i ∈ G or j ∈ G or |i-j| <= 1 or
  j ∈ R(i)]. nb <= 3 is full attention. R is per head, drawn from a key stored at construction
  (a `RandomFeatures` variable from the run's params stream): the same for every example, step
  and restart, rebuilt in-graph for each length (`random_blocks(n)`). A row with fewer
  candidates than `num_random_blocks` takes all of them.

  Truly sparse: the middle block rows gather their (5 + r) key blocks into
  [B, H, nb-2, (5+r) b, d] (a global block already in the window is masked so no key counts
  twice); the two global block rows attend to all n keys. Cost per row O((5 + r) b d) (global
  rows O(n d)); memory O(n b (5 + r)). Attention dropout applies to the probabilities.
  A sequence shorter than `max_length` is filled with masked filler up to it first: the last
  (global) block and the random blocks depend on the block count, so every input is computed at
  one length and a real row's output does not depend on how far its batch was padded.
  Config options (CONFIG_OPTIONS): block_size, num_random_blocks, random_within.
  """

  CONFIG_OPTIONS = ('block_size', 'num_random_blocks', 'random_within')

  @classmethod
  def check_options(cls, max_length: int, **options) -> None:
    """ValueError for an option value no sequence can use.

    Refused: block_size < 1, num_random_blocks < 0, random_within < 0, and num_random_blocks >
    random_within // block_size - 1 when random_within > 0 (only blocks 1..random_within //
    block_size - 1 can ever be random blocks, so more never fit at any length). A sequence too
    short for r random blocks (e.g. max_length below a few blocks) is allowed: its rows take
    every candidate there is, as a window wider than the sequence does.
    """
    del max_length  # Any length works; see the docstring.
    options = _with_defaults(cls, options)
    block_size = options['block_size']
    num_random = options['num_random_blocks']
    within = options['random_within']
    name = cls.__name__
    check_option(name, 'block_size', block_size, is_count(block_size), 'an integer >= 1')
    check_option(name, 'num_random_blocks', num_random, is_count(num_random, 0),
                 'an integer >= 0')
    check_option(name, 'random_within', within, is_count(within, 0),
                 'an integer >= 0 (0: random blocks from the whole sequence)')
    capacity = max(within // block_size - 1, 0)  # Blocks 1..capacity lie within the limit.
    check_option(name, 'num_random_blocks', num_random, not within or num_random <= capacity,
                 f'at most {capacity} with random_within = {within} and block_size = '
                 f'{block_size} (random blocks come from blocks 1..{capacity}, those in the '
                 f'first {within} positions); or set random_within = 0')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               block_size: int = 64, num_random_blocks: int = 3, random_within: int = 1024,
               rotary: bool = False):
    self.check_options(max_length, block_size=block_size, num_random_blocks=num_random_blocks,
                       random_within=random_within)
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.block_size = block_size
    self.max_length = max_length
    self.num_random_blocks = num_random_blocks
    self.random_within = random_within
    # A key, not a table: the table's shape depends on n, so it is rebuilt in-graph per length.
    self.random_key = RandomFeatures(jax.random.key_data(rngs.params()))
    self.dropout = Dropout(attention_dropout)

  def _random_table(self, block: int, num_blocks: int):
    limit = self.random_within // block if self.random_within else None
    key = jax.random.wrap_key_data(self.random_key[...])
    return random_block_table(key, self.num_heads, num_blocks, self.num_random_blocks, limit)

  def random_blocks(self, n: int) -> tuple[jax.Array, jax.Array]:
    """R for a length-n sequence: (blocks, valid), [H, nb, slots] (see `random_block_table`)."""
    return self._random_table(*_block_layout(self.block_size, n))

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    n = x.shape[1]
    x, mask = fill_to(x, mask, self.max_length)
    return self.attend(x, mask, deterministic=deterministic, rngs=rngs)[:, :n]

  def attend(self, x, mask, *, deterministic: bool, rngs: nnx.Rngs | None):
    """The attention at x's own length (no fill to max_length)."""
    n = x.shape[1]
    block, num_blocks = _block_layout(self.block_size, n)
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    block_mask = _mask_to_blocks(mask, block, num_blocks)  # [B, nb, b]
    q_blocks, k_blocks, v_blocks = (_to_blocks(t, block, num_blocks) for t in (q, k, v))
    attend = lambda q, k, v, key_mask: _attend(q, k, v, key_mask, self.dropout,
                                               deterministic=deterministic, rngs=rngs)

    # Global block rows: every key of the (filler-padded) sequence.
    global_blocks = [0] if num_blocks == 1 else [0, num_blocks - 1]
    batch, heads = q.shape[:2]
    global_queries = q_blocks[:, :, global_blocks].reshape(batch, heads, -1, self.head_dim)
    flat = lambda t: t.reshape(batch, heads, -1, self.head_dim)
    y_global = attend(global_queries, flat(k_blocks), flat(v_blocks),
                      block_mask.reshape(batch, 1, 1, -1))
    y_global = y_global.reshape(batch, heads, len(global_blocks), block, self.head_dim)
    if num_blocks <= 2:
      return self.out(merge_heads(_from_blocks(y_global, n)))

    # Middle block rows i = 1..nb-2: key blocks [i-1, i, i+1, 0, nb-1, R(i)...].
    middle = np.arange(1, num_blocks - 1)
    fixed = np.stack([middle - 1, middle, middle + 1, np.zeros_like(middle),
                      np.full_like(middle, num_blocks - 1)], axis=-1)
    # A global block inside the window (i = 1 or i = nb-2) is already there: mask its copy.
    fixed_valid = np.stack([np.ones_like(middle, bool)] * 3
                           + [middle - 1 > 0, middle + 1 < num_blocks - 1], axis=-1)
    random_blocks, random_valid = self._random_table(block, num_blocks)
    index = jnp.concatenate([jnp.broadcast_to(fixed, (heads, *fixed.shape)),
                             random_blocks[:, 1:-1]], axis=-1)  # [H, nb-2, S]
    slot_valid = jnp.concatenate([jnp.broadcast_to(fixed_valid, (heads, *fixed.shape)),
                                  random_valid[:, 1:-1]], axis=-1)
    head_index = jnp.arange(heads)[:, None, None]
    gather = lambda t: t[:, head_index, index].reshape(batch, heads, len(middle), -1,
                                                       self.head_dim)  # [B, H, nb-2, S b, d]
    key_mask = block_mask[:, index] & slot_valid[None, :, :, :, None]  # [B, H, nb-2, S, b]
    key_mask = key_mask.reshape(batch, heads, len(middle), 1, -1)
    y_middle = attend(q_blocks[:, :, 1:-1], gather(k_blocks), gather(v_blocks), key_mask)
    y = jnp.concatenate([y_global[:, :, :1], y_middle, y_global[:, :, 1:]], axis=2)
    return self.out(merge_heads(_from_blocks(y, n)))


# ----------------------------------------------------------------------------------------------
# Sparse Sinkhorn attention


SORT_ACTIVATIONS = ('softmax', 'sinkhorn')


def _log_normalize(log_p: jax.Array, valid: jax.Array, axis: int) -> jax.Array:
  """log_p minus its log-sum-exp along `axis` over the valid entries; -inf where not valid. An
  axis with no valid entry stays all -inf (no NaN, forward or backward)."""
  safe = jnp.where(valid, log_p, 0.0)
  shift = jnp.max(jnp.where(valid, log_p, -jnp.inf), axis=axis, keepdims=True)
  shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0.0))
  total = jnp.sum(jnp.where(valid, jnp.exp(safe - shift), 0.0), axis=axis, keepdims=True)
  log_total = shift + jnp.log(jnp.where(total > 0, total, 1.0))
  return jnp.where(valid, safe - log_total, -jnp.inf)


def sort_matrix(logits: jax.Array, block_real: jax.Array, *, activation: str = 'softmax',
                iterations: int = 1, temperature: float = 1.0) -> jax.Array:
  """The block sorting matrix P (Tay et al. 2020, §3 "learning to sort", Sinkhorn balancing).

  logits R [..., nb, nb] (row: block i, column: target block j); block_real [..., nb] whether a
  block holds any real token: only real blocks are sorted (rows and columns of the others are 0),
  so padding blocks never take sorting mass. 'softmax' (LRA): P = row softmax of R / temperature.
  'sinkhorn' (paper): S^0 = exp(R / temperature), then `iterations` times a row normalisation
  followed by a column normalisation, in log space; columns sum to 1 after every iteration and
  rows approach 1 as iterations grow. Float32.
  """
  valid = block_real[..., :, None] & block_real[..., None, :]
  log_p = logits.astype(jnp.float32) / temperature
  if activation == 'softmax':
    return jnp.exp(_log_normalize(log_p, valid, axis=-1))
  if activation != 'sinkhorn':
    raise ValueError(f'Unknown sort activation {activation!r}; valid: {SORT_ACTIVATIONS}.')
  for _ in range(iterations):
    log_p = _log_normalize(log_p, valid, axis=-1)
    log_p = _log_normalize(log_p, valid, axis=-2)
  return jnp.exp(log_p)


# Sorted slots whose real share is below this are masked: log f and the renormalisation 1 / w
# have gradients that overflow float32 as f -> 0 (a peaked P made training NaN), and a slot of a
# millionth's share adds about a millionth of its attention.
MIN_SLOT_WEIGHT = 1e-6


def sorted_block_attention(q, k, v, mask, sort, dropout: Dropout, *, deterministic,
                           rngs) -> jax.Array:
  """Sparse Sinkhorn attention given the sorting matrix (Tay et al. 2020, §3).

  q (pre-scaled), k, v [B, H, nb, b, d]; mask [B, nb, b] (True = real); sort P [B, H, nb, nb].
  Sorted block i, slot s: psi(K)_i[s] = sum_j P[i, j] m_j[s] k_j[s] / w_i[s] with
  w_i[s] = sum_j P[i, j] m_j[s] (padded positions excluded, the weights renormalised over the
  real ones), same for V. The slot's real share f_i[s] = w_i[s] / sum_j P[i, j] weights its
  attention (score + log f: a slot that is half padding counts half, one of no real mass not at
  all, so the output is continuous in P; without padding f = 1 and this is the paper's
  attention); slots with f <= MIN_SLOT_WEIGHT are masked. Each query of block i attends in ONE
  softmax to the b keys of its own block (local term) and the b slots of sorted block i.
  P = identity gives local block attention (each key twice, same softmax); P = a permutation pi
  gives block i attending to blocks i and pi(i). Memory O(n b) (plus P, nb^2).
  """
  real = mask.astype(jnp.float32)
  weight = jnp.einsum('bhij,bjs->bhis', sort, real)
  row_mass = jnp.sum(sort, axis=-1, keepdims=True)
  share = weight / jnp.where(row_mass > 0, row_mass, 1.0)
  sorted_mask = share > MIN_SLOT_WEIGHT
  inverse = 1.0 / jnp.where(sorted_mask, weight, 1.0)

  def sort_blocks(t):
    t = jnp.where(mask[:, None, :, :, None], t, 0).astype(jnp.float32)
    return (jnp.einsum('bhij,bhjsd->bhisd', sort, t) * inverse[..., None]).astype(q.dtype)

  keys = jnp.concatenate([k, sort_blocks(k)], axis=3)
  values = jnp.concatenate([v, sort_blocks(v)], axis=3)
  local_mask = jnp.broadcast_to(mask[:, None], sorted_mask.shape)
  key_mask = jnp.concatenate([local_mask, sorted_mask], axis=-1)[..., None, :]
  log_share = jnp.log(jnp.where(sorted_mask, share, 1.0))
  key_bias = jnp.concatenate([jnp.zeros_like(log_share), log_share], axis=-1)[..., None, :]
  return _attend(q, keys, values, key_mask, dropout, deterministic=deterministic, rngs=rngs,
                 key_bias=key_bias)


class SinkhornAttention(QKVOutAttention):
  """Sparse Sinkhorn attention (Tay et al. 2020, arXiv:2002.11296, §3; LRA's `sinkhorn`).

  Contiguous blocks of b = `block_size` tokens. SortNet: each block's summary is the sum of its
  real keys (per head); logits R = summaries @ W, W [d, ceil(max_length / b)] shared by the
  heads, cut to the nb blocks present; P = `sort_matrix(R)` ('softmax': row softmax as LRA,
  'sinkhorn': the paper's Sinkhorn balancing with `sinkhorn_iterations` and `temperature`).
  Sorted blocks psi_P(K)_i = sum_j P[i, j] K_j (real tokens only; `sorted_block_attention`), and
  each query of block i attends, in one softmax, to its own block and to sorted block i. The sort
  net gets a gradient through P. nb = 1 (block >= n) is full softmax attention.
  Cost per row O(b d) + the sort O(nb b d); memory O(n b + nb^2). A sequence longer than
  `max_length` is refused (W has one column per block of max_length).
  Config options (CONFIG_OPTIONS): block_size, sort_activation, sinkhorn_iterations,
  temperature.
  """

  CONFIG_OPTIONS = ('block_size', 'sort_activation', 'sinkhorn_iterations', 'temperature')

  @classmethod
  def check_options(cls, max_length: int, **options) -> None:
    """ValueError for block_size < 1, an unknown sort_activation, sinkhorn_iterations < 1 or a
    temperature that is not a finite number > 0."""
    del max_length  # Any block size works at any length.
    options = _with_defaults(cls, options)
    block_size = options['block_size']
    activation = options['sort_activation']
    iterations = options['sinkhorn_iterations']
    temperature = options['temperature']
    name = cls.__name__
    check_option(name, 'block_size', block_size, is_count(block_size), 'an integer >= 1')
    check_option(name, 'sort_activation', activation, activation in SORT_ACTIVATIONS,
                 ' or '.join(repr(a) for a in SORT_ACTIVATIONS))
    check_option(name, 'sinkhorn_iterations', iterations, is_count(iterations), 'an integer >= 1')
    check_option(name, 'temperature', temperature,
                 isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
                 and math.isfinite(temperature) and temperature > 0, 'a finite number > 0')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               block_size: int = 50, sort_activation: str = 'softmax',
               sinkhorn_iterations: int = 1, temperature: float = 1.0, rotary: bool = False):
    self.check_options(max_length, block_size=block_size, sort_activation=sort_activation,
                       sinkhorn_iterations=sinkhorn_iterations, temperature=temperature)
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.max_length = max_length
    self.block_size = block_size
    self.sort_activation = sort_activation
    self.sinkhorn_iterations = sinkhorn_iterations
    self.temperature = float(temperature)
    max_blocks = -(-max_length // block_size)
    self.sort_weights = nnx.Param(
        projection_init(init, 'qkv')(rngs.params(), (self.head_dim, max_blocks)))
    self.dropout = Dropout(attention_dropout)

  def sort_matrix(self, k_blocks, block_mask) -> jax.Array:
    """P [B, H, nb, nb] from keys [B, H, nb, b, d] and block mask [B, nb, b]."""
    num_blocks = k_blocks.shape[2]
    summaries = jnp.sum(jnp.where(block_mask[:, None, :, :, None], k_blocks, 0)
                        .astype(jnp.float32), axis=3)
    logits = summaries @ self.sort_weights[...][:, :num_blocks]
    return sort_matrix(logits, jnp.any(block_mask, axis=-1)[:, None],
                       activation=self.sort_activation, iterations=self.sinkhorn_iterations,
                       temperature=self.temperature)

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    n = x.shape[1]
    if n > self.max_length:
      raise ValueError(f'SinkhornAttention got a sequence of length {n} > max_length '
                       f'{self.max_length}; raise `max_length` to at least {n}.')
    block, num_blocks = _block_layout(self.block_size, n)
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    block_mask = _mask_to_blocks(mask, block, num_blocks)
    q_blocks, k_blocks, v_blocks = (_to_blocks(t, block, num_blocks) for t in (q, k, v))
    sort = self.sort_matrix(k_blocks, block_mask)
    y = sorted_block_attention(q_blocks, k_blocks, v_blocks, block_mask, sort, self.dropout,
                               deterministic=deterministic, rngs=rngs)
    return self.out(merge_heads(_from_blocks(y, n)))
