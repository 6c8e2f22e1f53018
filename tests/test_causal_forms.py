"""The causal forms of S5, LRU and the Linear Transformer (issue 77): built through
configs/mqar.py:<model>,causal, position t reads positions <= t only; the Linear Transformer's
prefix sums (Katharopoulos et al. 2020, eq. 9) against the O(n^2) formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import config_lib, registry, spt
from lra_luna.models import classifier, model_config
from lra_luna.models.attention import rotary
from lra_luna.models.attention.baselines import (causal_linear_attention_from_features,
                                                 elu_feature_map, linear_attention,
                                                 linear_attention_direct)
from lra_luna.models.encoder.transformer import build_self_attention

CAUSAL_FORMS = ['s5', 'lru', 'linear_transformer']
LENGTH, VOCAB, CUT = 16, 64, 6  # tokens after position CUT change


def tiny_model(model: str, causal: bool):
  """The MQAR recall model of configs/mqar.py:<model>[,bidirectional], tiny (width 16, the registry's
  test options), predicting at every position."""
  config = config_lib.load_config(f'configs/mqar.py:{model}' if causal
                                  else f'configs/mqar.py:{model},bidirectional', [])
  config.max_length = LENGTH
  config.model.update(dim=16, num_heads=2, ffn_dim=32)
  config.model.attention_options.update(registry.get(model).test_options)
  cfg = model_config.ModelConfig.from_config(config.model, vocab_size=VOCAB, num_classes=VOCAB,
                                             max_length=LENGTH)
  assert cfg.causal == causal
  return classifier.build_model(cfg, seed=0)


def logits_at_every_position(model, inputs):
  positions = np.broadcast_to(np.arange(LENGTH), inputs.shape)
  return np.asarray(model({'inputs': inputs, 'query_positions': positions}))


def inputs_and_changed_future(seed=0):
  """ids [2, LENGTH] (some pad zeros) and a copy whose tokens after CUT differ (pads included)."""
  rng = np.random.default_rng(seed)
  inputs = rng.integers(0, VOCAB, (2, LENGTH))
  changed = inputs.copy()
  shift = rng.integers(1, VOCAB, (2, LENGTH - CUT - 1))  # never 0: every later token differs
  changed[:, CUT + 1:] = (inputs[:, CUT + 1:] + shift) % VOCAB
  changed[0, -2:] = 0  # a padded tail too: the mask changes only after CUT
  return inputs, changed


@pytest.mark.parametrize('model', CAUSAL_FORMS)
def test_the_model_is_listed_and_mqar_is_causal_by_default(model):
  assert model in spt.causal_models()
  assert config_lib.load_config(f'configs/mqar.py:{model}', []).model.causal
  assert not config_lib.load_config(f'configs/mqar.py:{model},bidirectional', []).model.causal


@pytest.mark.parametrize('model', CAUSAL_FORMS)
def test_causal_model_is_blind_to_later_tokens_and_the_bidirectional_one_is_not(model):
  inputs, changed = inputs_and_changed_future()
  for causal in (True, False):
    net = tiny_model(model, causal)
    before, after = logits_at_every_position(net, inputs), logits_at_every_position(net, changed)
    past_same = np.allclose(before[:, :CUT + 1], after[:, :CUT + 1], rtol=0, atol=1e-6)
    assert past_same == causal, (model, causal)
    assert not np.allclose(before[:, CUT + 1:], after[:, CUT + 1:])  # the check can fail


@pytest.mark.parametrize('model', ['s5', 'lru'])
def test_causal_block_has_one_readout_despite_the_bidirectional_option(model):
  assert registry.get(model).options['bidirectional']
  for causal, channels in ((True, 1), (False, 2)):
    ssm = tiny_model(model, causal).encoder.blocks[0].ssm
    readout = ssm.c_tilde if model == 's5' else ssm.output_matrix
    assert readout.shape[0] == channels


def random_heads(seed, batch=2, heads=2, n=12, d=4):
  q, k, v = (np.asarray(t)
             for t in jax.random.normal(jax.random.key(seed), (3, batch, heads, n, d)))
  key_mask = np.arange(n)[None, :] < np.array([n, 7])[:, None]  # the second row padded after 7
  return q, k, v, key_mask


def causal_quadratic(q_num, k_num, q_den, k_den, v, key_mask, eps=1e-6):
  """out_i = q_num_i . sum_{j<=i} k_num_j v_j^T / (q_den_i . sum_{j<=i} k_den_j + eps), real
  keys only, row by row in numpy (float64): the O(n^2) form of eq. 9."""
  b, h, n, _ = v.shape
  out = np.zeros(v.shape)
  for bi in range(b):
    for hi in range(h):
      for i in range(n):
        keys = [j for j in range(i + 1) if key_mask[bi, j]]
        numerator = sum((q_num[bi, hi, i] @ k_num[bi, hi, j]) * v[bi, hi, j] for j in keys)
        denominator = sum(q_den[bi, hi, i] @ k_den[bi, hi, j] for j in keys)
        out[bi, hi, i] = numerator / (denominator + eps)
  return out


def test_causal_prefix_sums_equal_the_quadratic_formula():
  q, k, v, key_mask = random_heads(0)
  phi_q, phi_k = (np.asarray(elu_feature_map(t), np.float64) for t in (q, k))
  expected = causal_quadratic(phi_q, phi_k, phi_q, phi_k, v, key_mask)
  np.testing.assert_allclose(linear_attention(q, k, v, key_mask, causal=True), expected,
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(linear_attention_direct(q, k, v, key_mask, causal=True), expected,
                             rtol=1e-5, atol=1e-5)
  # Without `causal` the last row reads every key: the full sums (no mask on j).
  full = np.asarray(linear_attention(q, k, v, key_mask))
  np.testing.assert_allclose(full[:, :, -1], expected[:, :, -1], rtol=1e-5, atol=1e-5)
  assert not np.allclose(full[:, :, 0], expected[:, :, 0])


@pytest.mark.parametrize('rotated', [False, True])
@pytest.mark.parametrize('chunk', [1, 5, 12, 64])
def test_each_chunk_size_gives_the_quadratic_formula(chunk, rotated):
  """Chunks of 1 (the prefix sums), 5 (12 = 5 + 5 + 2: a short last chunk), 12 (one chunk)
  and 64 (longer than the sequence): the same sums."""
  q, k, v, key_mask = random_heads(2)
  phi_q, phi_k = elu_feature_map(q), jnp.where(key_mask[:, None, :, None], elu_feature_map(k), 0)
  q_num, k_num = phi_q, phi_k
  if rotated:
    positions = jnp.arange(q.shape[2])
    q_num, k_num = (rotary.apply_rotary(t, positions) for t in (phi_q, phi_k))
  expected = causal_quadratic(*(np.asarray(t, np.float64) for t in (q_num, k_num, phi_q, phi_k)),
                              v, key_mask)
  numerator, denominator = causal_linear_attention_from_features(phi_q, phi_k, v, rotary=rotated,
                                                                 chunk=chunk)
  np.testing.assert_allclose(numerator / (denominator + 1e-6), expected, rtol=1e-5, atol=1e-5)


def test_causal_rotary_prefix_sums_equal_the_quadratic_formula():
  """RoFormer eq. 19 restricted to j <= i: rotated feature maps in the numerator only."""
  q, k, v, key_mask = random_heads(1)
  phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
  positions = jnp.arange(q.shape[2])
  rotated_q, rotated_k = (np.asarray(rotary.apply_rotary(t, positions), np.float64)
                          for t in (phi_q, phi_k))
  expected = causal_quadratic(rotated_q, rotated_k, np.asarray(phi_q, np.float64),
                              np.asarray(phi_k, np.float64), v, key_mask)
  np.testing.assert_allclose(linear_attention(q, k, v, key_mask, causal=True, rotary=True),
                             expected, rtol=1e-5, atol=1e-5)


def test_causal_attention_without_a_causal_form_is_refused():
  cfg = model_config.ModelConfig(attention='linformer', dim=16, num_heads=2, causal=True,
                                 max_length=LENGTH,
                                 attention_options={'projected_length': 4})
  with pytest.raises(ValueError, match='causal form'):
    build_self_attention(cfg, nnx.Rngs(0))


@pytest.mark.parametrize('attention, implementation', [('linformer', 'vanilla'),
                                                       ('softmax', 'fused')])
def test_a_causal_config_without_a_causal_form_fails_its_check(attention, implementation):
  cfg = model_config.ModelConfig(attention=attention, attention_implementation=implementation,
                                 dim=16, num_heads=2, causal=True, max_length=LENGTH)
  with pytest.raises(ValueError, match='causal form'):
    cfg.check()
  model_config.ModelConfig(attention=attention, attention_implementation=implementation,
                           dim=16, num_heads=2, causal=False, max_length=LENGTH).check()
