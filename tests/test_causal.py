"""Tests of causal Luna attention (paper §3.3 eq. 7, luna.md §6) and the decoder-only LM."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lra_luna.models.attention.causal_luna import (CausalLunaAttention, CausalLunaLM, causal_luna_chunked,
                             causal_luna_cumsum, causal_luna_direct, feature_map,
                             greedy_generate)

DIM, HEADS, PACK = 16, 2, 4
SEQ = 11  # one module test length, so compilations are shared
# Jitted once per shape: far fewer compilations than eager op-by-op dispatch, so the file stays fast.
DIRECT = jax.jit(causal_luna_direct)
FORMS = {'cumsum': jax.jit(causal_luna_cumsum),
         'chunked': jax.jit(causal_luna_chunked, static_argnames='chunk_size')}


def random_heads(seed, n, batch=2, heads=2, head_dim=8, pack=PACK, omega='softplus'):
  """q, k, v [B, H, n, dh] and a positive phi [B, H, n, l], as the module would produce."""
  rng = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(rng.standard_normal((batch, heads, n, head_dim)), jnp.float32)
             for _ in range(3))
  phi = feature_map(omega)(jnp.asarray(rng.standard_normal((batch, heads, n, pack)), jnp.float32))
  return q * head_dim**-0.5, k, v, phi


def make_attention(seed=0, **kwargs):
  return CausalLunaAttention(DIM, HEADS, rngs=nnx.Rngs(seed), **kwargs)


@nnx.jit
def apply(attn, x, p):
  return attn(x, p)


@nnx.jit
def apply_with_dropout(attn, x, p, rngs):
  return attn(x, p, deterministic=False, rngs=rngs)


@nnx.jit
def attention_step(attn, x_t, cache):
  return attn.step(x_t, cache)


@nnx.jit
def lm_logits(lm, tokens):
  return lm(tokens)


@nnx.jit
def decode_step(lm, token, cache):
  return lm.decode_step(token, cache)


def random_inputs(seed, n, batch=2):
  # numpy rather than jax.random: eager threefry compiles per shape and would dominate the runtime.
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.standard_normal((batch, n, DIM)), jnp.float32),
          jnp.asarray(rng.standard_normal((PACK, DIM)), jnp.float32))


# ----------------------------------------------------------------------------- feature maps


def test_softplus_is_base2_softplus_with_unit_value_at_zero():
  omega = feature_map('softplus')
  assert float(omega(jnp.float32(0.0))) == pytest.approx(1.0, abs=1e-7)
  x = np.linspace(-6.0, 6.0, 13)
  np.testing.assert_allclose(omega(jnp.asarray(x)), np.log2(1.0 + 2.0**x), rtol=1e-6, atol=1e-7)


def test_elu_feature_map_is_elu_plus_one():
  x = jnp.array([-3.0, 0.0, 2.0])
  np.testing.assert_allclose(feature_map('elu')(x), [math.exp(-3.0), 1.0, 3.0], rtol=1e-6)


def test_unknown_feature_map_raises_with_valid_names():
  with pytest.raises(ValueError, match="'softplus', 'elu'"):
    feature_map('relu')
  with pytest.raises(ValueError, match='feature map'):
    make_attention(feature_map='relu')
  with pytest.raises(ValueError, match='implementation'):
    make_attention(implementation='fast')


# ----------------------------------------------------------------------------- the three forms


@pytest.mark.parametrize('omega', ['softplus', 'elu'])
@pytest.mark.parametrize('n, chunk_size', [(32, 8), (29, 8), (5, 8), (17, 1)])
@pytest.mark.parametrize('form', sorted(FORMS))
def test_linear_forms_equal_direct_form(form, n, chunk_size, omega):
  q, k, v, phi = random_heads(n, n, omega=omega)
  out_direct, probs_direct = DIRECT(q, k, v, phi)
  kwargs = dict(chunk_size=chunk_size) if form == 'chunked' else {}
  out, probs = FORMS[form](q, k, v, phi, **kwargs)
  assert out.shape == q.shape and probs.shape == phi.shape
  np.testing.assert_allclose(probs, probs_direct, atol=1e-5)
  np.testing.assert_allclose(out, out_direct, atol=1e-5)


@pytest.mark.parametrize('form', sorted(FORMS))
def test_linear_forms_equal_direct_form_with_dropout_on_a(form):
  q, k, v, phi = random_heads(3, 21)
  keep = np.random.default_rng(7).random(phi.shape) < 0.7
  scale = jnp.asarray(keep / 0.7, jnp.float32)
  out_direct, probs_direct = DIRECT(q, k, v, phi, a_dropout_scale=scale)
  kwargs = dict(chunk_size=8) if form == 'chunked' else {}
  out, probs = FORMS[form](q, k, v, phi, a_dropout_scale=scale, **kwargs)
  np.testing.assert_allclose(probs, probs_direct, atol=1e-5)
  np.testing.assert_allclose(out, out_direct, atol=1e-5)
  assert np.all(np.asarray(probs)[~keep] == 0.0)


# ----------------------------------------------------------------------------- module


def per_head_reference(attn, x, p, omega):
  """luna.md §6 written out with loops over t, float64, from the module's own projections."""
  linear = lambda layer, a: a @ np.asarray(layer.kernel[...], np.float64) + np.asarray(
      layer.bias[...], np.float64)
  x, p = np.asarray(x, np.float64), np.asarray(p, np.float64)
  batch, n, dim = x.shape
  dh = dim // HEADS
  heads = lambda a: [a[..., h * dh:(h + 1) * dh] for h in range(HEADS)]
  pq = heads(linear(attn.pack_query, p) * dh**-0.5)  # [l, dh] per head
  pc = heads(linear(attn.pack_context, x))
  q = heads(linear(attn.query, x) * dh**-0.5)
  k = heads(linear(attn.key, x))
  v = k if attn.value is None else heads(linear(attn.value, x))
  out = np.zeros((batch, n, dim))
  for b in range(batch):
    for h in range(HEADS):
      phi = np.asarray(omega(jnp.asarray(pc[h][b] @ pq[h].T)), np.float64)  # [n, l]
      for t in range(1, n + 1):
        past = slice(0, t)
        scores = (q[h][b][t - 1] @ k[h][b][past].T) @ phi[past] / t  # sum_j (q_t.k_j) phi_j / t
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        out[b, t - 1, h * dh:(h + 1) * dh] = (probs @ phi[past].T) @ v[h][b][past] / t
  return linear(attn.out, out)


@pytest.mark.parametrize('implementation', ['chunked', 'cumsum', 'direct'])
@pytest.mark.parametrize('tie_kv, omega', [(False, 'softplus'), (True, 'elu')])
def test_module_matches_per_head_loops(implementation, tie_kv, omega):
  attn = make_attention(implementation=implementation, tie_kv=tie_kv, feature_map=omega,
                        chunk_size=4)
  x, p = random_inputs(1, SEQ)
  expected = per_head_reference(attn, x, p, feature_map(omega))
  np.testing.assert_allclose(apply(attn, x, p), expected, atol=1e-5)


@pytest.mark.parametrize('implementation', ['chunked', 'cumsum', 'direct'])
def test_module_is_causal(implementation):
  attn = make_attention(implementation=implementation, chunk_size=4)
  x, p = random_inputs(2, SEQ)
  t = 5
  changed = x.at[:, t + 1:].set(random_inputs(9, SEQ - t - 1)[0])
  y, y_changed = apply(attn, x, p), apply(attn, changed, p)
  np.testing.assert_allclose(y_changed[:, :t + 1], y[:, :t + 1], atol=1e-6)
  assert not np.allclose(y_changed[:, t + 1:], y[:, t + 1:], atol=1e-3)


def test_module_accepts_batched_p():
  attn = make_attention()
  x, p = random_inputs(3, SEQ)
  batched_p = jnp.broadcast_to(p, (2, *p.shape))
  np.testing.assert_allclose(apply(attn, x, batched_p), apply(attn, x, p), atol=1e-6)


def test_dropout_draws_one_mask_for_every_implementation():
  x, p = random_inputs(4, SEQ)
  outputs = []
  for implementation in ('chunked', 'cumsum', 'direct'):
    attn = make_attention(implementation=implementation, attention_dropout=0.3, chunk_size=4)
    outputs.append(apply_with_dropout(attn, x, p, nnx.Rngs(dropout=5)))
  np.testing.assert_allclose(outputs[1], outputs[0], atol=1e-5)
  np.testing.assert_allclose(outputs[2], outputs[0], atol=1e-5)
  assert not np.allclose(outputs[0], apply(attn, x, p), atol=1e-3)


@pytest.mark.parametrize('token_rank', [2, 3])
def test_module_step_equals_full_pass(token_rank):
  attn = make_attention(chunk_size=4)
  x, p = random_inputs(5, SEQ)
  full = apply(attn, x, p)
  cache = attn.init_cache(x.shape[0], p)
  for t in range(x.shape[1]):
    x_t = x[:, t] if token_rank == 2 else x[:, t:t + 1]
    y_t, cache = attention_step(attn, x_t, cache)
    assert y_t.shape == x_t.shape
    np.testing.assert_allclose(y_t.reshape(full[:, t].shape), full[:, t], atol=1e-5)
  assert int(cache.step) == x.shape[1]
  assert cache.key_pack_sum.shape == (2, HEADS, DIM // HEADS, PACK)
  assert cache.pack_value_sum.shape == (2, HEADS, PACK, DIM // HEADS)


# ----------------------------------------------------------------------------- memory


def compiled_memory(implementation, n, *, dim=32, heads=2, pack=16, chunk_size=32):
  """Bytes of temporaries and outputs of the jitted causal layer on x [1, n, dim]."""
  attn = CausalLunaAttention(dim, heads, implementation=implementation, chunk_size=chunk_size,
                             rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(attn)
  forward = lambda state, x, p: nnx.merge(graphdef, state)(x, p)
  x, p = jnp.zeros((1, n, dim)), jnp.zeros((pack, dim))
  stats = jax.jit(forward).lower(state, x, p).compile().memory_analysis()
  if stats is None:
    pytest.skip('memory_analysis is not available on this backend')
  return stats.temp_size_in_bytes + stats.output_size_in_bytes, stats.temp_size_in_bytes


def test_chunked_memory_grows_linearly_and_beats_cumsum():
  chunked = {n: compiled_memory('chunked', n) for n in (256, 512, 1024)}
  assert chunked[512][0] / chunked[256][0] <= 2.2
  assert chunked[1024][0] / chunked[512][0] <= 2.2
  assert chunked[1024][1] < compiled_memory('cumsum', 1024)[1]
  # Control: the measurement does see the direct form's n^2 growth.
  direct = {n: compiled_memory('direct', n)[0] for n in (512, 1024)}
  assert direct[1024] / direct[512] > 3.0


# ----------------------------------------------------------------------------- language model


def make_lm(seed=0, **kwargs):
  config = dict(vocab_size=11, dim=DIM, num_heads=HEADS, num_layers=2, ffn_dim=32,
                pack_length=PACK, max_length=32, chunk_size=4)
  return CausalLunaLM(**{**config, **kwargs}, rngs=nnx.Rngs(seed))


def test_layers_own_distinct_pack_parameters_and_length_is_checked():
  lm = make_lm()
  packs = [np.asarray(layer.pack[...]) for layer in lm.layers]
  assert packs[0].shape == (PACK, DIM) and not np.allclose(packs[0], packs[1])
  with pytest.raises(ValueError, match='max_length'):
    lm(jnp.zeros((1, 33), jnp.int32))


def test_lm_decode_step_equals_full_pass():
  lm = make_lm(dropout=0.1, attention_dropout=0.1)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, 11, (2, 9)), jnp.int32)
  full = lm_logits(lm, tokens)
  assert full.shape == (2, 9, 11)
  cache = lm.init_cache(2)
  for t in range(tokens.shape[1]):
    logits, cache = decode_step(lm, tokens[:, t], cache)
    np.testing.assert_allclose(logits, full[:, t], atol=1e-5)


def test_greedy_generate_follows_full_pass_argmax():
  lm = make_lm()
  prompt = jnp.array([[1, 2, 3], [4, 5, 6]], jnp.int32)
  tokens = greedy_generate(lm, prompt, 5)
  assert tokens.shape == (2, 8)
  np.testing.assert_array_equal(tokens[:, :3], prompt)
  expected_next = jnp.argmax(lm_logits(lm, tokens[:, :-1]), axis=-1)[:, 2:]
  np.testing.assert_array_equal(tokens[:, 3:], expected_next)


def test_lm_trains_on_a_repeated_sequence():
  lm = make_lm(num_layers=1, dropout=0.1, attention_dropout=0.1)
  tokens = jnp.tile(jnp.array([1, 5, 2, 7, 3, 9, 4]), (2, 3))  # [2, 21]
  inputs, targets = tokens[:, :-1], tokens[:, 1:]
  graphdef, params, rest = nnx.split(lm, nnx.Param, ...)

  def loss_fn(params, key):
    model = nnx.merge(graphdef, params, rest)
    logits = model(inputs, deterministic=False, rngs=nnx.Rngs(dropout=key))
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

  optimizer = optax.adam(3e-3)

  @jax.jit
  def train_step(params, opt_state, key):
    loss, grads = jax.value_and_grad(loss_fn)(params, key)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state = optimizer.init(params)
  losses = []
  for step in range(30):
    params, opt_state, loss = train_step(params, opt_state, jax.random.key(step))
    losses.append(float(loss))
  assert np.all(np.isfinite(losses))
  # Dropout makes single losses noisy; the drop here is several-fold.
  assert np.mean(losses[-3:]) < 0.5 * losses[0]
