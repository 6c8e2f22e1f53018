"""Fixed sparse-pattern attention baselines of LRA: Sparse Transformer and Longformer.

Both are softmax attention restricted to a fixed set A(i) of keys per query row. LRA's code
builds the n x n pattern as a mask over dense scores, so it costs what the Transformer costs;
here both are truly sparse: the keys of each pattern are gathered in blocks and no [n, n] score
or mask tensor exists. Lengths that are no multiple of the block are padded internally with
masked filler and sliced back. The outputs equal dense masked attention with the same pattern
(the tests check that against an explicit n x n reference).

Protocol as `baselines.py`: constructor `(dim, num_heads, *, attention_dropout, max_length, init,
dtype, rngs, <options>)`, call `module(x, mask, *, deterministic=True, rngs=None) -> y`; position
0 is the [CLS] token. Softmax in float32; a row with no real key gets a uniform (finite) softmax.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lra_luna.models.attention.base import (MASKED_SCORE, QKVOutAttention, check_option, einsum32,
                                            is_count, merge_heads, projection, split_heads)
from lra_luna.models.attention.rotary import rotate_queries_and_keys
from lra_luna.models.nn.dropout import Dropout


def _softmax_over_parts(parts, dropout: Dropout, *, deterministic: bool, rngs):
  """One softmax over the union of several key sets of each query row.

  parts: (scores, allowed) pairs; the scores [..., k_p] share their leading axes, allowed (True =
  the key is in the row's pattern and real) broadcasts to its scores. The key sets must be
  disjoint, so no key is counted twice. Returns each part's probabilities (float32, after
  attention dropout).
  """
  scores = jnp.concatenate(
      [jnp.where(allowed, s.astype(jnp.float32), MASKED_SCORE) for s, allowed in parts], axis=-1)
  probs = dropout(jax.nn.softmax(scores, axis=-1), deterministic=deterministic, rngs=rngs)
  return jnp.split(probs, np.cumsum([s.shape[-1] for s, _ in parts])[:-1], axis=-1)


def _attend_all(q_row, k, v, key_allowed, dropout: Dropout, *, deterministic: bool, rngs):
  """Attention of one query row per example over all keys (O(n)): q_row [B, H, d] (scaled),
  k, v [B, H, n, d], key_allowed broadcasting to [B, H, n] -> [B, H, 1, d]."""
  scores = einsum32('bhd,bhkd->bhk', q_row, k)
  (probs,) = _softmax_over_parts([(scores, key_allowed)], dropout, deterministic=deterministic,
                                 rngs=rngs)
  return einsum32('bhk,bhkd->bhd', probs.astype(v.dtype), v).astype(v.dtype)[:, :, None]


def _add_cls_key(parts: list, values: list, qb, k, v, mask) -> None:
  """Appends key 0 ([CLS]) as one more key of every blocked query row qb [B, H, nb, q, d]."""
  parts.append((einsum32('bhnqd,bhd->bhnq', qb, k[:, :, 0])[..., None],
                mask[:, None, None, None, :1]))
  values.append(('bhnqc,bhcd->bhnqd', v[:, :, :1]))


def _attend_parts(parts: list, values: list, dropout: Dropout, run: dict):
  """One softmax over the parts' keys (`_softmax_over_parts`), each part's probabilities
  applied to its values ((einsum spec, value) per part) and summed."""
  probs = _softmax_over_parts(parts, dropout, **run)
  return sum(einsum32(spec, p.astype(value.dtype), value)
             for p, (spec, value) in zip(probs, values)).astype(values[0][1].dtype)


def _to_blocks(t, length: int, block: int, front: int = 0):
  """[B, H, n, d] -> [B, H, blocks, block, d], `front` filler rows before and filler after up to
  `length` rows (zeros: the caller masks them)."""
  b, h, n, d = t.shape
  t = jnp.pad(t, ((0, 0), (0, 0), (front, length - n - front), (0, 0)))
  return t.reshape(b, h, length // block, block, d)


def _mask_to_blocks(mask, length: int, block: int, front: int = 0):
  """[B, n] key mask -> [B, blocks, block], filler False."""
  b, n = mask.shape
  mask = jnp.pad(mask, ((0, 0), (front, length - n - front)), constant_values=False)
  return mask.reshape(b, length // block, block)


# ----------------------------------------------------------------------------------------------
# Sparse Transformer


class SparseTransformerAttention(QKVOutAttention):
  """Sparse Transformer attention, fixed pattern (Child et al. 2019, §4.3 "fixed attention" A^(1),
  A^(2); the "merged" head type of its §5: one pattern, the union, shared by all heads), as LRA
  runs it.

  On token positions t (the [CLS] slot excluded, see below) with block length l and c summary
  columns: A(t) = {t' <= t : floor(t'/l) = floor(t/l)} (A^(1), the own block) united with
  {t' <= t : t' mod l in S} (A^(2), the summary columns), S = {0, l-c, ..., l-1}: c+1 columns per
  block, as LRA (the paper writes {l-c, ..., l}; LRA reads l as residue 0). LRA always runs it
  causal (`causal=True`); `causal=False` is the paper's bidirectional fixed pattern (same block,
  or t' mod l in S). With `cls_global` (LRA with a [CLS] head) the pattern is built on positions
  1..n-1, row 0 ([CLS]) attends to every key and every row attends to key 0.

  Computation (no [n, n] tensor): each token row takes one softmax over (a) the l keys of its own
  block (causal inside it), (b) the summary keys of the whole sequence, gathered once: (c+1) per
  block, those of the row's own block excluded (already in (a)) and, causal, only those of
  earlier blocks, (c) the [CLS] key. The [CLS] row is one O(n) row over all keys. Cost per row
  O(l + (c+1) n / l) (O(sqrt(n)) keys per row for l ~ sqrt(n); the paper's O(n sqrt(n))).
  A sequence of at most l tokens is one block (plain causal attention). `max_length` is unused.
  Config options (CONFIG_OPTIONS): block_length, summary_columns, causal, cls_global.
  """

  CONFIG_OPTIONS = ('block_length', 'summary_columns', 'causal', 'cls_global')

  @classmethod
  def check_options(cls, max_length: int, block_length: int = 50, summary_columns: int = 10,
                    causal: bool = True, cls_global: bool = True) -> None:
    del max_length  # Any length works (a short sequence is one block).
    name = cls.__name__
    check_option(name, 'block_length', block_length, is_count(block_length), 'an integer >= 1')
    valid = is_count(summary_columns, 0) and summary_columns < block_length
    check_option(name, 'summary_columns', summary_columns, valid,
                 f'an integer in [0, block_length - 1] = [0, {block_length - 1}]')
    for option, value in (('causal', causal), ('cls_global', cls_global)):
      check_option(name, option, value, isinstance(value, bool), 'True or False')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               block_length: int = 50, summary_columns: int = 10, causal: bool = True,
               cls_global: bool = True, rotary: bool = False):
    self.check_options(max_length, block_length, summary_columns, causal, cls_global)
    del max_length  # Unused.
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.block_length = block_length
    self.summary_columns = summary_columns
    self.causal = causal
    self.cls_global = cls_global
    self.dropout = Dropout(attention_dropout)

  def summary_offsets(self) -> np.ndarray:
    """The residues t mod l of the summary columns: 0 and l-c, ..., l-1 (c+1 of them)."""
    l, c = self.block_length, self.summary_columns
    return np.unique(np.concatenate([[0], np.arange(l - c, l)]))

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    run = dict(deterministic=deterministic, rngs=rngs)
    first = 1 if self.cls_global else 0  # the first token position of the pattern
    rows = []
    if self.cls_global:  # [CLS] row: every real key.
      rows.append(_attend_all(q[:, :, 0], k, v, mask[:, None, :], self.dropout, **run))
    if x.shape[1] > first:
      rows.append(self._token_rows(q, k, v, mask, first, run))
    return self.out(merge_heads(jnp.concatenate(rows, axis=2)))

  def _token_rows(self, q, k, v, mask, first: int, run: dict):
    """Outputs [B, H, n - first, d] of the token rows (positions first..n-1)."""
    b, h, n, d = q.shape
    tokens = n - first
    # Up to l tokens are one block, and every summary column then lies inside it.
    block = min(self.block_length, tokens)
    num_blocks = -(-tokens // block)
    length = num_blocks * block
    qb, kb, vb = (_to_blocks(t[:, :, first:], length, block) for t in (q, k, v))
    key_mask = _mask_to_blocks(mask[:, first:], length, block)  # [B, blocks, block]

    # (a) own block: [B, H, blocks, block, block].
    own_allowed = key_mask[:, None, :, None, :]
    if self.causal:
      own_allowed = own_allowed & np.tril(np.ones((block, block), bool))
    parts = [(einsum32('bhnqd,bhnkd->bhnqk', qb, kb), own_allowed)]
    values = [('bhnqk,bhnkd->bhnqd', vb)]

    # (b) summary columns of the other blocks: [B, H, blocks, block, blocks * (c+1)].
    if num_blocks > 1:
      offsets = self.summary_offsets()
      gather = lambda t: t[:, :, :, offsets].reshape(b, h, num_blocks * len(offsets), d)
      key_block = np.repeat(np.arange(num_blocks), len(offsets))
      query_block = np.arange(num_blocks)[:, None]
      # Causal: t' <= t for a key of another block means an earlier block.
      other = key_block < query_block if self.causal else key_block != query_block
      summary_mask = key_mask[:, :, offsets].reshape(b, 1, 1, 1, -1)
      parts.append((einsum32('bhnqd,bhsd->bhnqs', qb, gather(kb)),
                    summary_mask & other[None, None, :, None, :]))
      values.append(('bhnqs,bhsd->bhnqd', gather(vb)))

    # (c) the [CLS] key (position 0 precedes every token, so causal keeps it).
    if self.cls_global:
      _add_cls_key(parts, values, qb, k, v, mask)
    y = _attend_parts(parts, values, self.dropout, run)
    return y.reshape(b, h, length, d)[:, :, :tokens]


# ----------------------------------------------------------------------------------------------
# Longformer


class LongformerAttention(QKVOutAttention):
  """Longformer attention (Beltagy et al. 2020, §3.1): sliding window, optional global [CLS].

  Sliding window of w positions including the row itself: j - i in [-(ceil(w/2) - 1),
  floor(w/2)] (LRA's split; w = 512 in LRA), with the window projections Q_s, K_s, V_s (the
  module's query/key/value). No dilation (LRA has none). `causal` also requires j <= i.
  Global attention (§3.1 "Global Attention" and "Linear Projections for Global Attention"): with
  `global_cls` position 0 ([CLS], the paper's classification practice) is global: its row sees every
  key with separate projections Q_g, K_g, V_g (query_global, key_global, value_global), and every
  other row attends to key 0 (with K_s, V_s) in addition to its window. LRA passes no global
  positions (the default `global_cls=False`): the model is then a pure sliding window. One output
  projection for both.

  Computation (no [n, n] tensor): the sequence is cut into blocks of max(left, right) positions
  (the window's reach on either side); each query block attends to the key blocks its windows
  can reach (the previous, its own and the next block, fewer at the ends), gathered once, under
  an exact window mask; the [CLS] key is one extra column and the [CLS] row one O(n) row. Scores
  per row: three blocks of w/2 = 1.5 w (w of them in the window), O(n w) in all. `max_length` is
  unused.
  Config options (CONFIG_OPTIONS): window, global_cls, causal.
  """

  CONFIG_OPTIONS = ('window', 'global_cls', 'causal')

  @classmethod
  def check_options(cls, max_length: int, window: int = 512, global_cls: bool = False,
                    causal: bool = False) -> None:
    del max_length  # Any length works (a window beyond the sequence covers all of it).
    name = cls.__name__
    check_option(name, 'window', window, is_count(window), 'an integer >= 1')
    for option, value in (('global_cls', global_cls), ('causal', causal)):
      check_option(name, option, value, isinstance(value, bool), 'True or False')

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               max_length: int, init: str = 'reference', dtype=jnp.float32, rngs: nnx.Rngs,
               window: int = 512, global_cls: bool = False, causal: bool = False,
               rotary: bool = False):
    self.check_options(max_length, window, global_cls, causal)
    del max_length  # Unused.
    super().__init__(dim, num_heads, init=init, dtype=dtype, rngs=rngs, rotary=rotary)
    self.window = window
    self.global_cls = global_cls
    self.causal = causal
    if global_cls:  # Only when used (LRA creates and computes them even with no global token).
      qkv = dict(init=init, role='qkv', dtype=dtype, rngs=rngs)
      self.query_global = projection(dim, **qkv)
      self.key_global = projection(dim, **qkv)
      self.value_global = projection(dim, **qkv)
    self.dropout = Dropout(attention_dropout)

  def window_reach(self) -> tuple[int, int]:
    """(left, right): row i sees keys j with -left <= j - i <= right."""
    left, right = math.ceil(self.window / 2) - 1, self.window // 2
    return left, 0 if self.causal else right

  def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    q, k, v = self._heads(x)
    q = q * self.head_dim**-0.5
    run = dict(deterministic=deterministic, rngs=rngs)
    y = self._window_rows(q, k, v, mask, run)
    if self.global_cls:  # [CLS] row: every real key (causal: only itself), global projections.
      q_global = split_heads(self.query_global(x[:, :1]), self.num_heads)[:, :, 0]
      k_global, v_global = (split_heads(layer(x), self.num_heads)
                            for layer in (self.key_global, self.value_global))
      if self.rotary:  # [CLS] is position 0: its query needs no rotation, the keys do.
        k_global = rotate_queries_and_keys(k_global, k_global)[1]
      allowed = mask[:, None, :]
      if self.causal:
        allowed = allowed & (jnp.arange(x.shape[1]) == 0)
      y_cls = _attend_all(q_global * self.head_dim**-0.5, k_global, v_global, allowed,
                          self.dropout, **run)
      y = jnp.concatenate([y_cls, y[:, :, 1:]], axis=2)
    return self.out(merge_heads(y))

  def _window_rows(self, q, k, v, mask, run: dict):
    """Window (and, with global_cls, [CLS]-key) attention of every row: [B, H, n, d]."""
    b, h, n, d = q.shape
    left, right = self.window_reach()
    block = min(max(left, right, 1), n)
    num_blocks = -(-n // block)
    # Key blocks each query block needs before and after its own (at most one each).
    before = min(-(-left // block), num_blocks - 1)
    after = min(-(-right // block), num_blocks - 1)
    span = (before + 1 + after) * block
    if self.global_cls:  # Key 0 is the extra [CLS] column of every row, not a window key.
      mask_window = jnp.asarray(mask).at[:, 0].set(False)
    else:
      mask_window = mask
    qb = _to_blocks(q, num_blocks * block, block)
    key_length = (before + num_blocks + after) * block
    kb, vb = (_to_blocks(t, key_length, block, front=before * block) for t in (k, v))
    key_mask = _mask_to_blocks(mask_window, key_length, block, front=before * block)

    def neighbourhood(t):
      # [..., before + blocks + after, block, ...] -> [..., blocks, span, ...]: for query block
      # i the key blocks i - before .. i + after, side by side.
      axis = 2 if t.ndim == 5 else 1
      shifted = [jax.lax.slice_in_dim(t, s, s + num_blocks, axis=axis)
                 for s in range(before + 1 + after)]
      t = jnp.stack(shifted, axis=axis + 1)  # [..., blocks, neighbours, block, ...]
      return t.reshape(*t.shape[:axis + 1], span, *t.shape[axis + 3:])

    # Query s of a block vs key r of its neighbourhood: j - i = r - before * block - s.
    offset = np.arange(span)[None, :] - before * block - np.arange(block)[:, None]
    in_window = (offset >= -left) & (offset <= right)
    allowed = neighbourhood(key_mask)[:, None, :, None, :] & in_window
    parts = [(einsum32('bhnqd,bhnkd->bhnqk', qb, neighbourhood(kb)), allowed)]
    values = [('bhnqk,bhnkd->bhnqd', neighbourhood(vb))]
    if self.global_cls:  # Key 0 precedes every row, so causal keeps it.
      _add_cls_key(parts, values, qb, k, v, mask)
    y = _attend_parts(parts, values, self.dropout, run)
    return y.reshape(b, h, num_blocks * block, d)[:, :, :n]
