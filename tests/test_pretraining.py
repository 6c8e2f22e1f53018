"""Self-pretraining (SPT, issue 37): masking, the masked-token loss, causal encoders that see no
future, the spt word and its refusals, and (slow) the two phases end to end: fine-tuning from
exactly the pretrained encoder, kill-and-resume in each phase, --config.pretrained."""

import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lra_luna import config_lib, spt
from lra_luna.models import pretraining
from lra_luna.models.objectives import Objective, losses, masking, token_loss_sums
from lra_luna.training import checkpoints, fine_tuning, run_folder, steps, train
from lra_luna.training import pretraining as pretraining_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
import tiny  # noqa: E402  (the shared tiny run: tests/tiny.py)

CAUSAL_MODELS = ['transformer', 'luna16', 's4d', 'mega', 'mega_chunk', 'linear_transformer', 's5',
                 'lru']


# ----------------------------------------------------------------------------------------------
# Masking and the loss.
# ----------------------------------------------------------------------------------------------
def padded_batch(seed=0, rows=64, length=200, vocab=20, eos=19):
  """ids [rows, length]: tokens 1..vocab-2, an EOS after each row's tokens, then padding 0."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, vocab - 1, (rows, length))
  lengths = rng.integers(length // 4, length - 1, rows)
  ids[np.arange(length)[None, :] > lengths[:, None]] = 0
  ids[np.arange(rows), lengths] = eos
  return jnp.asarray(ids, jnp.int32)


@pytest.mark.parametrize('rate', [0.15, 0.5, 0.8])
def test_mask_rate_over_a_batch_and_never_padding_or_eos(rate):
  ids = padded_batch()
  real = masking.predictable(ids, mask_padding=True, eos_id=19)
  assert not bool(jnp.any(real & ((ids == 0) | (ids == 19))))
  masked_ids, is_masked = masking.mask_tokens(jax.random.key(3), ids, real, rate, mask_id=21)
  tokens = int(jnp.sum(real))
  share = int(jnp.sum(is_masked)) / tokens
  # Within 4 binomial standard deviations of the rate (~7000 maskable tokens).
  assert abs(share - rate) < 4 * np.sqrt(rate * (1 - rate) / tokens), share
  assert not bool(jnp.any(is_masked & ~real))  # padding and EOS never masked
  np.testing.assert_array_equal(masked_ids, jnp.where(is_masked, 21, ids))
  np.testing.assert_array_equal(masked_ids == 21, is_masked)


def test_pixels_have_no_padding_so_zero_is_maskable():
  ids = jnp.zeros((2, 8), jnp.int32)
  assert bool(jnp.all(masking.predictable(ids, mask_padding=False)))
  assert not bool(jnp.any(masking.predictable(ids, mask_padding=True)))


def test_mask_id_is_a_new_row_never_a_real_token_nor_cls():
  cfg = tiny.model_config('transformer', mask_token=True)
  model = pretraining.build_token_predictor(cfg, 0)
  embedding = model.encoder.embedding
  assert embedding.cls_id == cfg.vocab_size and embedding.mask_id == cfg.vocab_size + 1
  assert embedding.tokens.embedding.shape[0] == cfg.vocab_size + 2
  # Without pretraining the table keeps its rows (the classifiers' checkpoints stay as they were).
  plain = pretraining.build_token_predictor(tiny.model_config('transformer'), 0)
  assert plain.encoder.embedding.tokens.embedding.shape[0] == cfg.vocab_size + 1


def test_loss_is_cross_entropy_at_masked_positions_and_zero_gradient_elsewhere():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(3, 7, 5)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, 5, (3, 7)))
  weights = jnp.asarray(rng.random((3, 7)) < 0.4, jnp.float32)
  total, correct, count = losses.token_cross_entropy_sums(logits, targets, weights)
  log_probs = np.asarray(jax.nn.log_softmax(logits))
  direct = -sum(log_probs[b, t, targets[b, t]] for b in range(3) for t in range(7)
                if weights[b, t])
  np.testing.assert_allclose(total, direct, rtol=1e-6)
  assert count == float(jnp.sum(weights))
  assert correct == float(jnp.sum((jnp.argmax(logits, -1) == targets) * weights))
  grad = jax.grad(lambda l: losses.token_cross_entropy_sums(l, targets, weights)[0])(logits)
  assert bool(jnp.all(grad[weights == 0] == 0.0))  # exactly zero at unmasked positions
  assert bool(jnp.all(jnp.any(grad[weights == 1] != 0.0, axis=-1)))


def test_pixel_l1_loss_at_masked_positions_and_zero_gradient_elsewhere():
  """The authors' L1 loss: |value - (pixel - mean) / std| at the weighted positions only."""
  rng = np.random.default_rng(1)
  values = jnp.asarray(rng.normal(size=(3, 9)), jnp.float32)
  pixels = jnp.asarray(rng.integers(0, 256, (3, 9)))
  weights = jnp.asarray(rng.random((3, 9)) < 0.5, jnp.float32)
  mean, std = spt.PIXEL_NORMALIZATION['image']
  total, exact, count = losses.pixel_l1_sums(values, pixels, weights, mean, std)
  direct = sum(abs(float(values[b, t]) - (int(pixels[b, t]) - mean) / std)
               for b in range(3) for t in range(9) if weights[b, t])
  np.testing.assert_allclose(total, direct, rtol=1e-5)
  assert count == float(jnp.sum(weights)) and exact == 0.0  # random values hit no grey level
  hit = (pixels - mean) / std  # predictions exactly on the pixels: every weighted one exact
  assert losses.pixel_l1_sums(hit, pixels, weights, mean, std)[1] == float(jnp.sum(weights))
  grad = jax.grad(lambda v: losses.pixel_l1_sums(v, pixels, weights, mean, std)[0])(values)
  assert bool(jnp.all(grad[weights == 0] == 0.0)) and bool(jnp.all(grad[weights == 1] != 0.0))


def test_l1_objective_reads_one_value_per_masked_pixel():
  """token_loss_sums with loss 'l1' reads the head's single output at the masked rows (t + 1)."""
  pixels = jnp.asarray([[0, 255, 128, 7, 64, 200]])
  mean, std = spt.PIXEL_NORMALIZATION['pathfinder']

  def pixel_rows(ids, **_):  # Row t + 1 holds pixel t's normalised value exactly.
    exact = jnp.concatenate([jnp.zeros((1, 1)), (pixels - mean) / std], axis=1)
    return exact[..., None]

  objective = Objective('masked', 0.5, 256, mask_id=257, mask_padding=False, loss='l1',
                        pixel_mean=mean, pixel_std=std)
  assert objective.outputs == 1
  total, exact, count = token_loss_sums(pixel_rows, {'inputs': pixels}, objective,
                                        jax.random.key(2), deterministic=True, rngs=None)
  assert float(total) == 0.0 and exact == count > 0
  predictor = pretraining.build_token_predictor(
      tiny.model_config('transformer', mask_token=True), 0, objective.outputs)
  assert predictor.token_head.logits.kernel.shape[-1] == 1


@pytest.mark.parametrize('task, loss', [('listops', 'ce'), ('text', 'ce'), ('retrieval', 'ce'),
                                        ('image', 'l1'), ('pathfinder', 'ce'), ('pathx', 'ce')])
def test_spt_word_takes_the_authors_loss_per_task(task, loss):
  config = config_lib.load_config(f'configs/{task}.py:transformer,quick,spt')
  config_lib.validate(config)
  assert config.pretraining.loss == loss


def test_l1_loss_on_a_token_task_and_an_unknown_loss_are_refused():
  message = one_line_error('configs/listops.py:luna16,quick,spt', '--config.pretraining.loss=l1')
  assert "'l1' needs pixel values" in message and "use 'ce'" in message
  message = one_line_error('configs/image.py:luna16,quick,spt', '--config.pretraining.loss=mse')
  config_lib.validate(config_lib.load_config('configs/pathfinder.py:luna16,quick,spt',
                                             ['--config.pretraining.loss=l1']))  # a pixel task
  assert "'mse' is not valid" in message and "'ce', 'l1'" in message


def test_masked_objective_reads_the_token_rows_and_causal_the_rows_before():
  """A model whose logits at row r are one-hot of r: the masked objective compares row t + 1
  ([CLS] first) with token t, the causal one row t with token t (the next token of row t)."""
  vocab, n = 12, 6
  ids = jnp.arange(1, n + 1)[None]  # token t is t + 1

  def one_hot_rows(ids, **_):
    return 50.0 * jax.nn.one_hot(jnp.arange(ids.shape[1] + 1), vocab)[None]

  for name, right_row in (('masked', lambda t: t + 1), ('causal', lambda t: t)):
    objective = Objective(name, 0.99, vocab, mask_id=vocab + 1)
    _, correct, count = token_loss_sums(one_hot_rows, {'inputs': ids}, objective,
                                        jax.random.key(0), deterministic=True, rngs=None)
    # Row r predicts id r: right for token t (id t + 1) exactly when right_row(t) == t + 1.
    expected = sum(right_row(t) == t + 1 for t in range(n))
    assert (name, correct) == (name, expected * count / n if name == 'masked' else expected)


def test_retrieval_documents_are_separate_sequences():
  batch = {'inputs1': jnp.ones((2, 5), jnp.int32), 'inputs2': 2 * jnp.ones((2, 5), jnp.int32),
           'weights': jnp.asarray([1.0, 0.0])}
  from lra_luna.models import objectives
  np.testing.assert_array_equal(objectives.pretraining_sequences(batch)[:, 0], [1, 1, 2, 2])
  np.testing.assert_array_equal(objectives.row_weights(batch, 4), [1, 0, 1, 0])


# ----------------------------------------------------------------------------------------------
# Causal encoders see no future.
# ----------------------------------------------------------------------------------------------
def token_row_gradients(model_name: str, causal: bool, position: int):
  """|d logits[position] / d embedding row of each token| for distinct tokens 1..10 (token t at
  position t of the [CLS] sequence): [11] one entry per token id."""
  cfg = tiny.model_config(model_name, causal=causal, head='mean', dropout=0.0,
                          attention_dropout=0.0)
  model = pretraining.build_token_predictor(cfg, 0)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  ids = jnp.arange(1, 11)[None]

  def logit_sum(params):
    logits = nnx.merge(graphdef, params, rest)(ids)
    return jnp.sum(logits[:, position] * jnp.linspace(-1.0, 1.0, logits.shape[-1]))

  grads = jax.grad(logit_sum)(params)
  table = grads['encoder']['embedding']['tokens']['embedding'][...]
  return np.abs(np.asarray(table)).sum(axis=-1)[:11]


@pytest.mark.parametrize('model_name', CAUSAL_MODELS)
def test_causal_encoder_gradient_from_the_future_is_exactly_zero(model_name):
  for position in (0, 3, 9):
    per_token = token_row_gradients(model_name, True, position)
    assert np.all(per_token[position + 1:] == 0.0), (position, per_token)  # tokens after it
    assert np.all(per_token[1:position + 1] > 0.0), (position, per_token)  # tokens up to it


def test_bidirectional_encoder_reads_the_future():
  """The check above can fail: the same gradient without `causal` is not zero."""
  assert np.all(token_row_gradients('transformer', False, 3)[5:] > 0.0)


# ----------------------------------------------------------------------------------------------
# The spt word and the refusals (one line, before any data is read).
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('words', ['quick,spt', 'spt', 'paper,spt', 'quick,spt,smoke',
                                   'quick,spt,fp16', 'spt,smoke,paper'])
def test_spt_word_combines_with_every_variant(words):
  config = config_lib.load_config(f'configs/listops.py:luna16,{words}')
  config_lib.validate(config)
  p = config.pretraining
  assert p.objective == 'masked' and 0 < p.mask_rate < 1 and p.schedule == 'constant'
  assert p.num_train_steps == (config_lib.SMOKE_STEPS if 'smoke' in words
                               else config.num_train_steps)
  phase = spt.phase_config(config)
  assert (phase.num_train_steps, phase.learning_rate, phase.schedule) == (
      p.num_train_steps, p.learning_rate, 'constant')
  assert phase.pretraining.is_phase and not config.pretraining.is_phase


# The paper's Section 2 (Amos et al. 2024), written out here rather than read from spt.py, so
# that a wrong rate there fails this test.
PAPER_RATES = [('listops', 0.10), ('text', 0.15), ('retrieval', 0.15), ('image', 0.50),
               ('pathfinder', 0.50), ('pathx', 0.50)]


@pytest.mark.parametrize('task,rate', PAPER_RATES)
def test_the_papers_two_settings_are_the_documented_commands(task, rate):
  """docs/spt.md: Table 1 = LRA's Transformer + SPT (masked, or causal with the mean head);
  Table 2 = rotary positions, mean pooling, the pre-LN block, masked SPT at the paper's rate."""
  from lra_luna.models.encoder import transformer  # pylint: disable=import-outside-toplevel
  lra = config_lib.load_config(f'configs/{task}.py:transformer')
  table1 = config_lib.load_config(f'configs/{task}.py:transformer,spt')
  causal = config_lib.load_config(f'configs/{task}.py:transformer,spt', [
      '--config.pretraining.objective=causal', '--config.model.head=mean'])
  table2 = config_lib.load_config(f'configs/{task}.py:transformer,rotary,spt',
                                  ['--config.model.head=mean'])
  for config in (table1, causal, table2):
    config_lib.validate(config)
    assert config.pretraining.mask_rate == pytest.approx(rate)
  assert table1.model.to_dict() == lra.model.to_dict()  # LRA's model, untouched
  assert table1.pretraining.objective == 'masked' and causal.pretraining.objective == 'causal'
  assert table2.model.positions == 'rotary' and table2.model.head == 'mean'
  assert table2.pretraining.objective == 'masked'
  assert transformer.TransformerBlock.final_norm(table2.model)  # the pre-LN stack
  docs = (REPO / 'docs' / 'spt.md').read_text()
  assert 'configs/listops.py:transformer,rotary,spt --config.model.head=mean' in docs
  assert ('configs/listops.py:transformer,spt --config.pretraining.objective=causal '
          '--config.model.head=mean') in docs


@pytest.mark.parametrize('task,rate', PAPER_RATES)
def test_spt_word_sets_the_papers_mask_rate_for_each_task(task, rate):
  config = config_lib.load_config(f'configs/{task}.py:transformer,spt')
  assert config.pretraining.mask_rate == pytest.approx(rate)
  overridden = config_lib.load_config(f'configs/{task}.py:transformer,spt',
                                      ['--config.pretraining.mask_rate=0.3'])
  assert overridden.pretraining.mask_rate == pytest.approx(0.3)


def test_masked_objective_without_the_word_asks_for_a_rate():
  message = one_line_error('configs/listops.py:luna16,quick',
                           '--config.pretraining.objective=masked',
                           '--config.pretraining.num_train_steps=10',
                           '--config.pretraining.learning_rate=0.001')
  assert 'mask_rate' in message and '0.10 on ListOps' in message and 'spt' in message


@pytest.mark.parametrize('model', sorted(config_lib.MODELS))
def test_spt_validates_for_every_model(model):
  config_lib.validate(config_lib.load_config(f'configs/listops.py:{model},quick,spt'))


def one_line_error(spec, *overrides) -> str:
  with pytest.raises(ValueError) as error:
    config_lib.validate(config_lib.load_config(spec, list(overrides)))
  message = str(error.value)
  assert '\n' not in message
  return message


@pytest.mark.parametrize('rate', [0.0, 1.0, -0.2, 1.5])
def test_mask_rate_outside_zero_one_is_refused(rate):
  message = one_line_error('configs/listops.py:luna16,quick,spt',
                           f'--config.pretraining.mask_rate={rate}')
  assert 'config.pretraining.mask_rate' in message and '(0, 1)' in message


def test_causal_objective_for_a_model_without_a_causal_form_is_refused():
  message = one_line_error('configs/listops.py:linformer,quick,spt',
                           '--config.pretraining.objective=causal', '--config.model.head=mean')
  assert 'linformer has none' in message
  assert message.split('Models that take it: ')[1].startswith(', '.join(spt.causal_models()))
  assert set(spt.causal_models()) >= {'transformer', 'luna16', 's4d', 'mega'}
  assert 'transformer_fused' not in spt.causal_models()


def test_causal_objective_with_the_cls_head_is_refused():
  message = one_line_error('configs/listops.py:transformer,quick,spt',
                           '--config.pretraining.objective=causal')
  assert '--config.model.head=mean' in message


def test_unknown_objective_is_refused():
  message = one_line_error('configs/listops.py:luna16,quick,spt',
                           '--config.pretraining.objective=denoise')
  assert "'masked', 'causal'" in message


def fake_pretraining(folder, spec, *overrides, steps_done=None):
  """A run folder whose pretraining/ holds the config.json and results.json of `spec` (nothing
  trained: the checks read only these two files)."""
  config = config_lib.load_config(spec, list(overrides))
  phase = spt.phase_config(config)
  run_folder.write_json_atomically(run_folder.pretraining_dir(folder) / 'config.json',
                                   json.loads(phase.to_json()))
  done = phase.num_train_steps if steps_done is None else steps_done
  run_folder.write_json_atomically(run_folder.pretraining_dir(folder) / 'results.json',
                                   {'steps': done, 'vocab_size': 17})
  return folder


def test_pretrained_folder_without_a_finished_pretraining_is_refused(tmp_path):
  spec = 'configs/listops.py:luna16,quick,spt'
  message = one_line_error(spec, f'--config.pretrained={tmp_path}')
  assert 'holds no finished pretraining' in message and 'config.pretrained' in message
  fake_pretraining(tmp_path / 'half', spec, steps_done=3)
  assert 'no finished' in one_line_error(spec, f'--config.pretrained={tmp_path / "half"}')
  fake_pretraining(tmp_path / 'done', spec)
  config_lib.validate(config_lib.load_config(spec, [f'--config.pretrained={tmp_path / "done"}',
                                                    '--config.seed=3',
                                                    '--config.model.head=mean']))


@pytest.mark.parametrize('spec, overrides, field, fix', [
    ('configs/listops.py:transformer,quick,spt', (), 'model_name',
     'use --config configs/listops.py:transformer,quick'),
    ('configs/pathfinder.py:luna16,quick,spt', (), 'task',
     'use --config configs/pathfinder.py:luna16,quick'),
    ('configs/listops.py:transformer,quick,spt', ('--config.model.dim=32',), 'model_name',
     'use --config configs/listops.py:transformer,quick --config.model.dim=32'),
    ('configs/listops.py:luna16,quick,spt', ('--config.model.dim=32',), 'model.dim',
     'set --config.model.dim=32'),
    ('configs/listops.py:luna16,quick,spt', ('--config.append_eos=true',), 'append_eos',
     'set --config.append_eos=True'),
])
def test_pretrained_folder_of_another_task_model_vocabulary_or_size_is_refused(
    tmp_path, spec, overrides, field, fix):
  """The line names what differs and the option that fine-tunes the pretraining: for another
  task or model its preset with every word but spt (quick kept), which is then accepted."""
  folder = fake_pretraining(tmp_path / 'other', spec, *overrides)
  message = one_line_error('configs/listops.py:luna16,quick', f'--config.pretrained={folder}')
  assert 'pretrained another encoder' in message and f'({field} ' in message
  assert f'to fine-tune it {fix}, or' in message
  assert 'objective' not in message  # the objective is the pretraining's own, never blamed
  words = fix.split()[1:]
  given = words[1] if words[0] == '--config' else 'configs/listops.py:luna16,quick'
  flags = [w for w in words if w.startswith('--config.')]
  config_lib.validate(config_lib.load_config(given, [f'--config.pretrained={folder}', *flags]))


def test_a_pretrained_folder_that_does_not_exist_is_not_found(tmp_path):
  message = one_line_error('configs/listops.py:luna16,quick',
                           f'--config.pretrained={tmp_path / "nowhere"}')
  assert message.startswith(f"config.pretrained = '{tmp_path / 'nowhere'}' not found")
  assert 'holds no' not in message


@pytest.mark.parametrize('spec', ['configs/listops.py:luna16,quick',
                                  'configs/listops.py:luna16,quick,spt'])
def test_pretrained_takes_the_pretraining_s_own_objective_from_either_folder(tmp_path, spec):
  """Without the word spt, and given the run folder or the pretraining/ folder that results.json
  names, a run fine-tunes from the pretraining with its objective, rate and steps."""
  folder = fake_pretraining(tmp_path / 'run', 'configs/listops.py:luna16,quick,spt',
                            '--config.pretraining.num_train_steps=7')
  for given in (folder, run_folder.pretraining_dir(folder)):
    config = config_lib.load_config(spec, [f'--config.pretrained={given}'])
    config_lib.validate(config)
    assert config.pretraining.objective == 'masked'
    assert config.pretraining.mask_rate == spt.PAPER_MASK_RATES['listops']
    assert config.pretraining.num_train_steps == 7 and not config.pretraining.is_phase
    assert spt.pretraining_folder(given) == run_folder.pretraining_dir(folder)
    assert config_lib.model_label(config) == 'luna16+spt'


def test_pretrained_with_another_objective_asked_is_refused(tmp_path):
  folder = fake_pretraining(tmp_path / 'run', 'configs/listops.py:transformer,quick,spt',
                            '--config.pretraining.objective=causal', '--config.model.head=mean')
  message = one_line_error('configs/listops.py:transformer,quick,spt',
                           f'--config.pretrained={folder}', '--config.model.head=mean')
  assert "holds a 'causal' pretraining, but this run asks for 'masked'" in message
  config = config_lib.load_config('configs/listops.py:transformer,quick',
                                  [f'--config.pretrained={folder}', '--config.model.head=mean'])
  config_lib.validate(config)
  assert config.pretraining.objective == 'causal'


def test_most_frequent_token_share_is_counted_over_real_tokens_only():
  ids = np.array([[5, 5, 7, 9, 0, 0], [7, 7, 7, 9, 0, 0]])  # 9 is EOS, 0 padding
  assert masking.most_frequent_token([ids], mask_padding=True, eos_id=9) == (7, 4 / 6)
  # Pixels: 0 is a value, nothing is padding.
  assert masking.most_frequent_token([ids], mask_padding=False) == (0, 4 / 12)
  # Retrieval's two documents count together; a tie goes to the lowest id.
  assert masking.most_frequent_token([np.array([[3, 3]]), np.array([[4, 4]])], True) == (3, 0.5)
  with pytest.raises(ValueError, match='no predictable token'):
    masking.most_frequent_token([np.zeros((2, 3), int)], mask_padding=True)


# ----------------------------------------------------------------------------------------------
# The two phases end to end (slow: they train).
# ----------------------------------------------------------------------------------------------
SPT_RUN = {'pretraining.num_train_steps': 20, 'pretraining.warmup_steps': 5,
           'num_train_steps': 20}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp('data')


def spt_command(data_dir, workdir, **changes):
  return [sys.executable, str(REPO / 'run_lra.py'), '--config', tiny.QUICK_LISTOPS + ',spt',
          '--workdir', str(workdir),
          *tiny.flags(data_dir=str(data_dir), **{**SPT_RUN, **changes})]


def run_env(**extra):
  import os  # pylint: disable=import-outside-toplevel
  env = dict(os.environ, JAX_PLATFORMS='cpu', CI='1', XLA_FLAGS=tiny.xla_flags())
  env.update(extra)
  return env


@pytest.fixture(scope='module')
def reference_spt(data_dir, tmp_path_factory):
  """An uninterrupted run: 20 pretraining steps, then 20 fine-tuning steps."""
  workdir = tmp_path_factory.mktemp('spt') / 'ref'
  subprocess.run(spt_command(data_dir, workdir), env=run_env(), check=True, capture_output=True)
  return workdir


def without_folder(results: dict) -> dict:
  return {**results, 'pretraining': {k: v for k, v in results['pretraining'].items()
                                     if k != 'folder'}}


def read_results(workdir) -> tuple[dict, dict]:
  return (json.loads((workdir / 'results.json').read_text()),
          json.loads((run_folder.pretraining_dir(workdir) / 'results.json').read_text()))


def test_results_have_a_pretraining_section_on_training_inputs_only(reference_spt):
  results, pretrained = read_results(reference_spt)
  section = results['pretraining']
  assert section['objective'] == 'masked' and section['steps'] == 20
  # The reference point: the share of the most frequent real token of the held-in inputs.
  assert section['majority_token'] == pretrained['majority_token']
  assert 0 < section['majority_accuracy'] == pretrained['majority_accuracy'] < 1
  assert section['folder'] == str(run_folder.pretraining_dir(reference_spt))
  assert 0 <= section['accuracy'] <= 1 and section['loss'] > 0 and section['predicted_tokens'] > 0
  assert section['inputs'].startswith('training split only')
  assert pretrained['phase'] == 'pretraining' and pretrained['loss'] == section['loss']
  assert results['steps'] == 20 and 'test_accuracy' in results


def test_fine_tuning_starts_from_exactly_the_pretrained_encoder_and_a_fresh_head(
    data_dir, reference_spt):
  config = spt.use_spt_settings(tiny.config(data_dir, 'luna16'))
  for key, value in SPT_RUN.items():
    section, _, field = key.rpartition('.')
    (config[section] if section else config)[field] = value
  from lra_luna import datasets  # pylint: disable=import-outside-toplevel
  data = datasets.load_task(config)
  tx = steps.make_optimizer(config)
  _, fresh, _ = steps.init_state(steps.model_config(config, data), 0, tx)
  run = train.SeedRun(config, reference_spt,
                      pretrained_from=run_folder.pretraining_dir(reference_spt))
  started = fine_tuning.with_pretrained_encoders(config, data, [run], [fresh])[0]
  phase = spt.phase_config(config)
  _, template, _ = steps.init_state(steps.model_config(phase, data), 0,
                                    steps.make_optimizer(phase),
                                    steps.pretraining_objective(phase, data))
  saved = checkpoints.Checkpoints(run_folder.pretraining_dir(reference_spt))
  _, pretrained = saved.restore_state('latest', template)
  saved.close()
  encoder = lambda state: jax.tree.leaves(state['params']['encoder'])
  assert len(encoder(started)) == len(encoder(pretrained)) > 0
  for a, b in zip(encoder(started), encoder(pretrained)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(jax.tree.leaves(started['params']['classifier']),
                  jax.tree.leaves(fresh['params']['classifier'])):
    np.testing.assert_array_equal(a, b)  # the fresh head, as drawn from the seed
  table = lambda state: state['params']['encoder']['embedding']['tokens']['embedding']
  assert not np.array_equal(table(fresh), table(pretrained))  # pretraining moved the encoder


def wait_for_checkpoint(folder, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline and run_folder.saved_step(folder, 'latest') is None:
    time.sleep(0.05)
  assert run_folder.saved_step(folder, 'latest') is not None, folder


def test_a_signal_in_pretraining_names_the_phase_and_resumes_exactly(data_dir, reference_spt,
                                                                     tmp_path):
  """The run waits in the pretraining's first checkpoint write (LRA_LUNA_PAUSE_IN) for SIGTERM:
  one line naming the phase; the rerun pretrains on from step 10 and ends as the reference."""
  workdir = tmp_path / 'stopped'
  command = spt_command(data_dir, workdir)
  proc = subprocess.Popen(command, env=run_env(LRA_LUNA_PAUSE_IN='checkpoint'),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:
    if line.startswith('pausing in phase checkpoint'):
      break
  proc.send_signal(signal.SIGTERM)
  stderr = proc.stderr.read()
  assert proc.wait(timeout=300) == 128 + signal.SIGTERM, stderr[-2000:]
  assert 'Traceback' not in stderr
  line = stderr.strip().splitlines()[-1]
  assert re.fullmatch(r'SIGTERM: stopped in pretraining at step 10 of 20, checkpoint saved at '
                      r'step 10; resume with: python .*', line), line
  assert run_folder.saved_step(run_folder.pretraining_dir(workdir), 'latest') == 10
  assert not (workdir / 'results.json').exists()
  subprocess.run(command, env=run_env(), check=True, capture_output=True)
  ours, reference = read_results(workdir), read_results(reference_spt)
  assert without_folder(ours[0]) == without_folder(reference[0])
  assert ours[1] == reference[1]


def test_a_kill_in_fine_tuning_resumes_without_pretraining_again(data_dir, reference_spt,
                                                                 tmp_path):
  workdir = tmp_path / 'killed'
  command = spt_command(data_dir, workdir)
  proc = subprocess.Popen(command, env=run_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  wait_for_checkpoint(workdir)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (workdir / 'results.json').exists()
  rerun = subprocess.run(command, env=run_env(), check=True, capture_output=True, text=True)
  assert f'pretraining finished in {run_folder.pretraining_dir(workdir)}; fine-tuning.' in (
      rerun.stdout)
  ours, reference = read_results(workdir), read_results(reference_spt)
  assert without_folder(ours[0]) == without_folder(reference[0])
  assert ours[1] == reference[1]


@pytest.mark.parametrize('spt_word', [True, False])
def test_fine_tuning_from_another_runs_pretraining(data_dir, reference_spt, tmp_path, spt_word):
  """With or without the word spt, from the run folder or the folder results.json names: the
  same results as the run that pretrained, and the first lines name the pretraining."""
  workdir = tmp_path / 'shared'
  given = reference_spt if spt_word else json.loads(
      (reference_spt / 'results.json').read_text())['pretraining']['folder']
  command = spt_command(data_dir, workdir, **{'pretrained': str(given)})
  if not spt_word:
    command[command.index('--config') + 1] = tiny.QUICK_LISTOPS
    command = [arg for arg in command if 'pretraining.' not in arg]
  proc = subprocess.run(command, env=run_env(), check=True, capture_output=True, text=True)
  head = proc.stdout.splitlines()[:8]
  folder = run_folder.pretraining_dir(reference_spt)
  assert any(f'20 fine-tuning steps from the masked pretraining in {given}' in line
             for line in head), head
  assert any(line.startswith(f'fine-tuning from the pretraining in {folder}: masked at rate '
                             f"{spt.PAPER_MASK_RATES['listops']}, 20 steps") for line in head), head
  results = json.loads((workdir / 'results.json').read_text())
  assert results['pretraining']['folder'] == str(run_folder.pretraining_dir(reference_spt))
  assert not run_folder.pretraining_dir(workdir).exists()  # nothing pretrained here
  reference = read_results(reference_spt)[0]
  for key in ('best', 'last', 'test_accuracy', 'num_params'):  # the same seed, the same start
    assert results[key] == reference[key]
  assert without_folder(results)['pretraining'] == without_folder(reference)['pretraining']


def test_each_process_of_a_sequential_sweep_fine_tunes_the_one_pretraining(data_dir,
                                                                           reference_spt,
                                                                           tmp_path):
  """A sequential sweep runs one process per seed: seed 1 in <group>/seed1 fine-tunes the
  finished pretraining of seed 0 (pretraining.seed = 0) in <group>/seed0, as a vmapped group
  does, with the results of naming it as --config.pretrained. Not taken: a sibling's pretraining
  of another config, one where the run has started its own, one outside the sweep layout."""
  group = tmp_path / 'listops' / 'luna16+spt' / 'cls'
  shared = run_folder.pretraining_dir(group / 'seed0')
  shutil.copytree(run_folder.pretraining_dir(reference_spt), shared)
  proc = subprocess.run(spt_command(data_dir, group / 'seed1', seed=1), env=run_env(),
                        check=True, capture_output=True, text=True)
  assert f'fine-tuning from the pretraining of seed 0 in {shared}' in proc.stdout
  assert not run_folder.pretraining_dir(group / 'seed1').exists()
  explicit = tmp_path / 'explicit'
  subprocess.run(spt_command(data_dir, explicit, seed=1, pretrained=str(group / 'seed0')),
                 env=run_env(), check=True, capture_output=True)
  ours, given = (json.loads((w / 'results.json').read_text()) for w in (group / 'seed1', explicit))
  assert ours['pretraining'] == given['pretraining'] and ours['pretraining']['folder'] == str(shared)
  for key in ('best', 'last', 'test_accuracy'):
    assert ours[key] == given[key]

  def taken(seed, workdir=None, **changes):
    config = config_lib.load_config(tiny.QUICK_LISTOPS + ',spt', tiny.flags(
        data_dir=str(data_dir), **{**SPT_RUN, 'seed': seed, **changes}))
    run = train.SeedRun(config, workdir or group / f'seed{seed}')
    return pretraining_lib.sibling_pretraining(config, run, 0)
  assert taken(1) == taken(2) == group / 'seed0'  # seed 1 again when it resumes
  assert taken(2, **{'pretraining.num_train_steps': 30}) is None
  run_folder.pretraining_dir(group / 'seed3').mkdir(parents=True)
  assert taken(3) is None
  assert taken(2, tmp_path / 'elsewhere') is None
  assert taken(0) is None  # the owner pretrains in its own folder


def test_a_pretraining_of_another_vocabulary_is_refused_before_training(data_dir, reference_spt,
                                                                         tmp_path):
  recorded = run_folder.pretraining_dir(reference_spt) / 'results.json'
  fake = tmp_path / 'fake'
  for name in ('config.json', 'results.json'):
    source = run_folder.pretraining_dir(reference_spt) / name
    saved = json.loads(source.read_text())
    if name == 'results.json':
      saved['vocab_size'] = 99
    run_folder.write_json_atomically(run_folder.pretraining_dir(fake) / name, saved)
  assert recorded.exists()
  proc = subprocess.run(spt_command(data_dir, tmp_path / 'run', pretrained=str(fake)),
                        env=run_env(), capture_output=True, text=True)
  assert proc.returncode == 1
  assert re.fullmatch(r'error: .* pretrained a vocabulary of 99 ids, this task has \d+; '
                      r'fine-tune from a pretraining of the same data\.',
                      proc.stderr.strip().splitlines()[-1])
  assert run_folder.saved_step(tmp_path / 'run', 'latest') is None


@pytest.mark.parametrize('toeplitz_max_elements', [1 << 24, 0])  # the Toeplitz form; the conv
def test_direct_causal_convolution_equals_the_fft_one(monkeypatch, toeplitz_max_elements):
  from lra_luna.models.blocks import s4d  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(s4d, 'TOEPLITZ_MAX_ELEMENTS', toeplitz_max_elements)
  rng = np.random.default_rng(0)
  u = jnp.asarray(rng.normal(size=(2, 13, 3)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(3, 13)), jnp.float32)
  direct = np.zeros((2, 13, 3))
  for i in range(13):
    for j in range(i + 1):
      direct[:, i] += np.asarray(kernel[:, i - j]) * np.asarray(u[:, j])
  np.testing.assert_allclose(s4d.causal_convolution(u, kernel), direct, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(s4d.fft_convolution(u, kernel), direct, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# Report: from scratch and SPT side by side.
# ----------------------------------------------------------------------------------------------
def fake_result(folder, model, seed, accuracy, pretrained: bool, token_accuracy=0.30,
                pretraining_folder='shared'):
  results = {'task': 'listops', 'model': model, 'head': 'cls', 'seed': seed,
             'last': {'test_accuracy': accuracy}, 'best': {'test_accuracy': accuracy}}
  if pretrained:
    results['pretraining'] = {'objective': 'masked', 'steps': 10, 'accuracy': token_accuracy,
                              'majority_accuracy': 0.192, 'folder': pretraining_folder}
    run_folder.write_json_atomically(run_folder.pretraining_dir(folder) / 'results.json',
                                     {'phase': 'pretraining', 'steps': 10})
  run_folder.write_json_atomically(folder / 'results.json', results)


SCRATCH, SPT = [0.40, 0.42, 0.47], [0.50, 0.56, 0.52]


def test_report_puts_scratch_spt_their_difference_and_the_pretraining_side_by_side(tmp_path):
  from scipy import stats  # pylint: disable=import-outside-toplevel
  from lra_luna.report import command  # pylint: disable=import-outside-toplevel
  for seed, (scratch, pretrained) in enumerate(zip(SCRATCH, SPT)):
    fake_result(tmp_path / 'scratch' / f'seed{seed}', 'transformer', seed, scratch, False)
    # A label written before the suffix existed gets it from the pretraining section. Seeds 0
    # and 1 share one pretraining, seed 2 has its own: two pretrainings.
    fake_result(tmp_path / 'spt' / f'seed{seed}', 'transformer', seed, pretrained, True,
                token_accuracy=0.30 if seed < 2 else 0.40,
                pretraining_folder='shared' if seed < 2 else 'own')
  paths = command.make_report(tmp_path)
  table = (tmp_path / 'report' / 'table_spt.md').read_text()
  assert tmp_path / 'report' / 'table_spt.md' in paths
  cells = {line.split(' | ')[0].lstrip('| '): line.split(' | ') for line in table.splitlines()
           if line.startswith('| ')}
  assert cells['Transformer'][3] == '43.00 ± 3.61 (3)'
  assert cells['Transformer + SPT'][3] == '52.67 ± 3.06 (3)'
  # The difference and its 95% interval by Welch's t, as scipy computes it.
  welch = stats.ttest_ind(np.array(SPT) * 100, np.array(SCRATCH) * 100, equal_var=False)
  low, high = welch.confidence_interval(0.95)
  assert cells['Δ SPT - scratch'][3] == f'{52.67 - 43.00:+.2f} [{low:+.2f}, {high:+.2f}]'
  # The pretraining's token accuracy over its two pretrainings, beside its reference point.
  assert cells['pretraining: token accuracy'][3] == '35.00 ± 7.07 (2)'
  assert cells['pretraining: always the most frequent token'][3] == '19.20 ± 0.00 (2)'
  # The SPT paper's printed figures, each in its own column, never a task cell.
  header = next(line for line in table.splitlines() if line.startswith('| Model'))
  assert 'LRA avg. w/o PathX-256 (paper)' in header and 'PathX-256 (paper)' in header
  paper = cells['Transformer + rotary + masked SPT']
  assert paper[3] == '—' and paper[-2] == '86.20' and paper[-1] == '— |'
  assert cells['S4 + SPT'][-1] == '87.00 |'
  # Not repeated in Table 1, which says where they are; no empty Table 3 (no Luna run).
  table1 = (tmp_path / 'report' / 'table1.md').read_text()
  assert 'Transformer + SPT' not in table1.split('\n\n')[1]
  assert 'Self-pretrained rows (transformer+spt) are in table_spt' in table1
  assert not (tmp_path / 'report' / 'table3.md').exists()


def test_report_without_spt_runs_writes_no_spt_table(tmp_path):
  from lra_luna.report import command  # pylint: disable=import-outside-toplevel
  fake_result(tmp_path / 'a', 'transformer', 0, 0.4, False)
  command.make_report(tmp_path)
  assert not (tmp_path / 'report' / 'table_spt.md').exists()


def test_spt_runs_are_labelled_apart_from_scratch():
  config = config_lib.load_config('configs/listops.py:luna16,quick,spt')
  assert config_lib.model_label(config) == 'luna16+spt'
  assert config_lib.model_label(config_lib.load_config('configs/listops.py:luna16,quick')) == (
      'luna16')


def test_profile_points_of_the_pretraining_step():
  from lra_luna.profile import measure  # pylint: disable=import-outside-toplevel
  config = measure.point_config('configs/listops.py:quick', 'luna16', 60, 8, 'float32', 'masked')
  sizes = type('Sizes', (), {'vocab_size': 17, 'source': {}})()
  objective = steps.pretraining_objective(config, sizes)
  assert objective.name == 'masked' and objective.mask_id == 18
  assert measure.point_label('luna16', 'masked') == 'luna16 [masked]'
  plain = measure.point_config('configs/listops.py:quick', 'luna16', 60, 8, 'float32')
  assert steps.pretraining_objective(plain, sizes) is None
  causal = measure.point_config('configs/listops.py:quick', 's4d', 60, 8, 'float32', 'causal')
  assert steps.model_config(causal, type('S', (), {'vocab_size': 17, 'num_classes': 10})()).causal


def test_an_image_pretraining_step_trains_a_one_value_head_on_the_l1_loss():
  """The word spt on Image, through the training step: the objective carries the authors' pixel
  normalisation, the state's token head has one output, and the step's loss is the L1 loss."""
  config = spt.phase_config(config_lib.load_config('configs/image.py:transformer,quick,spt'))
  config.model.update(num_layers=1, dim=16, ffn_dim=16, num_heads=2)
  config.max_length = 32
  sizes = type('Sizes', (), {'vocab_size': 256, 'num_classes': 10, 'source': {}})()
  objective = steps.pretraining_objective(config, sizes)
  assert (objective.loss, objective.pixel_mean, objective.pixel_std) == (
      'l1', *spt.PIXEL_NORMALIZATION['image'])
  graphdef, state, _ = steps.init_state(steps.model_config(config, sizes), 0,
                                        steps.make_optimizer(config), objective)
  assert state['params']['token_head']['logits']['kernel'].shape[-1] == 1
  pixels = jnp.asarray(np.random.default_rng(0).integers(0, 256, (4, 32)), jnp.int32)
  batch = {'inputs': pixels, 'targets': jnp.zeros((4,), jnp.int32)}
  grads, loss, accuracy = steps.batch_gradients(state['params'], state['constants'], batch,
                                                jax.random.key(0), None, graphdef=graphdef,
                                                objective=objective)
  # An untrained head predicts values near 0: the L1 loss is about the mean |normalised pixel|.
  typical = float(jnp.mean(jnp.abs((pixels - 122.6) / 61.0)))
  assert 0.5 * typical < float(loss) < 2 * typical and 0.0 <= float(accuracy) <= 1.0
  assert float(optax.tree.norm(grads['token_head'])) > 0.0


def test_evaluate_and_predict_read_an_spt_run_as_any_other(reference_spt):
  from lra_luna import evaluate, predict  # pylint: disable=import-outside-toplevel
  results = read_results(reference_spt)[0]
  evaluated = evaluate.evaluate_workdir(reference_spt)
  assert evaluated['last'] == results['last'] and evaluated['model'] == 'luna16+spt'
  probabilities = predict.load_predictor(reference_spt, 'last').predict_proba(
      ['( ( [MAX 2 9 ) 4 ] )', '( [MIN 3 1 ] )'])
  assert probabilities.shape == (2, 10)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_opening_line_counts_both_phases():
  from lra_luna import run_size  # pylint: disable=import-outside-toplevel
  config = config_lib.load_config('configs/listops.py:luna16,quick,spt')
  assert (f'{config.pretraining.num_train_steps} masked pretraining + '
          f'{config.num_train_steps} fine-tuning steps of batch') in run_size.opening_line(config)
  plain = config_lib.load_config('configs/listops.py:luna16,quick')
  assert f': {plain.num_train_steps} steps of batch' in run_size.opening_line(plain)


def test_figure_says_an_spt_point_is_fine_tuning_speed(tmp_path):
  from lra_luna import report  # pylint: disable=import-outside-toplevel
  from lra_luna.report import figures  # pylint: disable=import-outside-toplevel
  for model in ('transformer', 'transformer+spt'):
    folder = tmp_path / model / 'seed0'
    fake_result(folder, model, 0, 0.5, model.endswith('+spt'))
    (folder / 'metrics.jsonl').write_text('{"step": 10, "steps_per_s": 3.0}\n')
  results = report.load_results(tmp_path)
  points = figures.figure_points(report.summarize(results, 'last'), results, None)
  assert any('+spt points: the speed of their fine-tuning alone' in n for n in points['notes'])
