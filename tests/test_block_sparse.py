"""Tests of lra_luna.models.block_sparse: BigBird (ITC) and Sparse Sinkhorn attention against
dense references built here (explicit n x n masks), their random and sorting parts, sparsity,
padding, jit, dtypes and option checks.

Speed: inputs, masks and references are numpy (float64, from the module's weights) and every JAX
computation runs jitted. Op-by-op (eager) JAX compiles each op for each new shape, which cost
several times more than the tests themselves. nnx.jit caches on the module's graph (class and
static options), so modules that differ only in seed or weights share one executable.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.attention import merge_heads, split_heads
from lra_luna.models.attention.base import RandomFeatures
from lra_luna.models.attention.block_sparse import (MIN_SLOT_WEIGHT, BigBirdAttention,
                                                    SinkhornAttention, random_block_table,
                                                    sort_matrix, sorted_block_attention)
from lra_luna.models.nn.dropout import Dropout

DIM, HEADS, LENGTH = 16, 2, 41
# Small blocks so that n = 41 has several (6) blocks, the last one partial.
SMALL_OPTIONS = {
    BigBirdAttention: dict(block_size=8, num_random_blocks=2),
    SinkhornAttention: dict(block_size=8),
}
CLASSES = (BigBirdAttention, SinkhornAttention)


def linear(layer, x):
  return x @ np.asarray(layer.kernel[...], np.float64) + np.asarray(layer.bias[...], np.float64)


def projected_heads(module, x):
  """q (unscaled), k, v [B, H, n, d], float64, from the module's own projection weights."""
  heads = lambda t: t.reshape(*t.shape[:2], HEADS, -1).transpose(0, 2, 1, 3)
  return tuple(heads(linear(layer, np.asarray(x, np.float64)))
               for layer in (module.query, module.key, module.value))


def output_projection(module, y):
  """out(merged heads) of y [B, H, n, d]."""
  return linear(module.out, y.transpose(0, 2, 1, 3).reshape(*y.shape[:1], y.shape[2], -1))


def masked_softmax_rows(scores, allowed):
  """Row softmax over allowed entries (float64); a row with none allowed is uniform (finite)."""
  scores = np.where(allowed, scores, -1e300)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  return probs / probs.sum(-1, keepdims=True)


def dense_reference(module, x, allowed):
  """out(softmax(q k^T / sqrt(d)) v), allowed [B, n, n] or [B, H, n, n] (True = may attend)."""
  q, k, v = projected_heads(module, x)
  if allowed.ndim == 3:
    allowed = allowed[:, None]
  scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
  return output_projection(module, masked_softmax_rows(scores, allowed) @ v)


def dense_softmax_attention(module, x, mask):
  """The n x n computation in JAX, only traced (jaxpr) to check the size detector."""
  q, k, v = (split_heads(layer(x), HEADS) for layer in (module.query, module.key, module.value))
  scores = jnp.where(mask[:, None, None, :], q @ jnp.swapaxes(k, -1, -2), -1e30)
  return module.out(merge_heads(jax.nn.softmax(scores, axis=-1) @ v))


apply = nnx.jit(lambda module, x, mask: module(x, mask))
apply_training = nnx.jit(lambda module, x, mask, rngs: module(x, mask, deterministic=False,
                                                               rngs=rngs))
# BigBird's output and its random table for the same length in one executable.
apply_with_table = nnx.jit(lambda module, x, mask: (module(x, mask),
                                                    module.random_blocks(x.shape[1])))


@jax.jit
def sorted_attention(q, k, v, mask, sort):
  return sorted_block_attention(q, k, v, mask, sort, Dropout(0.0), deterministic=True, rngs=None)


def make(cls, seed=0, max_length=64, **options):
  options = {**SMALL_OPTIONS[cls], **options}
  return cls(DIM, HEADS, max_length=max_length, rngs=nnx.Rngs(seed), **options)


def inputs(length=LENGTH, lengths=(LENGTH, 23), seed=0):
  x = np.random.default_rng(seed).normal(size=(len(lengths), length, DIM)).astype(np.float32)
  mask = np.arange(length)[None, :] < np.array(lengths)[:, None]
  return x, mask


def full_allowed(mask):
  n = mask.shape[1]
  return np.broadcast_to(mask[:, None, :], (mask.shape[0], n, n))


def real_rows(y, mask):
  return np.asarray(y, np.float32)[np.asarray(mask)]


def largest_intermediate(fn, *args) -> int:
  """Size of the largest value computed anywhere in fn's jaxpr (sub-jaxprs included)."""
  sizes = [0]

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      sizes.extend(math.prod(var.aval.shape) for var in eqn.outvars)
      for param in eqn.params.values():
        for sub in param if isinstance(param, (tuple, list)) else (param,):
          if hasattr(sub, 'eqns'):
            walk(sub)
          elif hasattr(getattr(sub, 'jaxpr', None), 'eqns'):
            walk(sub.jaxpr)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return max(sizes)


# Protocol tests, both classes -----------------------------------------------------------------


@pytest.mark.parametrize('cls', CLASSES)
def test_padding_invariance(cls):
  module = make(cls)
  x, mask = inputs()
  noise = 10.0 * np.random.default_rng(7).normal(size=x.shape).astype(np.float32)
  x_changed = np.where(mask[..., None], x, noise)
  np.testing.assert_allclose(real_rows(apply(module, x, mask), mask),
                             real_rows(apply(module, x_changed, mask), mask), atol=1e-5)


@pytest.mark.parametrize('cls', CLASSES)
def test_jit_matches_eager(cls):
  module = make(cls)
  x, mask = inputs()
  np.testing.assert_allclose(apply(module, x, mask), module(x, mask), atol=1e-5)


@pytest.mark.parametrize('cls', CLASSES)
def test_dropout_runs_and_changes_output(cls):
  module = make(cls, attention_dropout=0.3)
  x, mask = inputs()
  y = apply_training(module, x, mask, nnx.Rngs(dropout=1))
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()
  assert not np.allclose(y, apply_training(module, x, mask, nnx.Rngs(dropout=2)))


@pytest.mark.parametrize('cls', CLASSES)
def test_bfloat16_close_to_float32(cls):
  x, mask = inputs()
  y32 = apply(make(cls), x, mask)
  y16 = apply(make(cls, dtype=jnp.bfloat16), x.astype(jnp.bfloat16), mask)
  assert y16.dtype == jnp.bfloat16 and np.isfinite(np.asarray(y16, np.float32)).all()
  np.testing.assert_allclose(real_rows(y16, mask), real_rows(y32, mask), atol=0.05, rtol=0.05)


def loss(module, x, mask, target):
  return jnp.sum(module(x, mask) * target)


gradients = nnx.jit(nnx.grad(loss))


@pytest.mark.parametrize('cls', CLASSES)
def test_fully_padded_row_is_finite(cls):
  x, mask = inputs(lengths=(LENGTH, 0))
  module = make(cls)
  assert np.isfinite(np.asarray(apply(module, x, mask))).all()
  target = np.random.default_rng(5).normal(size=x.shape).astype(np.float32)
  grads = gradients(module, x, mask, target)
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
  if cls is SinkhornAttention:
    # The sort net really routes: it gets a gradient (LRA's contraction gives it none).
    assert np.abs(np.asarray(grads['sort_weights'][...])).max() > 1e-4


@pytest.mark.parametrize('cls', CLASSES)
@pytest.mark.parametrize('length', [5, 1001])  # 37 and 41: the dense-reference tests
def test_any_length_runs(cls, length):
  x, mask = inputs(length, (length, max(length // 2, 1)))
  y = apply(make(cls, max_length=1001), x, mask)
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize('cls', CLASSES)
def test_no_n_by_n_tensor(cls):
  n = 512
  options = dict(num_random_blocks=1) if cls is BigBirdAttention else {}
  module = make(cls, max_length=n, block_size=8, **options)
  x, mask = inputs(n, (n,))
  graphdef, state = nnx.split(module)
  call = lambda state, x, mask: nnx.merge(graphdef, state)(x, mask)
  assert largest_intermediate(call, state, x, mask) < n * n // 4
  # The detector itself sees the dense reference's n x n scores.
  assert largest_intermediate(lambda x: dense_softmax_attention(module, x, mask), x) >= n * n


def test_check_options_is_called_by_the_constructor():
  with pytest.raises(ValueError, match='BigBirdAttention option block_size = 0'):
    BigBirdAttention(DIM, HEADS, max_length=64, rngs=nnx.Rngs(0), block_size=0)
  with pytest.raises(ValueError, match='SinkhornAttention option temperature = 0'):
    SinkhornAttention(DIM, HEADS, max_length=64, rngs=nnx.Rngs(0), temperature=0.0)


def test_constructor_options_exist():
  for cls in CLASSES:
    for option in cls.CONFIG_OPTIONS:
      assert option in cls.__init__.__kwdefaults__, (cls, option)
    cls.check_options(64)  # The defaults are valid.


# BigBird ----------------------------------------------------------------------------------------


def bigbird_allowed(module, table, mask):
  """[B, H, n, n]: M(i, j) = i in G or j in G or |i - j| <= 1 or j in R(i) on token blocks, G =
  {0, nb-1}, R = the module's own table (`random_blocks(n)`); keys masked by `mask`."""
  n = mask.shape[1]
  block = min(module.block_size, n)
  num_blocks = -(-n // block)
  blocks, valid = (np.asarray(t) for t in table)
  rows, cols = np.meshgrid(np.arange(num_blocks), np.arange(num_blocks), indexing='ij')
  fixed = ((rows == 0) | (rows == num_blocks - 1) | (cols == 0) | (cols == num_blocks - 1)
           | (np.abs(rows - cols) <= 1))
  block_mask = np.repeat(fixed[None], HEADS, axis=0)
  for h, i, s in zip(*np.nonzero(valid)):
    block_mask[h, i, blocks[h, i, s]] = True
  token_block = np.arange(n) // block
  allowed = block_mask[:, token_block][:, :, token_block]
  return allowed[None] & mask[:, None, None, :]


@pytest.mark.parametrize('length, lengths, block_size, num_random, within', [
    (100, (100, 61), 8, 2, 1024),  # 13 blocks, the last partial, padding
    (100, (100, 61), 8, 3, 48),    # random blocks only among blocks 1..5
    (37, (37, 20), 8, 0, 0),       # 5 blocks, no random blocks
    (41, (41, 19), 8, 1, 1024),    # 6 blocks: rows with 1 or 2 candidates
])
def test_bigbird_equals_dense_block_mask(length, lengths, block_size, num_random, within):
  module = make(BigBirdAttention, max_length=length, block_size=block_size,
                num_random_blocks=num_random, random_within=within)
  x, mask = inputs(length, lengths)
  y, table = apply_with_table(module, x, mask)
  check_random_table(table, num_random, within // block_size if within else None)
  allowed = bigbird_allowed(module, table, mask)
  assert not allowed[0].all()  # a sparse pattern, not full attention
  np.testing.assert_allclose(real_rows(y, mask),
                             real_rows(dense_reference(module, x, allowed), mask), atol=1e-5)


def test_bigbird_global_block_rows_are_full_attention():
  module = make(BigBirdAttention, max_length=100)
  x, mask = inputs(100, (100, 61))
  full = dense_reference(module, x, full_allowed(mask))
  y = apply_with_table(module, x, mask)[0]
  global_rows = (np.arange(100) < 8) | (np.arange(100) >= 96)  # blocks 0 and 12
  rows = mask & global_rows[None]
  np.testing.assert_allclose(real_rows(y, rows), real_rows(full, rows), atol=1e-5)
  middle = mask & ~global_rows[None]
  assert not np.allclose(real_rows(y, middle), real_rows(full, middle), atol=1e-3)


@pytest.mark.parametrize('length, block_size', [(24, 8), (9, 8), (61, 64)])
def test_bigbird_three_blocks_or_fewer_is_full_attention(length, block_size):
  # Default random options (3 random blocks, random_within 1024): a tiny config must just work.
  module = BigBirdAttention(DIM, HEADS, max_length=62, block_size=block_size, rngs=nnx.Rngs(0))
  x, mask = inputs(length, (length, length // 2 + 1))
  expected = dense_reference(module, x, full_allowed(mask))
  np.testing.assert_allclose(real_rows(apply(module, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)


def test_bigbird_random_blocks_fixed_seeded_and_per_head():
  x, mask = inputs(100, (100, 61))
  module = make(BigBirdAttention, max_length=128)
  y, (first, _) = apply_with_table(module, x, mask)
  first = np.asarray(first)
  assert first.shape == (HEADS, 13, 2)
  table = lambda module: np.asarray(apply_with_table(module, x, mask)[1][0])
  np.testing.assert_array_equal(table(module), first)  # call to call
  np.testing.assert_array_equal(table(make(BigBirdAttention, max_length=128)), first)
  assert not np.array_equal(table(make(BigBirdAttention, seed=1, max_length=128)), first)
  assert not np.array_equal(first[0], first[1])  # per head
  # The key is module state, not a parameter: checkpointed, never trained.
  assert isinstance(module.random_key, RandomFeatures)
  assert 'random_key' not in nnx.state(module, nnx.Param)
  # Training mode without dropout uses the same random graph as evaluation.
  np.testing.assert_array_equal(y, apply_training(module, x, mask, nnx.Rngs(dropout=1)))


def candidates(i, num_blocks, limit):
  if i in (0, num_blocks - 1):
    return set()
  top = num_blocks - 2 if limit is None else min(num_blocks - 2, limit - 1)
  return set(range(1, top + 1)) - {i - 1, i, i + 1}


def check_random_table(table, num_random, limit):
  """Every R(i) (any head, any draw): distinct blocks outside window(i) and G, within the limit,
  min(r, #candidates) of them."""
  blocks, valid = (np.asarray(t) for t in table)
  num_blocks = blocks.shape[-2]
  for index in np.ndindex(blocks.shape[:-2]):
    for i in range(num_blocks):
      chosen = blocks[index][i][valid[index][i]]
      pool = candidates(i, num_blocks, limit)
      assert len(set(chosen)) == len(chosen) == min(num_random, len(pool)), (index, i, chosen)
      assert set(chosen) <= pool, (index, i, chosen, pool)


def test_bigbird_random_blocks_valid_and_uniform():
  # Blocks 1..6 are candidates (limit 7): rows with 4 (all taken), 3 (< r) and 6 candidates.
  num_blocks, num_random, limit, rows = 20, 4, 7, (1, 3, 10)
  keys = jax.random.split(jax.random.key(0), 1000)
  draw = lambda key: random_block_table(key, HEADS, num_blocks, num_random, limit)
  table = jax.jit(jax.vmap(draw))(keys)  # [draws, H, nb, slots]
  check_random_table([t[:100] for t in table], num_random, limit)
  # Floyd's sampler: each candidate is in R(i) with probability min(r, c) / c.
  blocks, valid = (np.asarray(t).reshape(-1, num_blocks, t.shape[-1]) for t in table)
  for i in rows:
    pool = sorted(candidates(i, num_blocks, limit))
    counts = np.array([np.sum((blocks[:, i] == j) & valid[:, i]) for j in pool])
    np.testing.assert_allclose(counts / len(blocks), min(num_random, len(pool)) / len(pool),
                               atol=0.04)


def test_bigbird_locality():
  module = make(BigBirdAttention, max_length=100)
  x, mask = inputs(100, (100, 61))
  row, row_block = 50, 6
  y, (blocks, valid) = apply_with_table(module, x, mask)
  blocks, valid = np.asarray(blocks), np.asarray(valid)
  randoms = {int(j) for j in blocks[:, row_block][valid[:, row_block]]}
  pattern = {0, 12, row_block - 1, row_block, row_block + 1} | randoms
  outside = sorted(set(range(13)) - pattern)
  assert outside
  y = np.asarray(y)[0, row]

  def perturbed_row(position):
    x_changed = x.copy()
    x_changed[0, position] += 3.0
    return np.asarray(apply_with_table(module, x_changed, mask)[0])[0, row]

  for block in outside:
    np.testing.assert_allclose(perturbed_row(8 * block + 3), y, atol=1e-6)
  for block in sorted(pattern):
    assert not np.allclose(perturbed_row(8 * block + 3), y, atol=1e-4), block


@pytest.mark.parametrize('options, match', [
    (dict(block_size=0), 'BigBirdAttention option block_size = 0 is not valid: an integer >= 1'),
    (dict(block_size=2.5), 'option block_size = 2.5 is not valid'),
    (dict(num_random_blocks=-1), 'option num_random_blocks = -1 is not valid: an integer >= 0'),
    (dict(random_within=-1), 'option random_within = -1 is not valid'),
    (dict(num_random_blocks=16), r'num_random_blocks = 16 is not valid: at most 15 '
                                 r'with random_within = 1024 and block_size = 64'),
    (dict(block_size=512), r'num_random_blocks = 3 is not valid: at most 1 '),
    (dict(random_within=100), r'num_random_blocks = 3 is not valid: at most 0 '),
    (dict(window=3), "BigBirdAttention has no option 'window'"),
])
def test_bigbird_check_options(options, match):
  with pytest.raises(ValueError, match=match):
    BigBirdAttention.check_options(4001, **options)


def test_bigbird_check_options_accepts_what_can_fit():
  BigBirdAttention.check_options(62)  # nb = 1 at max_length: full attention, no error
  BigBirdAttention.check_options(4001, num_random_blocks=15)
  BigBirdAttention.check_options(4001, num_random_blocks=60, random_within=0)
  BigBirdAttention.check_options(4001, num_random_blocks=0, random_within=10)


# Sinkhorn ---------------------------------------------------------------------------------------


def numpy_sort_matrix(logits, block_real, activation, iterations, temperature):
  """P from logits [nb, nb] in float64, probability space, real blocks only."""
  real = np.flatnonzero(block_real)
  p = np.zeros_like(logits)
  s = np.exp(logits[np.ix_(real, real)] / temperature)
  if activation == 'softmax':
    s = s / s.sum(1, keepdims=True)
  else:
    for _ in range(iterations):
      s = s / s.sum(1, keepdims=True)
      s = s / s.sum(0, keepdims=True)
  p[np.ix_(real, real)] = s
  return p


def sinkhorn_reference(module, x, mask):
  """Module output from an explicit [N, 2N] attention (N = n padded to blocks): query t sees the
  real keys of its block and the real slots of its sorted block; float64 numpy."""
  n = x.shape[1]
  block = min(module.block_size, n)
  num_blocks = -(-n // block)
  size = num_blocks * block
  q, k, v = (np.pad(np.asarray(t, np.float64), ((0, 0), (0, 0), (0, size - n), (0, 0)))
             for t in projected_heads(module, x))
  real = np.pad(mask, ((0, 0), (0, size - n)))
  weights = np.asarray(module.sort_weights[...], np.float64)[:, :num_blocks]
  token_block = np.arange(size) // block
  same_block = token_block[:, None] == token_block[None, :]
  out = np.zeros_like(q)
  for b in range(x.shape[0]):
    m = real[b].reshape(num_blocks, block)
    for h in range(HEADS):
      kb, vb = k[b, h].reshape(num_blocks, block, -1), v[b, h].reshape(num_blocks, block, -1)
      summaries = (kb * m[..., None]).sum(1)
      p = numpy_sort_matrix(summaries @ weights, m.any(1), module.sort_activation,
                            module.sinkhorn_iterations, module.temperature)
      w = p @ m
      share = w / np.maximum(p.sum(1, keepdims=True), 1e-300)  # real share of each sorted slot
      slot_real = share > MIN_SLOT_WEIGHT
      sorted_k = np.einsum('ij,js,jsd->isd', p, m, kb) / np.where(slot_real, w, 1)[..., None]
      sorted_v = np.einsum('ij,js,jsd->isd', p, m, vb) / np.where(slot_real, w, 1)[..., None]
      keys = np.concatenate([k[b, h], sorted_k.reshape(size, -1)])
      values = np.concatenate([v[b, h], sorted_v.reshape(size, -1)])
      allowed = np.concatenate([same_block & real[b][None, :],
                                same_block & slot_real.reshape(-1)[None, :]], axis=1)
      scores = q[b, h] @ keys.T / np.sqrt(q.shape[-1])
      scores[:, size:] += np.log(np.where(slot_real, share, 1)).reshape(-1)[None, :]
      out[b, h] = masked_softmax_rows(scores, allowed) @ values
  return output_projection(module, out[:, :, :n])


SINKHORN_BALANCING = dict(sort_activation='sinkhorn', sinkhorn_iterations=3, temperature=0.5)


@pytest.mark.parametrize('length, lengths, options', [
    (41, (41, 19), {}), (41, (41, 19), SINKHORN_BALANCING), (37, (37, 37), {})])
def test_sinkhorn_equals_dense_reference(length, lengths, options):
  module = make(SinkhornAttention, **options)
  x, mask = inputs(length, lengths)
  np.testing.assert_allclose(real_rows(apply(module, x, mask), mask),
                             real_rows(sinkhorn_reference(module, x, mask), mask), atol=1e-5)


@pytest.mark.parametrize('activation, block_size', [('softmax', 64), ('sinkhorn', 37)])
def test_sinkhorn_single_block_is_full_attention(activation, block_size):
  module = make(SinkhornAttention, block_size=block_size, sort_activation=activation)
  x, mask = inputs(37, (37, 20))
  expected = dense_reference(module, x, full_allowed(mask))
  np.testing.assert_allclose(real_rows(apply(module, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)


def block_inputs(num_blocks=5, block=4, lengths=(20, 13)):
  q, k, v = np.random.default_rng(1).normal(
      size=(3, len(lengths), HEADS, num_blocks, block, 8)).astype(np.float32)
  mask = np.arange(num_blocks * block)[None] < np.array(lengths)[:, None]
  return q, k, v, mask.reshape(len(lengths), num_blocks, block)


@jax.jit
def attention_with_block_pattern(q, k, v, mask, sees):
  """Dense reference on the flattened sequence: query block i sees key block j iff sees[i, j]."""
  batch, heads, num_blocks, block, d = q.shape
  flat = lambda t: t.reshape(batch, heads, num_blocks * block, d)
  token_block = np.arange(num_blocks * block) // block
  allowed = sees[token_block][:, token_block][None, None] & mask.reshape(batch, 1, 1, -1)
  scores = jnp.where(allowed, flat(q) @ jnp.swapaxes(flat(k), -1, -2), -1e30)
  return (jax.nn.softmax(scores, axis=-1) @ flat(v)).reshape(q.shape)


def block_rows(y, mask):
  """Real rows of [B, H, nb, b, d] as [rows, H, d]."""
  batch, heads, num_blocks, block, d = y.shape
  y = np.asarray(y).reshape(batch, heads, num_blocks * block, d).transpose(0, 2, 1, 3)
  return y[mask.reshape(batch, -1)]


def test_sorted_attention_with_identity_is_local_attention():
  q, k, v, mask = block_inputs()
  identity = np.broadcast_to(np.eye(5, dtype=np.float32), (2, HEADS, 5, 5))
  y = sorted_attention(q, k, v, mask, identity)
  expected = attention_with_block_pattern(q, k, v, mask, np.eye(5, dtype=bool))
  np.testing.assert_allclose(block_rows(y, mask), block_rows(expected, mask), atol=1e-5)


def test_sorted_attention_with_permutation_is_dense_masked():
  q, k, v, mask = block_inputs()
  permutation = np.array([3, 1, 4, 0, 2])  # block 1 maps to itself
  permuted = np.broadcast_to(np.eye(5, dtype=np.float32)[permutation], (2, HEADS, 5, 5))
  y = sorted_attention(q, k, v, mask, permuted)
  sees = np.eye(5, dtype=bool) | np.eye(5, dtype=bool)[permutation]
  expected = attention_with_block_pattern(q, k, v, mask, sees)
  np.testing.assert_allclose(block_rows(y, mask), block_rows(expected, mask), atol=1e-5)
  # Not local attention: the sorted block adds keys.
  local = attention_with_block_pattern(q, k, v, mask, np.eye(5, dtype=bool))
  assert not np.allclose(block_rows(y, mask), block_rows(local, mask), atol=1e-3)
  # Locality: block 0 (sorted block 3) ignores keys/values of blocks 1, 2, 4, not of 0 and 3.
  for block in range(5):
    k_changed, v_changed = k.copy(), v.copy()
    k_changed[:, :, block] += 1.0
    v_changed[:, :, block] += 1.0
    changed = np.asarray(sorted_attention(q, k_changed, v_changed, mask, permuted))
    assert np.allclose(changed[:, :, 0], y[:, :, 0], atol=1e-6) == (block not in (0, 3)), block


def test_sinkhorn_balancing_converges():
  # Eager on purpose: five tiny graphs of different depth compile slower than they run.
  logits = np.random.default_rng(0).normal(size=(6, 6)).astype(np.float32)
  real = np.array([True] * 5 + [False])  # block 5 is all padding
  row_errors = []
  for iterations in (1, 2, 4, 8, 16):
    p = np.asarray(sort_matrix(logits, real, activation='sinkhorn', iterations=iterations))
    np.testing.assert_allclose(p[:5, :5].sum(0), 1.0, atol=1e-5)  # columns: exact each time
    np.testing.assert_array_equal(p[5], 0.0)
    np.testing.assert_array_equal(p[:, 5], 0.0)
    row_errors.append(np.abs(p[:5, :5].sum(1) - 1.0).max())
  assert all(a > b for a, b in zip(row_errors, row_errors[1:])), row_errors
  assert row_errors[-1] < 1e-4 and row_errors[0] > 1e-2, row_errors
  softmax = np.asarray(sort_matrix(logits, real))
  np.testing.assert_allclose(softmax[:5].sum(1), 1.0, atol=1e-6)
  expected = np.exp(logits[:5, :5]) / np.exp(logits[:5, :5]).sum(1, keepdims=True)
  np.testing.assert_allclose(softmax[:5, :5], expected, atol=1e-6)


def test_sort_matrix_all_padding_is_finite():
  real = np.zeros((4,), bool)
  logits = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
  for activation in ('softmax', 'sinkhorn'):
    total = lambda logits: jnp.sum(sort_matrix(logits, real, activation=activation))
    value, grad = jax.jit(jax.value_and_grad(total))(logits)
    assert np.isfinite(value) and np.isfinite(np.asarray(grad)).all()


def test_sorted_attention_gradient_is_finite_when_p_is_peaked_on_a_padded_block():
  # Block 0 sorts almost all its mass onto block 1, whose last two slots are padding: those slots
  # of sorted block 0 hold only P[0, 0] ~ exp(-scale) of real mass. Training at 4e-3 drove the
  # sort logits there and 1 / w^2 in the gradient overflowed to NaN (ListOps-mid, Sinkhorn).
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(1, 1, 2, 4, 3)), jnp.float32) for _ in range(3))
  mask = jnp.array([[[True] * 4, [True, True, False, False]]])

  def total(scale):
    logits = scale * jnp.array([[[[0.0, 1.0], [1.0, 0.0]]]])
    sort = sort_matrix(logits, jnp.any(mask, -1)[:, None])
    return jnp.sum(sorted_block_attention(q, k, v, mask, sort, Dropout(0.0), deterministic=True,
                                          rngs=None) ** 2)

  values = [jax.jit(jax.value_and_grad(total))(s) for s in (5.0, 13.0, 14.5, 40.0, 60.0, 90.0)]
  assert all(np.isfinite(value) and np.isfinite(grad) for value, grad in values)
  # Their real share falls below MIN_SLOT_WEIGHT between scales 13 and 14.5 and they are masked
  # from there on: the output is continuous across it (the slots' weight is their share).
  assert np.exp(-13.0) > MIN_SLOT_WEIGHT > np.exp(-14.5)
  np.testing.assert_allclose(values[2][0], values[1][0], rtol=1e-4)
  np.testing.assert_allclose(values[3][0], values[5][0], rtol=1e-6)


def test_sinkhorn_sort_net_routes():
  # LRA's contraction makes the output independent of the sort net. Its gradient under softmax
  # sorting: test_fully_padded_row_is_finite; here the output moves with W under Sinkhorn
  # balancing too.
  x, mask = inputs(41, (41, 19))
  module = make(SinkhornAttention, **SINKHORN_BALANCING)
  other = make(SinkhornAttention, **SINKHORN_BALANCING)
  other.sort_weights[...] = 5.0 * np.random.default_rng(9).normal(
      size=other.sort_weights.shape).astype(np.float32)
  assert not np.allclose(apply(other, x, mask), apply(module, x, mask), atol=1e-4)


def test_sinkhorn_whole_padding_blocks_change_nothing():
  # Fully padded blocks are not sort targets: padding 41 tokens to 64 (two more blocks).
  module = make(SinkhornAttention)
  x, mask = inputs(41, (41, 19))
  x_long = np.pad(x, ((0, 0), (0, 23), (0, 0)))
  mask_long = np.pad(mask, ((0, 0), (0, 23)))
  np.testing.assert_allclose(real_rows(apply(module, x_long, mask_long)[:, :41], mask),
                             real_rows(apply(module, x, mask), mask), atol=1e-5)


def test_sinkhorn_rejects_sequences_beyond_max_length():
  module = make(SinkhornAttention)  # max_length=64
  x, mask = inputs(65, (65, 10))
  with pytest.raises(ValueError, match=r'65.*64.*raise `max_length`'):
    module(x, mask)


@pytest.mark.parametrize('options, match', [
    (dict(block_size=0), 'SinkhornAttention option block_size = 0 is not valid: an integer >= 1'),
    (dict(sort_activation='gumbel'), "option sort_activation = 'gumbel' is not valid"),
    (dict(sinkhorn_iterations=0), 'option sinkhorn_iterations = 0 is not valid: an integer >= 1'),
    (dict(temperature=0.0), 'option temperature = 0.0 is not valid: a finite number > 0'),
    (dict(temperature=-1), 'option temperature = -1 is not valid'),
    (dict(temperature=float('inf')), 'option temperature = inf is not valid'),
    (dict(max_num_blocks=25), "SinkhornAttention has no option 'max_num_blocks'"),
])
def test_sinkhorn_check_options(options, match):
  with pytest.raises(ValueError, match=match):
    SinkhornAttention.check_options(1001, **options)


def test_bigbird_real_rows_do_not_depend_on_the_padded_length():
  """The same 30 real tokens padded to 40 and to 64: at their own lengths the block counts (5,
  8) move the last global block and redraw the random blocks, so the real rows differ; the
  module fills every input to max_length first, so its real rows are the same."""
  module = make(BigBirdAttention, max_length=64, block_size=8, num_random_blocks=2,
                random_within=0)
  x, mask = inputs(64, (30, 30))
  short_x, short_mask = x[:, :40], mask[:, :40]
  at_own_length = lambda x, mask: np.asarray(module.attend(x, mask, deterministic=True,
                                                           rngs=None))[:, :30]
  assert not np.allclose(at_own_length(short_x, short_mask), at_own_length(x, mask), atol=1e-3)
  np.testing.assert_allclose(np.asarray(module(short_x, short_mask))[:, :30],
                             np.asarray(module(x, mask))[:, :30], atol=1e-5)
