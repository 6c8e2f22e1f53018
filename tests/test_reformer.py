"""Tests of lra_luna.models.reformer: angular LSH, LSH attention against dense references built
here from the module's own buckets and chunking, padding, determinism of the hash, sparsity."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna.models.attention import merge_heads, split_heads
from lra_luna.models.attention.base import RandomFeatures
from lra_luna.models.attention.reformer import ReformerAttention, angular_buckets

DIM, HEADS = 16, 2
SMALL_OPTIONS = dict(num_hashes=2, num_buckets=4)  # several rounds, several chunks


def make(seed=0, max_length=64, **options):
  return ReformerAttention(DIM, HEADS, max_length=max_length, rngs=nnx.Rngs(seed),
                           **{**SMALL_OPTIONS, **options})


@nnx.jit(static_argnames='deterministic')
def run(module, x, mask, deterministic=True, rngs=None):
  """run(module, x, mask) compiled: one XLA program per configuration instead of one per op."""
  return module(x, mask, deterministic=deterministic, rngs=rngs)


def inputs(length, lengths, seed=0):
  # numpy draws: jax.random would compile a sampler per shape (seconds on a small CPU).
  x = jnp.asarray(np.random.default_rng(seed).normal(size=(len(lengths), length, DIM)),
                  jnp.float32)
  mask = jnp.arange(length)[None, :] < jnp.array(lengths)[:, None]
  return x, mask


def real_rows(y, mask):
  return np.asarray(y)[np.asarray(mask)]


def heads_of(module, x):
  """Queries (unscaled) and values [B, H, n, d] from the module's projections, float64."""
  q = np.asarray(split_heads(module.query(x), module.num_heads), np.float64)
  v = np.asarray(split_heads(module.value(x), module.num_heads), np.float64)
  return q, v


def keys_of(module, q):
  return q / np.linalg.norm(q, axis=-1, keepdims=True) if module.normalize_keys else q


def dense_shared_qk_reference(module, x, mask):
  """out(softmax(q k^T / sqrt(d)) v), k = q (or q / |q|), padded keys masked: dense, n x n."""
  q, v = heads_of(module, x)
  k = keys_of(module, q)
  scores = np.einsum('bhnd,bhmd->bhnm', q, k) / math.sqrt(q.shape[-1])
  scores = np.where(np.asarray(mask)[:, None, None, :], scores, -1e30)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  y = np.einsum('bhnm,bhmd->bhnd', probs, v)
  return module.out(merge_heads(jnp.asarray(y, jnp.float32)))


def allowed_sets(module, x, mask):
  """allowed [B, H, rounds, n, n] (True = query i sees key j in that round), from the module's
  bucket ids and the spec's chunking: padded/filler positions take bucket B, each round is sorted
  stably by bucket, the rounds are concatenated and cut into chunks of c, and chunk t sees chunks
  t and t - 1 (cyclic over all chunks); only real keys are allowed."""
  mask = np.asarray(mask)
  b, n = mask.shape
  rounds, buckets = module.num_hashes, module.num_buckets
  if module.chunk_length == 0:
    padded = -(-n // buckets) * buckets
    chunk = padded // buckets
  else:
    chunk = min(module.chunk_length, n)
    padded = -(-n // chunk) * chunk
  q = split_heads(module.query(x), module.num_heads)
  ids = np.full((b, module.num_heads, rounds, padded), buckets)
  ids[..., :n] = np.where(mask[:, None, None, :],
                          np.asarray(angular_buckets(q, module.rotations[...])), buckets)
  order = np.argsort(ids, axis=-1, kind='stable').reshape(b, module.num_heads, -1)
  num_chunks = rounds * padded // chunk
  allowed = np.zeros((b, module.num_heads, rounds, n, n), bool)
  for batch in range(b):
    for head in range(module.num_heads):
      members = order[batch, head].reshape(num_chunks, chunk)
      for slot, i in enumerate(order[batch, head]):
        if i >= n:
          continue
        t = slot // chunk
        seen = np.concatenate([members[t], members[(t - 1) % num_chunks]])
        seen = seen[seen < n]
        allowed[batch, head, slot // padded, i, seen] = True
  return allowed & mask[:, None, None, None, :]


def lsh_reference(module, x, mask):
  """Dense masked softmax per round over `allowed_sets` (each key once), rounds combined by
  their log-normalisers, then W_o: float64, n x n."""
  allowed = allowed_sets(module, x, mask)
  q, v = heads_of(module, x)
  k = keys_of(module, q)
  scores = np.einsum('bhnd,bhmd->bhnm', q, k) / math.sqrt(q.shape[-1])
  if module.mask_self:
    scores = scores - 1e5 * np.eye(q.shape[2])
  scores = np.where(allowed, scores[:, :, None], -np.inf)  # [B, H, rounds, n, n]
  top = np.max(scores, axis=-1, keepdims=True)
  top = np.where(np.isfinite(top), top, 0.0)  # padded query rows: no key at all
  sums = np.exp(scores - top).sum(-1, keepdims=True)
  log_normaliser = np.log(np.maximum(sums, 1e-300)) + top  # [B, H, rounds, n, 1]
  outputs = np.exp(scores - log_normaliser) @ v[:, :, None]  # [B, H, rounds, n, d]
  weights = np.exp(log_normaliser - log_normaliser.max(axis=2, keepdims=True))
  weights /= weights.sum(axis=2, keepdims=True)
  y = (weights * outputs).sum(axis=2)
  return module.out(merge_heads(jnp.asarray(y, jnp.float32))), allowed


# Angular LSH --------------------------------------------------------------------------------


def test_buckets_scale_invariant_and_antipodal():
  rng = np.random.default_rng(0)
  rotations = rng.normal(size=(3, 8, 5)).astype(np.float32)  # 3 rounds, B = 10
  q = rng.normal(size=(2, 4, 50, 8)).astype(np.float32)
  buckets = jax.jit(angular_buckets)
  ids = np.asarray(buckets(q, rotations))
  assert ids.shape == (2, 4, 3, 50) and ids.min() >= 0 and ids.max() < 10
  assert len(np.unique(ids)) == 10  # every bucket used: the test can see a wrong id
  for alpha in (0.01, 3.0, 100.0):
    np.testing.assert_array_equal(buckets(alpha * q, rotations), ids)
  np.testing.assert_array_equal(buckets(-q, rotations), (ids + 5) % 10)


# Degenerate cases: full shared-QK attention -------------------------------------------------


def test_two_buckets_one_round_is_full_shared_qk_attention():
  # LRA's layout with B = 2: two chunks of N / 2, each seeing both, i.e. every key once.
  module = make(num_hashes=1, num_buckets=2)
  x, mask = inputs(37, (37, 23))
  expected = dense_shared_qk_reference(module, x, mask)
  np.testing.assert_allclose(real_rows(run(module, x, mask), mask), real_rows(expected, mask),
                             atol=1e-5)
  # With more buckets it is not (the comparison above can fail).
  module = make()
  expected = dense_shared_qk_reference(module, x, mask)
  assert not np.allclose(real_rows(run(module, x, mask), mask), real_rows(expected, mask),
                         atol=1e-3)


def test_multi_round_equals_single_round_when_every_round_sees_all_keys():
  # chunk_length >= n: each round is one chunk, and a chunk pair holds every key (twice with
  # several rounds, counted once): every round is full attention, and so is their mix.
  x, mask = inputs(37, (37, 23))
  single = make(num_hashes=1, chunk_length=64)
  multi = make(num_hashes=3, chunk_length=64)  # same seed: same projections
  expected = real_rows(dense_shared_qk_reference(single, x, mask), mask)
  y_single = real_rows(run(single, x, mask), mask)
  np.testing.assert_allclose(y_single, expected, atol=1e-5)
  np.testing.assert_allclose(real_rows(run(multi, x, mask), mask), y_single, atol=1e-5)


# Dense reference on random cases ------------------------------------------------------------


@pytest.mark.parametrize('length, lengths, options', [
    (37, (37, 23), dict(num_hashes=2, num_buckets=4)),  # LRA layout: N 40, chunks of 10
    (41, (41, 30), dict(num_hashes=2, num_buckets=4, chunk_length=8, normalize_keys=True,
                        mask_self=True)),  # paper: chunks of 8, N 48
    (13, (13, 9), dict(num_hashes=3, num_buckets=4, chunk_length=8)),  # pairs span rounds
    (13, (13, 9), dict(num_hashes=1, num_buckets=4, chunk_length=16, mask_self=True)),  # 1 chunk
])
def test_matches_dense_reference_from_its_own_buckets(length, lengths, options):
  module = make(max_length=length, **options)  # no fill to max_length: the layout at n
  x, mask = inputs(length, lengths, seed=3)
  expected, allowed = lsh_reference(module, x, mask)
  np.testing.assert_allclose(real_rows(run(module, x, mask), mask), real_rows(expected, mask),
                             atol=2e-5)
  if module.num_hashes * length > 2 * min(module.chunk_length or length, length):
    # Sparse cases: some real query misses some real key in some round.
    real = np.asarray(mask)[:, None, None, :, None] & np.asarray(mask)[:, None, None, None, :]
    assert not allowed[np.broadcast_to(real, allowed.shape)].all()


def test_output_row_ignores_keys_outside_its_buckets():
  # With a zero query bias, x_j -> 2 x_j keeps q_j's buckets (scale invariance), so no chunk
  # changes: y_i moves only if j is in i's allowed set in some round of some head.
  module = make(num_hashes=1, num_buckets=4, chunk_length=8, max_length=41)
  module.query.bias[...] = jnp.zeros_like(module.query.bias[...])
  x, mask = inputs(41, (41, 41), seed=5)
  _, allowed = lsh_reference(module, x, mask)
  seen = allowed[0].any(axis=(0, 1))  # [n, n] over heads and rounds
  i = 20
  outside = np.flatnonzero(~seen[i])[0]
  inside = np.flatnonzero(seen[i] & (np.arange(41) != i))[0]
  y = run(module, x, mask)
  for j, changes in ((outside, False), (inside, True)):
    y_perturbed = run(module, x.at[0, j].multiply(2.0), mask)
    assert np.allclose(y[0, i], y_perturbed[0, i], atol=1e-6) != changes, (j, changes)


# The hash's random rotations ----------------------------------------------------------------


def test_rotations_are_seeded_state_not_params():
  module = make()
  assert isinstance(module.rotations, RandomFeatures)
  assert not isinstance(module.rotations, nnx.Param)
  assert module.rotations[...].shape == (2, DIM // HEADS, 2)  # [rounds, d, B / 2]
  assert 'rotations' not in nnx.state(module, nnx.Param)
  np.testing.assert_array_equal(make(seed=0).rotations[...], module.rotations[...])
  assert not np.allclose(make(seed=1).rotations[...], module.rotations[...])
  rounds = module.rotations[...]
  assert not np.allclose(rounds[0], rounds[1])  # one rotation per round


def test_deterministic_across_calls_and_in_training():
  module = make()
  x, mask = inputs(37, (37, 23))
  first = run(module, x, mask)
  np.testing.assert_array_equal(run(module, x, mask), first)
  trained = run(module, x, mask, False, nnx.Rngs(dropout=1))
  np.testing.assert_array_equal(trained, first)  # no dropout: no fresh randomness per call
  other = make(seed=1)
  assert not np.allclose(run(other, x, mask), first, atol=1e-3)


# Protocol: padding, jit, dtypes, lengths, dropout -------------------------------------------


@pytest.mark.parametrize('length, options', [
    (37, {}),
    (41, dict(chunk_length=8, normalize_keys=True, mask_self=True)),
])
def test_padding_invariance(length, options):
  module = make(**options)
  x, mask = inputs(length, (length, 23))
  noise = 10.0 * inputs(length, (length, 23), seed=7)[0]
  x_changed = jnp.where(mask[..., None], x, noise)
  np.testing.assert_allclose(real_rows(run(module, x, mask), mask),
                             real_rows(run(module, x_changed, mask), mask), atol=1e-5)


def test_jit_matches_eager():
  module = make()
  x, mask = inputs(37, (37, 23))
  np.testing.assert_allclose(run(module, x, mask), module(x, mask), atol=1e-5)


def test_bfloat16_runs_and_is_close_to_float32():
  x, mask = inputs(37, (37, 23))
  y32 = real_rows(run(make(), x, mask), mask)
  y16 = run(make(dtype=jnp.bfloat16), x.astype(jnp.bfloat16), mask)
  assert y16.dtype == jnp.bfloat16
  y16 = real_rows(y16.astype(jnp.float32), mask)
  assert np.isfinite(y16).all()
  # bf16 queries can flip a near-tie bucket; most rows stay close.
  close = np.all(np.abs(y16 - y32) < 0.05 + 0.05 * np.abs(y32), axis=-1)
  assert close.mean() > 0.9, close.mean()


@pytest.mark.parametrize('length', [1, 1001])  # tiny; LRA's Text 1K (N 1004, chunks of 251)
def test_any_length(length):
  module = make()
  x, mask = inputs(length, (length, max(length // 2, 1)))
  y = run(module, x, mask)
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()


def test_fully_padded_row_and_gradient_finite():
  module = make()
  x, mask = inputs(37, (37, 0))
  assert np.isfinite(np.asarray(run(module, x, mask))).all()
  graphdef, state = nnx.split(module)
  loss = lambda x: jnp.sum(nnx.merge(graphdef, state)(x, mask) ** 2)
  grad = jax.jit(jax.grad(loss))(x)
  assert np.isfinite(np.asarray(grad)).all() and np.abs(np.asarray(grad[0])).max() > 0


def test_training_mode_with_dropout_runs():
  module = make(attention_dropout=0.1)
  x, mask = inputs(37, (37, 23))
  y = run(module, x, mask, False, nnx.Rngs(dropout=3))
  assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()
  assert not np.allclose(y, run(module, x, mask, False, nnx.Rngs(dropout=4)))


# Options and cost ---------------------------------------------------------------------------


@pytest.mark.parametrize('option, value, valid', [
    ('num_buckets', 3, 'an even integer >= 2'),
    ('num_buckets', 0, 'an even integer >= 2'),
    ('num_buckets', 2.0, 'an even integer >= 2'),
    ('num_hashes', 0, 'an integer >= 1'),
    ('chunk_length', -1, 'an integer >= 0'),
    ('normalize_keys', 1, 'True or False'),
    ('mask_self', 'yes', 'True or False'),
])
def test_check_options_refuses(option, value, valid):
  message = f'^ReformerAttention option {option} = {value!r} is not valid: {valid}'
  with pytest.raises(ValueError, match=message):
    ReformerAttention.check_options(max_length=64, **{option: value})
  with pytest.raises(ValueError, match=message):
    make(**{option: value})
  ReformerAttention.check_options(max_length=64)  # the defaults pass



def largest_intermediate(jaxpr) -> int:
  """The largest array size among the outputs of every equation, sub-jaxprs included."""
  largest = 0
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      largest = max(largest, int(np.prod(getattr(var.aval, 'shape', ()))))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          largest = max(largest, largest_intermediate(sub.jaxpr))
        elif isinstance(sub, jax.extend.core.Jaxpr):
          largest = max(largest, largest_intermediate(sub))
  return largest


@pytest.mark.parametrize('options, sparse', [
    (dict(num_hashes=1, num_buckets=4, chunk_length=32), True),  # the paper's mode: O(n m)
    (dict(num_hashes=1, num_buckets=2, chunk_length=0), False),   # LRA, B = 2: n x n scores
])
def test_no_n_by_n_tensor_with_fixed_chunks(options, sparse):
  n = 512
  module = make(**options)
  x, mask = inputs(n, (n,))
  graphdef, state = nnx.split(module)
  jaxpr = jax.make_jaxpr(lambda state, x, mask: nnx.merge(graphdef, state)(x, mask))(
      state, x, mask)
  assert (largest_intermediate(jaxpr.jaxpr) < n * n) == sparse


@pytest.mark.parametrize('options', [{}, dict(chunk_length=8)])
def test_real_rows_do_not_depend_on_the_padded_length(options):
  """The same 30 real tokens padded to 32 and to 64: at their own lengths the chunks (LRA's N /
  B: 8 or 16) or what the first chunk looks back to (cyclically, the last chunk: real tokens at
  32, filler at 64) differ, and so do the real rows; the module fills every input to max_length
  first, so its real rows are the same."""
  module = make(max_length=64, num_hashes=1, num_buckets=4, **options)
  x, mask = inputs(64, (30, 30), seed=2)
  short_x, short_mask = x[:, :32], mask[:, :32]
  at_own_length = lambda x, mask: np.asarray(module.attend(x, mask, deterministic=True,
                                                           rngs=None))[:, :30]
  assert not np.allclose(at_own_length(short_x, short_mask), at_own_length(x, mask), atol=1e-3)
  np.testing.assert_allclose(np.asarray(run(module, short_x, short_mask))[:, :30],
                             np.asarray(run(module, x, mask))[:, :30], atol=1e-5)
