"""The Luna authors' protocol (lra_luna/protocols.py): the `paper` configs against the one table,
`paper` with `quick` and bad words, the end-of-sequence token, and the authors' head and pooling
options against their formulas. (Training of each task's luna16,paper: tests/test_tasks.py.)"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lra_luna import config_lib
from lra_luna import datasets
from lra_luna import protocols
from lra_luna.datasets import base
from lra_luna.models import classifier as models
from lra_luna.models.heads import classification
from lra_luna.models import model_config
from lra_luna.training import steps

PAPER_TASKS = tuple(protocols.AUTHORS_TASKS)


def field(config, path):
  section, _, key = path.rpartition('.')
  return (config[section] if section else config)[key]


# ----------------------------------------------------------------------------------------------
# Configs.
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('task', PAPER_TASKS)
def test_paper_configs_equal_the_authors_table(task):
  settings = protocols.authors_settings(task)
  for model in ('luna16', 'luna256', 'transformer', 'performer'):
    config = config_lib.load_config(f'configs/{task}.py:{model},paper')
    config_lib.validate(config)
    assert {path: field(config, path) for path in settings} == settings
    assert config.protocol == 'paper' and config.model_name == model
    # l comes from the model name, not from the protocol.
    assert config.model.pack_length == (config_lib.MODELS[model].pack_length or 16)
  lra = config_lib.load_config(f'configs/{task}.py:luna16')
  assert lra.protocol == 'lra' and not lra.append_eos and lra.model.classifier_bias
  assert not lra.model.mean_includes_cls and lra.model.dual_head_layers == 2


def test_where_the_scripts_and_table_4_disagree_the_scripts_win():
  table = protocols.AUTHORS_TASKS
  assert table['retrieval'].learning_rate == 5e-4  # Table 4: 5e-5
  assert (table['image'].dropout, table['image'].attention_dropout) == (0.3, 0.1)  # Table 4: swapped
  assert table['listops'].num_layers == 1


def test_paper_quick_is_the_authors_protocol_at_quick_sizes():
  for task in PAPER_TASKS:
    small = config_lib.load_config(f'configs/{task}.py:luna16,paper,quick')
    quick = config_lib.load_config(f'configs/{task}.py:luna16,quick')
    config_lib.validate(small)
    for path in ('model.dim', 'model.num_layers', 'model.ffn_dim', 'num_train_steps',
                 'learning_rate', 'batch_size', 'dataset_name'):
      assert field(small, path) == field(quick, path)
    for path, value in protocols.AUTHORS_COMMON.items():
      assert field(small, path) == value
    assert small.protocol == 'paper' and small.model.head == protocols.AUTHORS_TASKS[task].head
    if task in ('image', 'pathfinder'):  # the pixels and the EOS
      assert small.max_length == 1025


def test_pathx_has_no_paper_variant():
  with pytest.raises(ValueError, match="no 'pathx' run: .* listops, text, retrieval, image, "
                                       'pathfinder only'):
    config_lib.load_config('configs/pathx.py:luna16,paper')


@pytest.mark.parametrize('arg', ['luna16,papr', 'papr', 'luna16,paper,fast'])
def test_unknown_word_names_the_valid_words(arg):
  with pytest.raises(ValueError) as error:
    config_lib.load_config(f'configs/listops.py:{arg}')
  message = str(error.value)
  assert '\n' not in message and 'Unknown word' in message
  assert all(word in message for word in ('quick', 'paper', 'luna16', 'transformer'))


def test_bad_authors_options_name_the_valid_choices():
  with pytest.raises(ValueError, match=r"dual_head_layers = 3 is not valid; valid choices: \[1, 2\]"):
    model_config.ModelConfig.from_config({'dual_head_layers': 3})
  with pytest.raises(ValueError, match=r"valid choices: \['lra', 'paper'\]"):
    config = config_lib.load_config('configs/listops.py:luna16')
    config.protocol = 'papers'
    config_lib.validate(config)


# ----------------------------------------------------------------------------------------------
# The end-of-sequence token.
# ----------------------------------------------------------------------------------------------
def test_append_eos_then_cut():
  ids = np.array([[3, 4, 0, 0], [5, 6, 7, 0], [1, 2, 3, 4]], np.uint8)
  np.testing.assert_array_equal(base.append_eos(ids, [2, 3, 4], 9, 4),
                                [[3, 4, 9, 0], [5, 6, 7, 9], [1, 2, 3, 4]])  # full row: no EOS
  np.testing.assert_array_equal(base.append_eos(ids, [2, 3, 4], 9, 5),
                                [[3, 4, 9, 0, 0], [5, 6, 7, 9, 0], [1, 2, 3, 4, 9]])
  np.testing.assert_array_equal(base.append_eos(ids, [2, 3, 4], 9, 3),
                                [[3, 4, 9], [5, 6, 7], [1, 2, 3]])
  assert base.append_eos(ids, [2, 3, 4], 256, 5).dtype == np.uint16  # 256 needs a wider type


def test_with_eos_on_padded_and_full_length_data():
  padded = np.array([[3, 4, 0], [5, 6, 7]], np.uint16)
  targets = np.array([0, 1], np.int32)
  data = base.TaskData(splits={'train': {'inputs': padded, 'targets': targets}},
                       vocab_size=8, num_classes=2, max_length=3)
  data.splits['test'] = data.splits['validation'] = data.splits['train']
  out = base.with_eos(data, 3, full_length=False)
  np.testing.assert_array_equal(out.splits['train']['inputs'], [[3, 4, 8], [5, 6, 7]])
  assert (out.vocab_size, out.source['eos_id']) == (9, 8)
  assert out.splits['test']['inputs'] is out.splits['validation']['inputs']  # still one copy
  # Pixel rows: 0 is a black pixel, not a pad; the EOS follows the whole row.
  pixels = base.TaskData(splits={'train': {'inputs': np.array([[0, 255, 0]], np.uint8),
                                           'targets': targets[:1]}},
                         vocab_size=256, num_classes=2, max_length=3)
  out = base.with_eos(pixels, 4, full_length=True)
  np.testing.assert_array_equal(out.splits['train']['inputs'], [[0, 255, 0, 256]])
  with pytest.raises(ValueError, match='max_length=4'):
    base.with_eos(pixels, 5, full_length=True)


# ----------------------------------------------------------------------------------------------
# The authors' head and pooling options against their formulas.
# ----------------------------------------------------------------------------------------------
def test_mean_including_cls_is_the_mean_over_every_real_position():
  x = jax.random.normal(jax.random.key(0), (2, 5, 3))
  mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  pooled = classification.pool('mean', x, mask, None, mean_includes_cls=True)
  np.testing.assert_allclose(pooled[0], x[0, :3].mean(0), rtol=1e-6)
  # Fixed length: the release's x.mean over every position; ours without [CLS] differs by it.
  np.testing.assert_allclose(pooled[1], x[1].mean(0), rtol=1e-6)
  np.testing.assert_allclose(classification.pool('mean', x, mask, None)[1], x[1, 1:].mean(0), rtol=1e-6)


def linear(layer, x):
  bias = layer.bias[...] if layer.bias is not None else 0.0
  return np.asarray(x) @ np.asarray(layer.kernel[...]) + np.asarray(bias)


def test_classifier_without_last_bias():
  head = classification.ClassifierHead(6, (5,), 3, init='reference', dtype=jnp.float32,
                               rngs=nnx.Rngs(params=0), last_bias=False)
  assert head.logits.bias is None
  assert 'bias' not in nnx.to_pure_dict(nnx.state(head.logits, nnx.Param))
  x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
  expected = np.maximum(linear(head.hidden[0], x), 0) @ np.asarray(head.logits.kernel[...])
  np.testing.assert_allclose(head(jnp.asarray(x)), expected, rtol=1e-5, atol=1e-6)


def test_authors_retrieval_head_is_one_hidden_layer_on_second_then_first():
  cfg = model_config.ModelConfig(
      attention='luna', dim=8, num_heads=2, num_layers=1, ffn_dim=16, classifier_dim=12,
      pack_length=4, vocab_size=9, num_classes=2, max_length=10, dual_encoder=True,
      pair_features='concat_reversed', dual_head_layers=1, classifier_bias=False)
  model = nnx.jit(lambda: models.build_model(cfg, seed=0))()  # one compile, not one per op
  assert len(model.classifier.hidden) == 1 and model.classifier.hidden[0].kernel.shape == (16, 12)
  rng = np.random.default_rng(1)
  batch = {'inputs1': rng.integers(1, 9, (3, 10)), 'inputs2': rng.integers(1, 9, (3, 10))}
  # One compiled call (eager ops would each compile on their own).
  outputs = nnx.jit(lambda m, b: (m.encode(b['inputs1']), m.encode(b['inputs2']), m(b)))
  first, second, logits = outputs(model, batch)
  hidden = np.maximum(linear(model.classifier.hidden[0], np.concatenate([second, first], -1)), 0)
  np.testing.assert_allclose(logits, hidden @ np.asarray(model.classifier.logits.kernel[...]),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('task', PAPER_TASKS)
def test_paper_model_has_the_authors_parameter_count(task):
  """luna16,paper built (abstractly: shapes only) against a hand count of the authors' Luna LRA
  model: tokens (+ EOS, + [CLS]) and positions ([CLS] + max_length), P, the embedding and P
  LayerNorms, per layer seven D x D projections with bias (pack q/k/v, unpack q/k/v, out), three
  LayerNorms and the FFN, then Linear(in, C) + ReLU + Linear(C, classes) without bias."""
  config = config_lib.load_config(f'configs/{task}.py:luna16,paper')
  vocab_size, num_classes = datasets.task_sizes(task, append_eos=True)
  mc = steps.model_config(config, types.SimpleNamespace(vocab_size=vocab_size,
                                                        num_classes=num_classes))
  built = models.count_params(nnx.eval_shape(lambda: models.build_model(mc, seed=0)))
  d, f, c, k = mc.dim, mc.ffn_dim, mc.classifier_dim, num_classes
  layer = 7 * (d * d + d) + 3 * 2 * d + (d * f + f) + (f * d + d)
  head_in = 2 * d if task == 'retrieval' else d
  hand = ((vocab_size + 1) * d + (config.max_length + 1) * d + 16 * d + 2 * 2 * d
          + mc.num_layers * layer + head_in * c + c + c * k)
  assert built == hand
