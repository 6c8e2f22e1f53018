"""Luna attention against the spec's formulas, written out per head; models' shapes, padding
invariance, pooling heads and their errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import config_lib
from lra_luna import registry
from lra_luna.models import attention
from lra_luna.models import classifier as models
from lra_luna.models.heads import classification
from lra_luna.models import encoder
from lra_luna.models.encoder import luna as luna_encoder
import tiny  # the shared tiny run and model (tests/tiny.py)


small_model_config = tiny.model_config  # the shared tiny model (tests/tiny.py)


def linear(layer, x):
  return np.asarray(x) @ np.asarray(layer.kernel[...]) + np.asarray(layer.bias[...])


def softmax(s):
  s = s - s.max(-1, keepdims=True)
  e = np.exp(s)
  return e / e.sum(-1, keepdims=True)


def direct_luna(module, x, p, x_mask, p_mask, num_heads, num_pack_heads):
  """luna.md §1 written out head by head, batch element by batch element, in numpy."""
  b, n, d = x.shape
  l = p.shape[1]
  pack_value = module.pack_key if module.tie_kv else module.pack_value
  unpack_value = module.unpack_key if module.tie_kv else module.unpack_value
  yp = np.zeros((b, l, d))
  yx_heads = np.zeros((b, n, d))
  dp, dh = d // num_pack_heads, d // num_heads
  for i in range(b):
    qp, kp, vp = linear(module.pack_query, p[i]), linear(module.pack_key, x[i]), linear(pack_value, x[i])
    for h in range(num_pack_heads):
      cols = slice(h * dp, (h + 1) * dp)
      scores = qp[:, cols] * dp**-0.5 @ kp[:, cols].T
      scores = np.where(x_mask[i][None, :], scores, -np.inf)
      yp[i, :, cols] = softmax(scores) @ vp[:, cols]
    qu, ku, vu = linear(module.unpack_query, x[i]), linear(module.unpack_key, yp[i]), linear(unpack_value, yp[i])
    for h in range(num_heads):
      cols = slice(h * dh, (h + 1) * dh)
      scores = qu[:, cols] * dh**-0.5 @ ku[:, cols].T
      scores = np.where(p_mask[i][None, :], scores, -np.inf)
      yx_heads[i, :, cols] = softmax(scores) @ vu[:, cols]
  yx = np.stack([linear(module.out, yx_heads[i]) for i in range(b)])
  return yx, yp


@pytest.mark.parametrize('tie_kv', [False, True])
@pytest.mark.parametrize('num_heads,num_pack_heads', [(2, 2), (4, 2), (2, 8)])
def test_luna_attention_equals_direct_formula(tie_kv, num_heads, num_pack_heads):
  rng = np.random.RandomState(0)
  b, n, l, d = 2, 7, 5, 16
  module = attention.LunaAttention(d, num_heads, num_pack_heads, tie_kv=tie_kv,
                                   rngs=nnx.Rngs(1))
  x = rng.randn(b, n, d).astype(np.float32)
  p = rng.randn(b, l, d).astype(np.float32)
  x_mask = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
  p_mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
  yx, yp = module(jnp.asarray(x), jnp.asarray(p), jnp.asarray(x_mask), jnp.asarray(p_mask))
  want_yx, want_yp = direct_luna(module, x, p, x_mask, p_mask, num_heads, num_pack_heads)
  np.testing.assert_allclose(yp, want_yp, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(yx, want_yx, atol=1e-5, rtol=1e-5)


def test_tied_kv_parameter_count():
  """Tying removes exactly the two value projections (pack and unpack): 2 * (D*D + D)."""
  d = 16
  count = lambda m: sum(np.prod(a.shape) for a in jax.tree.leaves(nnx.state(m, nnx.Param)))
  untied = attention.LunaAttention(d, 2, tie_kv=False, rngs=nnx.Rngs(0))
  tied = attention.LunaAttention(d, 2, tie_kv=True, rngs=nnx.Rngs(0))
  assert count(untied) == 7 * (d * d + d)
  assert count(untied) - count(tied) == 2 * (d * d + d)


def real_and_padded(n_real=9, pad_a=3, pad_b=15, batch=2):
  rng = np.random.RandomState(3)
  real = rng.randint(1, 11, (batch, n_real))
  a = np.concatenate([real, np.zeros((batch, pad_a), int)], 1)
  b = np.concatenate([real, np.zeros((batch, pad_b), int)], 1)
  return a, b


MODEL_VARIANTS = [
    ('transformer', {}), ('transformer_fused', {}), ('luna16', {}),
    ('luna16', {'normalize_before': True}), ('luna16', {'contextual_p': False}),
    ('luna16', {'tie_kv': True, 'p_init': 'sinusoidal', 'num_pack_heads': 4}),
    ('luna16', {'positions': 'sinusoidal', 'init': 'bert'}),
    # Every baseline, with the registry's small test options (several blocks at these lengths:
    # BigBird's blocks of 4 give 6 and 10 blocks, Reformer's chunks N / 4 of 6 and 10 rows, so
    # computed at the input's own length their real rows would differ; they fill to max_length).
    *((name, {'attention_options': registry.get(name).test_options})
      for name in sorted(registry.baseline_classes())),
    ('reformer', {'attention_options': {**registry.get('reformer').test_options,
                                        'chunk_length': 4}}),
]


@pytest.mark.parametrize('model_name,overrides', MODEL_VARIANTS)
def test_padding_changes_no_real_output(model_name, overrides):
  mc = small_model_config(model_name, **overrides)
  model = models.build_model(mc, seed=0)
  # 20 real tokens padded to 24 and to 40 (the model's max_length).
  a, b = real_and_padded(n_real=20, pad_a=4, pad_b=20)
  # Real positions of X (with [CLS]) after the encoder, and every pooled representation.
  ids_a, mask_a = encoder.with_cls(jnp.asarray(a), 11, True)
  ids_b, mask_b = encoder.with_cls(jnp.asarray(b), 11, True)
  # Garbage token ids under the mask must not matter either.
  ids_b = jnp.where(mask_b, ids_b, 7)
  xa, packed_a = model.encoder(ids_a, mask_a)
  xb, packed_b = model.encoder(ids_b, mask_b)
  n = 1 + 20
  np.testing.assert_allclose(xa[:, :n], xb[:, :n], atol=1e-5)
  heads = ['cls', 'mean'] + (['mean_p'] if packed_a is not None else [])
  for head in heads:
    np.testing.assert_allclose(classification.pool(head, xa, mask_a, packed_a),
                               classification.pool(head, xb, mask_b, packed_b), atol=1e-5)
  assert model({'inputs': a}).shape == (2, 3)


PRUNING_VARIANTS = [
    ('transformer', {}, 'cls'), ('transformer_fused', {}, 'cls'), ('linformer', {}, 'cls'),
    ('luna16', {}, 'cls'), ('luna16', {}, 'mean_p'), ('luna16', {}, 'mean'),
    ('luna16', {'normalize_before': True}, 'cls'), ('luna16', {'normalize_before': True}, 'mean_p'),
    ('luna16', {'contextual_p': False, 'tie_kv': True}, 'mean_p'),
]


@pytest.mark.parametrize('model_name,overrides,head', PRUNING_VARIANTS)
def test_last_layer_computes_only_the_rows_the_head_reads(model_name, overrides, head):
  """prune_last_layer: the final X keeps only the rows the head pools ([CLS]; none for mean_p),
  and the logits and every parameter gradient equal those of computing every row."""
  a = real_and_padded()[0]
  results = {}
  for prune in (False, True):
    mc = small_model_config(model_name, head=head, prune_last_layer=prune, dropout=0.0,
                            attention_dropout=0.0, **overrides)
    model = models.build_model(mc, seed=0)
    ids, mask = encoder.with_cls(jnp.asarray(a), 11, True)
    x, _ = model.encoder(ids, mask, output_rows=model.output_rows)
    loss = lambda m: jnp.sum(jnp.sin(m({'inputs': a})))
    value, grads = nnx.value_and_grad(loss)(model)
    results[prune] = (x.shape[1], model({'inputs': a}), value, jax.tree.leaves(grads))
  rows = {'cls': 1, 'mean_p': 0, 'mean': a.shape[1] + 1}[head]
  assert (results[False][0], results[True][0]) == (a.shape[1] + 1, rows)
  np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(results[True][2], results[False][2], rtol=1e-5)
  assert len(results[True][3]) == len(results[False][3])
  for pruned, full in zip(results[True][3], results[False][3]):
    np.testing.assert_allclose(pruned, full, rtol=1e-4, atol=1e-6)


def test_mean_p_uses_p():
  mc = small_model_config('luna16', head='mean_p')
  model = models.build_model(mc, seed=0)
  ids = jnp.asarray(real_and_padded()[0])
  tokens, mask = encoder.with_cls(ids, 11, True)
  x, (p, p_mask) = model.encoder(tokens, mask)
  np.testing.assert_allclose(model.encode(ids), p.mean(axis=1), atol=1e-6)
  assert not np.allclose(model.encode(ids), x[:, 0])


def test_p_slot_mask_for_short_sequences():
  mask = jnp.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
  np.testing.assert_array_equal(luna_encoder.p_slot_mask(mask, 4), [[1, 1, 0, 0], [1, 1, 1, 1]])


def test_non_contextual_p_ignores_previous_layer_p():
  """With contextual_p=False, layer 2's output does not depend on layer 1's P'."""
  mc = small_model_config('luna16', contextual_p=False, dropout=0.0, attention_dropout=0.0)
  model = models.build_model(mc, seed=0)
  ids, mask = encoder.with_cls(jnp.asarray(real_and_padded()[0]), 11, True)
  x_ref, _ = model.encoder(ids, mask)
  # Perturb layer 1's pack path (which only feeds P'); X' of layer 1 changes too, so compare
  # against a run where layer 2 is fed the same X but a different P' -- done by hand here.
  enc = model.encoder
  x = enc.embedding(ids, mask)
  p_mask = luna_encoder.p_slot_mask(mask, mc.pack_length)
  x1, p1 = enc.layers[0](x, enc.packed_inputs[0](2, p_mask), mask, p_mask)
  x2_own, _ = enc.layers[1](x1, enc.packed_inputs[1](2, p_mask), mask, p_mask)
  x2_ctx, _ = enc.layers[1](x1, p1, mask, p_mask)
  np.testing.assert_allclose(x_ref, x2_own, atol=1e-5)
  assert not np.allclose(x_ref, x2_ctx, atol=1e-3)
  assert len(enc.packed_inputs) == mc.num_layers


def test_mean_p_on_transformer_is_a_clear_error():
  with pytest.raises(ValueError, match="mean_p.*Luna"):
    models.build_model(small_model_config('transformer', head='mean_p'), seed=0)


@pytest.mark.parametrize('field,value,message', [
    ('model.head', 'max', "valid choices: \\['cls', 'mean', 'mean_p'\\]"),
    ('task', 'sorting', 'valid choices'),
    ('schedule', 'exponential', 'valid choices'),
])
def test_bad_names_list_valid_choices(field, value, message):
  c = config_lib.set_model(config_lib.base_config(), 'luna16')
  c.task = 'listops'
  section, _, key = field.rpartition('.')
  (c[section] if section else c)[key] = value
  with pytest.raises(ValueError, match=message):
    config_lib.validate(c)


def test_unknown_model_lists_valid_choices():
  with pytest.raises(ValueError, match='luna16'):
    config_lib.parse_arg('luna17,quick')


def test_dropout_is_active_only_in_training():
  mc = small_model_config('luna16')
  model = models.build_model(mc, seed=0)
  batch = {'inputs': real_and_padded()[0]}
  np.testing.assert_allclose(model(batch), model(batch))
  a = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=1))
  b = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=2))
  assert not np.allclose(a, b)


def test_dual_encoder_shapes():
  mc = small_model_config('luna16', dual_encoder=True, pair_features='full')
  model = models.build_model(mc, seed=0)
  a, b = real_and_padded()
  assert model({'inputs1': a, 'inputs2': b}).shape == (2, 3)


@pytest.mark.parametrize('model_name', ['luna16', 'transformer'])
def test_bfloat16_close_to_float32(model_name):
  """bf16 compute with float32 parameters: logits within 5e-2 of float32 (bf16 has an 8-bit
  mantissa); softmax and LayerNorm statistics stay float32."""
  mc32 = small_model_config(model_name)
  mc16 = small_model_config(model_name, dtype='bfloat16')
  m32, m16 = models.build_model(mc32, 0), models.build_model(mc16, 0)
  params16 = jax.tree.leaves(nnx.state(m16, nnx.Param))
  assert all(p.dtype == jnp.float32 for p in params16)
  batch = {'inputs': real_and_padded()[0]}
  np.testing.assert_allclose(m16(batch), m32(batch), atol=5e-2)
  assert m16(batch).dtype == jnp.float32


def test_bfloat16_trains_without_nan():
  import optax
  mc = small_model_config('luna16', dtype='bfloat16')
  model = models.build_model(mc, 0)
  graphdef, params, constants = nnx.split(model, nnx.Param, ...)
  tx = optax.adamw(1e-3)
  opt_state = tx.init(params)
  batch = {'inputs': real_and_padded()[0]}
  targets = jnp.array([0, 2])

  @jax.jit
  def step(params, opt_state, key):
    def loss_fn(params):
      logits = nnx.merge(graphdef, params, constants)(batch, deterministic=False,
                                                      rngs=nnx.Rngs(dropout=key))
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  losses = []
  for i in range(5):
    params, opt_state, loss = step(params, opt_state, jax.random.key(i))
    losses.append(float(loss))
  assert np.isfinite(losses).all() and losses[-1] < losses[0]
