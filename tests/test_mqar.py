"""The MQAR generator (lra_luna/datasets/mqar.py) against Zoology's definition, checked directly on
the arrays it makes."""

import numpy as np
import pytest

from lra_luna import registry
from lra_luna import spt
from lra_luna.datasets import mqar

LENGTH, PAIRS, VOCAB = 64, 4, 256


@pytest.fixture(scope='module')
def examples():
  return mqar.generate_mqar(500, LENGTH, PAIRS, vocab_size=VOCAB, seed=3)


def test_the_same_seed_gives_the_same_arrays_and_another_seed_others(examples):
  again = mqar.generate_mqar(500, LENGTH, PAIRS, vocab_size=VOCAB, seed=3)
  other = mqar.generate_mqar(500, LENGTH, PAIRS, vocab_size=VOCAB, seed=4)
  for name in examples:
    np.testing.assert_array_equal(examples[name], again[name])
  assert not np.array_equal(examples['inputs'], other['inputs'])


def test_pairs_first_then_every_key_once_as_a_query_at_an_even_offset(examples):
  inputs, positions, values = (examples['inputs'], examples['query_positions'],
                               examples['targets'])
  keys, context_values = inputs[:, 0:2 * PAIRS:2], inputs[:, 1:2 * PAIRS:2]
  np.testing.assert_array_equal(context_values, values)  # query i asks for pair i's value
  assert ((keys >= 1) & (keys < VOCAB // 2)).all()
  assert ((values >= VOCAB // 2) & (values < VOCAB)).all()
  for row in range(len(inputs)):
    assert len(set(keys[row])) == PAIRS and len(set(values[row])) == PAIRS
    np.testing.assert_array_equal(inputs[row, positions[row]], keys[row])
    second = inputs[row, 2 * PAIRS:]
    # Each key once as a query, nothing else but zeros in the second part.
    assert sorted(second[second != 0]) == sorted(keys[row])
  assert ((positions - 2 * PAIRS) % 2 == 0).all() and (positions >= 2 * PAIRS).all()


def test_no_value_appears_after_its_query(examples):
  inputs, positions, values = (examples['inputs'], examples['query_positions'],
                               examples['targets'])
  for row in range(len(inputs)):
    for position, value in zip(positions[row], values[row]):
      assert value not in inputs[row, position:]


def test_random_fillers_are_none_of_the_keys_and_values():
  data = mqar.generate_mqar(300, LENGTH, PAIRS, vocab_size=VOCAB, random_non_queries=True, seed=0)
  inputs, positions, values = data['inputs'], data['query_positions'], data['targets']
  assert (inputs != 0).all()
  for row in range(len(inputs)):
    taken = set(inputs[row, :2 * PAIRS])
    fillers = np.delete(inputs[row, 2 * PAIRS:], positions[row] - 2 * PAIRS)
    assert not taken & set(fillers)
    for position, value in zip(positions[row], values[row]):
      assert value not in inputs[row, position:]


def test_labels_only_at_query_positions(examples):
  labels = mqar.position_labels(examples['query_positions'], examples['targets'], LENGTH)
  assert ((labels != -100).sum(axis=1) == PAIRS).all()
  np.testing.assert_array_equal(
      np.take_along_axis(labels, examples['query_positions'].astype(np.int64), 1),
      examples['targets'])


def test_gaps_follow_the_power_law():
  data = mqar.generate_mqar(4000, 256, 4, vocab_size=1024, seed=1)
  gaps = (data['query_positions'] - 8) // 2
  counts = np.bincount(gaps.ravel(), minlength=124)
  # With a = 0.01 p(g) falls as 1/g: the first gap is drawn far more often than the tenth.
  assert counts[0] > 5 * counts[9] > 0
  p = mqar.gap_probabilities(124, 0.01)
  assert p[0] / p[9] == pytest.approx(10 ** 0.99)


@pytest.mark.parametrize('length, pairs, vocab, message', [
    (63, 4, 256, 'odd'), (64, 17, 256, 'do not fit'), (64, 4, 64, 'too small'),
    (64, 4, 256, 'power_a')])
def test_bad_settings_are_refused_in_one_line(length, pairs, vocab, message):
  with pytest.raises(ValueError, match=message) as error:
    mqar.generate_mqar(10, length, pairs, vocab_size=vocab,
                       power_a=1.5 if message == 'power_a' else 0.01)
  assert '\n' not in str(error.value)


def test_the_overlap_count_finds_shared_rows(examples):
  assert mqar.rows_in(examples['inputs'][:10], examples['inputs']) == 10
  other = mqar.generate_mqar(200, LENGTH, PAIRS, vocab_size=VOCAB, seed=30)
  assert mqar.rows_in(other['inputs'], examples['inputs']) == 0


def mqar_config(**mqar_settings):
  import ml_collections
  settings = dict(num_kv_pairs=PAIRS, vocab_size=VOCAB, power_a=0.01, random_non_queries=False,
                  seed=0, num_train=300, num_val=50, num_test=60)
  settings.update(mqar_settings)
  return ml_collections.ConfigDict({'max_length': LENGTH, 'mqar': settings})


def test_the_loader_records_the_generator_and_its_settings():
  data = mqar.load_mqar(mqar_config())
  assert data.source['generator'] == mqar.GENERATOR
  assert data.source['settings'] == {'length': LENGTH, 'num_kv_pairs': PAIRS, 'vocab_size': VOCAB,
                                     'power_a': 0.01, 'random_non_queries': False, 'seed': 0}
  assert data.source['examples'] == {'train': 300, 'validation': 50, 'test': 60}
  assert data.source['test_in_train'] == 0
  # The test split comes from seed + 10, as Zoology's.
  test = mqar.generate_mqar(60, LENGTH, PAIRS, vocab_size=VOCAB, seed=10)
  np.testing.assert_array_equal(data.splits['test']['inputs'], test['inputs'])
  assert data.source['fingerprint'] == mqar.load_mqar(mqar_config()).source['fingerprint']


def test_a_test_set_that_repeats_the_training_set_is_refused(monkeypatch):
  monkeypatch.setattr(mqar, 'SPLIT_SEEDS', {'train': 0, 'validation': 1, 'test': 0})
  with pytest.raises(mqar.base.DataError, match='also occur in the training set'):
    mqar.load_mqar(mqar_config(num_test=300))  # the same seed and size: the same examples


# ------------------------------------------------------------------------------------------------
# The task end to end: configs/mqar.py, the query-position model, the training loop.
# ------------------------------------------------------------------------------------------------
def tiny_config(model='transformer', causal=False, **fields):
  from lra_luna import config_lib
  words = model if causal else f'{model},bidirectional'
  config = config_lib.load_config(f'configs/mqar.py:{words}', [])
  config.max_length = 16
  config.mqar.update(num_kv_pairs=2, vocab_size=64, num_train=4000, num_val=200, num_test=200)
  config.model.update(dim=32, num_heads=2, ffn_dim=64)
  config.update({**dict(batch_size=32, eval_batch_size=100, num_train_steps=600, warmup_steps=50,
                        learning_rate=3e-3, weight_decay=0.0, eval_every=600,
                        checkpoint_every=600, progress_bar=False), **fields})
  return config


def query_logits(config, batch):
  from lra_luna.training import steps
  data = mqar.load_mqar(config)
  model = steps.models.build_model(steps.model_config(config, data), seed=0)
  return model(batch)


@pytest.mark.parametrize('causal', [False, True])
def test_the_model_predicts_at_the_query_positions_only(causal):
  config = tiny_config(causal=causal)
  batch = mqar.generate_mqar(4, 16, 2, vocab_size=64, seed=5)
  logits = query_logits(config, batch)
  assert logits.shape == (4, 2, 64)


def test_a_causal_model_is_blind_to_later_tokens_and_a_bidirectional_one_is_not():
  batch = mqar.generate_mqar(4, 16, 2, vocab_size=64, seed=5)
  first = batch['query_positions'].min(axis=1)
  changed = dict(batch, inputs=batch['inputs'].copy())
  for row, position in enumerate(first):
    changed['inputs'][row, position + 1:] = 7
  for causal in (True, False):
    config = tiny_config(causal=causal)
    before, after = query_logits(config, batch), query_logits(config, changed)
    at_first = batch['query_positions'] == first[:, None]
    same = np.allclose(np.asarray(before)[at_first], np.asarray(after)[at_first], atol=1e-5)
    assert same == causal


def test_the_causal_default_is_refused_for_a_model_without_a_causal_form():
  from lra_luna import config_lib
  with pytest.raises(ValueError, match='no causal form: add the word bidirectional'):
    config_lib.load_config('configs/mqar.py:linformer', [])
  assert not config_lib.load_config('configs/mqar.py:linformer,bidirectional', []).model.causal


@pytest.mark.slow
def test_a_short_run_records_the_chance_level_the_setting_and_the_generator(tmp_path):
  from lra_luna.training import train
  config = tiny_config(causal=True, num_train_steps=20, eval_every=20, checkpoint_every=20)
  results = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert results['test_chance_rate'] == 0.5 and results['causal'] is True
  assert results['data']['generator'] == mqar.GENERATOR
  assert results['data']['settings']['num_kv_pairs'] == 2
  # Accuracy over every query of the 200 test examples: a multiple of 1 / 400.
  assert (results['test_accuracy'] * 400) == pytest.approx(round(results['test_accuracy'] * 400))


@pytest.mark.slow
@pytest.mark.parametrize('model', list(registry.MODELS))
def test_every_model_builds_and_predicts_in_both_settings(model):
  batch = mqar.generate_mqar(2, 16, 2, vocab_size=64, seed=5)
  settings = [False, True] if model in spt.causal_models() else [False]
  for causal in settings:
    logits = query_logits(tiny_config(model, causal=causal), batch)
    assert logits.shape == (2, 2, 64) and np.isfinite(np.asarray(logits)).all()
  if model not in spt.causal_models():
    with pytest.raises(ValueError, match='causal form'):
      tiny_config(model, causal=True)


@pytest.mark.slow
def test_the_transformer_learns_a_tiny_mqar_well_above_chance(tmp_path):
  # 16 tokens, 2 pairs, causal (the default): chance is 50% (a guess between the two values),
  # where a broken loss, gather or output projection stays; this seed reaches 99.3% in 400 steps
  # (83.2% in 300).
  from lra_luna.training import train
  config = tiny_config(causal=True, num_train_steps=400, eval_every=400, checkpoint_every=400,
                       batch_size=64)
  config.mqar.update(num_train=20000, num_test=500)
  config.model.update(dim=64, num_heads=1, ffn_dim=128)
  results = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert results['test_accuracy'] >= 0.9 > 0.5 == results['test_chance_rate']
