"""Tests of lra_luna.models.sparse_patterns: Sparse Transformer and Longformer attention against
dense masked softmax attention with their pattern built here as an explicit n x n mask."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.attention import SoftmaxAttention, merge_heads, split_heads
from lra_luna.models.attention.sparse_patterns import LongformerAttention, SparseTransformerAttention

DIM, HEADS = 16, 2
Sparse, Longformer = SparseTransformerAttention, LongformerAttention
# Small patterns with several blocks at n ~ 40 (tokens 1..40 -> 5 blocks of 8; windows 7 and 8
# -> blocks of 3 and 4), and the option switches. Most calls are [2, 41] or [2, 37] so that the
# compiled calls are shared between tests (compiling dominates the file's time).
VARIANTS = {
    'sparse': (Sparse, dict(block_length=8, summary_columns=2)),
    'sparse_bidirectional': (Sparse, dict(block_length=8, summary_columns=2, causal=False)),
    'sparse_no_cls': (Sparse, dict(block_length=8, summary_columns=3, cls_global=False)),
    'longformer': (Longformer, dict(window=8)),
    'longformer_global': (Longformer, dict(window=7, global_cls=True)),
    'longformer_causal_global': (Longformer, dict(window=7, causal=True, global_cls=True)),
}
GENERIC = ('sparse', 'sparse_bidirectional', 'longformer', 'longformer_global')


def make(variant, seed=0, **options):
  cls, small = VARIANTS[variant]
  return cls(DIM, HEADS, max_length=64, rngs=nnx.Rngs(seed), **{**small, **options})


def inputs(length=41, lengths=(41, 29), seed=0):
  """x [B, n, D] float32, mask [B, n]; numpy (eager JAX would compile every op)."""
  x = np.random.default_rng(seed).standard_normal((len(lengths), length, DIM), np.float32)
  mask = np.arange(length)[None, :] < np.array(lengths)[:, None]
  return x, mask


@nnx.jit
def dense_attention(query, key, value, out, x, allowed):
  """out(softmax(q k^T / sqrt(d)) v), allowed [B, n, n] (True = query may see key). Takes the
  layers, not the module, so one compile serves every variant at a length."""
  q, k, v = (split_heads(layer(x), HEADS) for layer in (query, key, value))
  scores = jnp.einsum('bhnd,bhmd->bhnm', q, k) / jnp.sqrt(q.shape[-1])
  scores = jnp.where(allowed[:, None], scores, -1e30)
  return out(merge_heads(jax.nn.softmax(scores, axis=-1) @ v))


def softmax_attention_reference(module, x, allowed, projections='window'):
  """Dense attention with the module's query, key, value ('window') or Longformer's global
  ones ('global'), and its output projection."""
  if projections == 'global':
    layers = (module.query_global, module.key_global, module.value_global)
  else:
    layers = (module.query, module.key, module.value)
  return np.asarray(dense_attention(*layers, module.out, x, np.asarray(allowed)))


def real_rows(y, mask):
  return np.asarray(y, np.float32)[np.asarray(mask)]


def sparse_pattern(n, l, c, causal=True, cls_global=True):
  """Child et al.'s fixed pattern as LRA builds it, [n, n]: token t = position - [CLS]."""
  t = np.arange(n) - (1 if cls_global else 0)
  i, j = t[:, None], t[None, :]
  allowed = (i // l == j // l) | (j % l == 0) | (j % l >= l - c)
  if causal:
    allowed &= j <= i
  if cls_global:
    allowed[0, :] = allowed[:, 0] = True
  return allowed


def longformer_pattern(n, w, causal=False, global_cls=False):
  """Window rows of Longformer, [n, n]: j - i in [-(ceil(w/2) - 1), floor(w/2)], plus key 0."""
  offset = np.arange(n)[None, :] - np.arange(n)[:, None]
  allowed = (offset >= -(math.ceil(w / 2) - 1)) & (offset <= w // 2)
  if causal:
    allowed &= offset <= 0
  if global_cls:
    allowed[:, 0] = True
  return allowed


def dense_reference(module, x, mask):
  """The module's output computed densely from its pattern."""
  n = x.shape[1]
  options = {option: getattr(module, option) for option in module.CONFIG_OPTIONS}
  if isinstance(module, Sparse):
    allowed = sparse_pattern(n, options['block_length'], options['summary_columns'],
                             options['causal'], options['cls_global'])
    return softmax_attention_reference(module, x, allowed[None] & mask[:, None, :])
  allowed = longformer_pattern(n, options['window'], options['causal'], options['global_cls'])
  y = softmax_attention_reference(module, x, allowed[None] & mask[:, None, :])
  if not options['global_cls']:
    return y
  everything = np.ones((n, n), bool)
  if options['causal']:
    everything = np.tril(everything)
  y_global = softmax_attention_reference(module, x, everything[None] & mask[:, None, :], 'global')
  return np.concatenate([y_global[:, :1], y[:, 1:]], axis=1)


# Eager JAX compiles every primitive for every shape: one compiled call per case is much faster.
call = nnx.jit(lambda module, x, mask: module(x, mask))


def everything(mask):
  """allowed [B, n, n]: every real key."""
  return np.broadcast_to(mask[:, None, :], (mask.shape[0], mask.shape[1], mask.shape[1]))


def perturbed_rows(module, positions, row=None):
  """(y, [y with x_p changed for p in positions]) for one unpadded example of length 41; only
  output row `row` if given. Calls of batch 2, as most tests."""
  x, mask = inputs(41, (41, 41))
  xs = np.repeat(x[:1], len(positions) + 1 + (len(positions) + 1) % 2, axis=0)
  for example, position in enumerate(positions, 1):
    xs[example, position] += 3.0
  y = np.concatenate([call(module, xs[i:i + 2], mask) for i in range(0, len(xs), 2)])
  y = y if row is None else y[:, row]
  return y[0], y[1:len(positions) + 1]


# Equality with the dense pattern -----------------------------------------------------------


@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_equals_dense_masked_attention_with_the_pattern(variant):
  # 41: 40 tokens = 5 blocks of 8 (41 tokens without [CLS]; windows 7, 8: blocks of 3, 4).
  cases = [(41, (41, 29))]
  if variant in ('sparse', 'sparse_bidirectional', 'longformer', 'longformer_global'):
    cases.append((37, (30, 37)))  # no multiple of any block
  if variant in ('sparse', 'longformer_global'):
    cases.append((5, (5, 2)))  # shorter than a block
  if variant == 'sparse':
    cases.append((1, (1, 1)))  # [CLS] alone: no token rows
  module = make(variant)
  for length, lengths in cases:
    x, mask = inputs(length, lengths)
    np.testing.assert_allclose(real_rows(call(module, x, mask), mask),
                               real_rows(dense_reference(module, x, mask), mask),
                               atol=1e-5, err_msg=str(length))


@pytest.mark.parametrize('variant', ['sparse', 'longformer'])
def test_lra_options_at_lra_length_equal_dense_reference(variant):
  cls = VARIANTS[variant][0]
  module = cls(DIM, HEADS, max_length=1025, rngs=nnx.Rngs(0))  # l=50, c=10 / w=512
  x, mask = inputs(1025, (1000,))
  np.testing.assert_allclose(real_rows(call(module, x, mask), mask),
                             real_rows(dense_reference(module, x, mask), mask), atol=1e-5)


@pytest.mark.parametrize('cls', [Sparse, Longformer])
def test_lra_lengths_trace(cls):
  module = cls(DIM, HEADS, max_length=4001, rngs=nnx.Rngs(0))
  for n in (1001, 2001, 4001, 1025):
    x = jax.ShapeDtypeStruct((2, n, DIM), jnp.float32)
    mask = jax.ShapeDtypeStruct((2, n), jnp.bool_)
    assert jax.eval_shape(lambda x, mask: module(x, mask), x, mask).shape == (2, n, DIM)


# Sparse Transformer ------------------------------------------------------------------------


def test_sparse_block_beyond_length_is_causal_attention():
  x, mask = inputs(41, (41, 23))
  causal = np.tril(np.ones((41, 41), bool))
  with_cls = causal.copy()
  with_cls[0] = True  # the [CLS] row sees every key; its column is in the lower triangle
  for options, allowed in [(dict(), with_cls[None] & mask[:, None, :]),
                           (dict(causal=False), everything(mask)),
                           (dict(cls_global=False), causal[None] & mask[:, None, :])]:
    module = make('sparse', block_length=64, summary_columns=10, **options)
    expected = softmax_attention_reference(module, x, allowed)
    np.testing.assert_allclose(real_rows(call(module, x, mask), mask), real_rows(expected, mask),
                               atol=1e-5, err_msg=str(options))


def test_sparse_all_summary_columns_is_causal_attention():
  x, mask = inputs()  # 40 tokens, 5 blocks of 8; c = l - 1: every column is a summary column
  causal = np.tril(np.ones((41, 41), bool))
  causal[0] = True
  module = make('sparse', block_length=8, summary_columns=7)
  expected = softmax_attention_reference(module, x, causal[None] & mask[:, None, :])
  np.testing.assert_allclose(real_rows(call(module, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)


def test_sparse_token_rows_do_not_see_the_future():
  positions = (9, 20, 40)
  y, changed = perturbed_rows(make('sparse'), positions)
  for position, y_changed in zip(positions, changed):
    np.testing.assert_allclose(y_changed[1:position], y[1:position], atol=1e-6)
    assert not np.allclose(y_changed[0], y[0])  # [CLS] sees every key
    assert not np.allclose(y_changed[position], y[position])


def test_sparse_cls_row_is_bidirectional_full_attention():
  module = make('sparse')
  x, mask = inputs()
  expected = softmax_attention_reference(module, x, everything(mask))
  np.testing.assert_allclose(call(module, x, mask)[:, 0], expected[:, 0], atol=1e-5)


@pytest.mark.parametrize('causal', [True, False])
def test_sparse_locality(causal):
  # l = 8, c = 2: summary residues {0, 6, 7}. Row at position 30 = token 29, block 3 (24..31).
  outside = [11, 13, 21]        # tokens 10, 12, 20: other blocks, residues 2, 4, 4
  inside = [0, 1, 15, 16, 26]   # [CLS]; tokens 0, 14, 15 (summary); 25 (own block)
  later = [32, 39]              # tokens 31 (own block), 38 (summary of a later block)
  (outside if causal else inside).extend(later)
  y, changed = perturbed_rows(make('sparse' if causal else 'sparse_bidirectional'),
                              outside + inside, row=30)
  for position, y_changed in zip(outside + inside, changed):
    if position in outside:
      np.testing.assert_allclose(y_changed, y, atol=1e-6, err_msg=str(position))
    else:
      assert not np.allclose(y_changed, y, atol=1e-4), position


# Longformer --------------------------------------------------------------------------------


def test_longformer_window_covering_all_pairs_is_full_attention():
  n = 37
  x, mask = inputs(n, (n, 30))
  full = make('longformer', window=2 * n - 1)
  expected = softmax_attention_reference(full, x, everything(mask))
  np.testing.assert_allclose(real_rows(call(full, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)
  # 2n - 2 reaches n - 1 to the right but only n - 2 to the left: the last row misses key 0.
  short = make('longformer', window=2 * n - 2)
  y, expected = call(short, x, mask), softmax_attention_reference(short, x, everything(mask))
  np.testing.assert_allclose(y[0, :-1], expected[0, :-1], atol=1e-5)
  assert not np.allclose(y[0, -1], expected[0, -1], atol=1e-4)


def test_longformer_cls_row_is_full_attention_with_global_projections():
  module = make('longformer_global')
  x, mask = inputs()
  y = call(module, x, mask)
  expected = softmax_attention_reference(module, x, everything(mask), projections='global')
  np.testing.assert_allclose(y[:, 0], expected[:, 0], atol=1e-5)
  # ... and not the window projections' full row.
  window_projections = softmax_attention_reference(module, x, everything(mask))
  assert not np.allclose(y[:, 0], window_projections[:, 0], atol=1e-4)


def test_longformer_global_projections_only_when_used():
  params = lambda variant: set(nnx.state(make(variant), nnx.Param).keys())
  assert params('longformer') == {'query', 'key', 'value', 'out'}
  assert params('longformer_global') == {'query', 'key', 'value', 'out', 'query_global',
                                         'key_global', 'value_global'}


@pytest.mark.parametrize('global_cls', [False, True])
def test_longformer_locality(global_cls):
  # window 8: row 20 sees 17..24; window 7 (global): 17..23 and key 0.
  if global_cls:
    variant, outside, inside = 'longformer_global', [1, 16, 24, 40], [0, 17, 20, 23]
  else:
    variant, outside, inside = 'longformer', [0, 1, 16, 25, 40], [17, 20, 24]
  y, changed = perturbed_rows(make(variant), outside + inside, row=20)
  for position, y_changed in zip(outside + inside, changed):
    if position in outside:
      np.testing.assert_allclose(y_changed, y, atol=1e-6, err_msg=str(position))
    else:
      assert not np.allclose(y_changed, y, atol=1e-4), position


def test_longformer_causal_rows_do_not_see_the_future():
  y, (y_changed,) = perturbed_rows(make('longformer_causal_global'), [20])
  np.testing.assert_allclose(y_changed[:20], y[:20], atol=1e-6)
  assert not np.allclose(y_changed[20:24], y[20:24])


# Protocol ----------------------------------------------------------------------------------


@pytest.mark.parametrize('variant', GENERIC)
def test_padding_invariance(variant):
  x, mask = inputs(37, (30, 30))
  noise = 10.0 * inputs(37, (30, 30), seed=7)[0]
  x = np.concatenate([x[:1], np.where(mask[1:, :, None], x[:1], noise[:1])])
  y = np.asarray(call(make(variant), x, mask))
  np.testing.assert_allclose(y[0, :30], y[1, :30], atol=1e-5)


@pytest.mark.parametrize('variant', ['sparse', 'longformer_global'])
def test_jit_matches_eager(variant):
  module = make(variant)
  x, mask = inputs(37, (37, 22))
  np.testing.assert_allclose(call(module, x, mask), module(x, mask), atol=1e-5)


@pytest.mark.parametrize('variant', ['sparse', 'longformer_global'])
def test_training_mode_with_dropout_runs(variant):
  x, mask = inputs()
  train = nnx.jit(lambda module, x, mask, rngs: module(x, mask, deterministic=False, rngs=rngs))
  y = train(make(variant, attention_dropout=0.1), x, mask, nnx.Rngs(dropout=1))
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()
  assert not np.allclose(y, call(make(variant), x, mask))


@pytest.mark.parametrize('variant', ['sparse', 'longformer_global'])
def test_bfloat16_compute_close_to_float32(variant):
  x, mask = inputs()
  y32 = call(make(variant), x, mask)
  y16 = call(make(variant, dtype=jnp.bfloat16), jnp.asarray(x, jnp.bfloat16), mask)
  assert y16.dtype == jnp.bfloat16 and np.isfinite(np.asarray(y16, np.float32)).all()
  scale = np.abs(real_rows(y32, mask)).max()
  np.testing.assert_allclose(real_rows(y16, mask), real_rows(y32, mask), atol=0.05 * scale)


@pytest.mark.parametrize('variant', ['sparse', 'longformer_global'])
def test_fully_padded_row_is_finite(variant):
  x, mask = inputs(lengths=(41, 0))
  y = call(make(variant), x, mask)
  assert y.shape == x.shape and y.dtype == jnp.float32 and np.isfinite(np.asarray(y)).all()


def largest_intermediate(function, *args) -> int:
  """The largest size of any value the traced computation creates (sub-jaxprs included)."""
  def walk(jaxpr):
    sizes = [0]
    for eqn in jaxpr.eqns:
      sizes += [math.prod(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, 'shape')]
      for param in eqn.params.values():
        for sub in (param if isinstance(param, (tuple, list)) else (param,)):
          if isinstance(sub, jax.extend.core.ClosedJaxpr):
            sizes.append(walk(sub.jaxpr))
          elif isinstance(sub, jax.extend.core.Jaxpr):
            sizes.append(walk(sub))
    return max(sizes)
  return walk(jax.make_jaxpr(function)(*args).jaxpr)


def traced_call(module):
  """(a pure function of (state, x, mask) calling module, its state)."""
  graphdef, state = nnx.split(module)
  return (lambda state, x, mask: nnx.merge(graphdef, state)(x, mask)), state


@pytest.mark.parametrize('cls, options', [
    (Sparse, dict(block_length=64, summary_columns=3)),
    (Sparse, dict(block_length=64, summary_columns=3, causal=False)),
    (Longformer, dict(window=64, global_cls=True)),
], ids=['sparse', 'sparse_bidirectional', 'longformer_global'])
def test_no_n_by_n_tensor(cls, options):
  n = 1025
  x, mask = jnp.zeros((1, n, 8)), jnp.ones((1, n), bool)
  dense_call, dense_state = traced_call(SoftmaxAttention(8, 1, rngs=nnx.Rngs(0)))
  assert largest_intermediate(dense_call, dense_state, x, mask) >= n * n  # the check can fail
  sparse_call, state = traced_call(cls(8, 1, max_length=n, rngs=nnx.Rngs(0), **options))
  # Sparse: n x (l + (c+1) n/l + 1) = 129 n scores; Longformer: n x (1.5 w + 1) = 97 n.
  assert largest_intermediate(sparse_call, state, x, mask) <= 130 * n


def test_constructor_options_exist():
  for cls in (Sparse, Longformer):
    for option in cls.CONFIG_OPTIONS:
      assert option in cls.__init__.__kwdefaults__, (cls, option)
    cls.check_options(max_length=1025)  # the defaults (LRA's values) are valid


@pytest.mark.parametrize('cls, options, message', [
    (Sparse, dict(block_length=0), r'SparseTransformerAttention option block_length = 0 .*>= 1'),
    (Sparse, dict(block_length=2.5), r'block_length = 2.5 is not valid'),
    (Sparse, dict(summary_columns=-1), r'summary_columns = -1 .*\[0, 49\]'),
    (Sparse, dict(block_length=8, summary_columns=8), r'summary_columns = 8 .*\[0, 7\]'),
    (Sparse, dict(causal='yes'), r"causal = 'yes' is not valid: True or False"),
    (Sparse, dict(cls_global=1), r'cls_global = 1 is not valid'),
    (Longformer, dict(window=0), r'LongformerAttention option window = 0 .*>= 1'),
    (Longformer, dict(window=64.0), r'window = 64.0 is not valid'),
    (Longformer, dict(global_cls='no'), r"global_cls = 'no' is not valid"),
    (Longformer, dict(causal=None), r'causal = None is not valid'),
])
def test_check_options_refuses_impossible_values(cls, options, message):
  with pytest.raises(ValueError, match=message):
    cls.check_options(max_length=1025, **options)
  with pytest.raises(ValueError, match=message):  # the constructor checks first
    cls(DIM, HEADS, max_length=1025, rngs=nnx.Rngs(0), **options)
