"""Evaluation of a trained workdir without training, and prediction on new inputs: the numbers
equal the training run's, tokenisation equals the readers', bad input is one clear line."""

import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx
from PIL import Image

from lra_luna import datasets, evaluate, predict
from lra_luna.training import checkpoints, steps, train
from lra_luna.datasets import image, listops, pathfinder, retrieval, text

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests'))
from test_train import run_env  # noqa: E402
from tiny import config as tiny_config  # noqa: E402


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  """A tiny ListOps Transformer whose validation accuracy peaks before the last step (a learning
  rate that first helps, then wrecks it), so the best and the last checkpoint differ."""
  root = tmp_path_factory.mktemp('predict')
  config = tiny_config(root / 'data', 'transformer', num_train_steps=40, eval_every=5,
                       checkpoint_every=5, learning_rate=0.3, schedule='cosine', warmup_steps=20)
  results = train.train_and_evaluate(config, root / 'run')
  return config, root / 'run', results


# ----------------------------------------------------------------------------------------------
# Evaluation only.
# ----------------------------------------------------------------------------------------------
def test_evaluation_equals_the_training_run_for_each_checkpoint(run):
  _, workdir, results = run
  assert results['best']['step'] < results['last']['step']
  evaluated = evaluate.evaluate_workdir(workdir)
  assert evaluated['best'] == results['best'] and evaluated['last'] == results['last']
  assert {k: evaluated[k] for k in ('task', 'model', 'head', 'seed')} == {
      k: results[k] for k in ('task', 'model', 'head', 'seed')}
  assert list(evaluate.evaluate_workdir(workdir, ['best'])) == ['task', 'model', 'head', 'seed',
                                                                 'best']


def test_evaluate_cli_prints_the_sections(run, capsys):
  _, workdir, results = run
  assert evaluate.main([str(workdir), '--checkpoint', 'last']) == 0
  assert json.loads(capsys.readouterr().out)['last'] == results['last']


def one_line_error(main, argv, capsys) -> str:
  assert main(argv) == 1
  captured = capsys.readouterr()
  assert captured.out == '' and captured.err.startswith('error: ')
  assert len(captured.err.strip().splitlines()) == 1 and 'Traceback' not in captured.err
  return captured.err


def test_a_workdir_without_checkpoints_is_refused_in_one_line(run, tmp_path, capsys):
  config, workdir, _ = run
  assert 'has no config.json' in one_line_error(evaluate.main, [str(tmp_path)], capsys)
  (tmp_path / 'config.json').write_text((workdir / 'config.json').read_text())
  error = one_line_error(evaluate.main, [str(tmp_path)], capsys)
  assert 'has no best and no last checkpoint' in error and 'run_lra.py' in error
  assert not (tmp_path / 'checkpoints').exists()  # Looking created nothing.
  assert 'has no best checkpoint' in one_line_error(predict.main, [str(tmp_path), '[MAX 1 ]'],
                                                    capsys)


# ----------------------------------------------------------------------------------------------
# Prediction.
# ----------------------------------------------------------------------------------------------
def test_probabilities_are_the_restored_models_and_match_test_accuracy(run):
  config, workdir, results = run
  predictor = predict.load_predictor(workdir)
  assert (predictor.checkpoint, predictor.step) == ('best', results['best']['step'])
  # The test split's expressions as the files print them (with parentheses).
  rows = [line.split('\t') for line in (pathlib.Path(config.data_dir) / config.dataset_name /
                                        'basic_test.tsv').read_text().splitlines()[1:]]
  expressions, labels = [e for e, _ in rows], np.array([int(v) for _, v in rows])
  batch = predictor.encode(expressions)
  data = datasets.load_task(config)
  np.testing.assert_array_equal(batch['inputs'], data.splits['test']['inputs'])
  probabilities = predictor.predict_proba(expressions)
  assert probabilities.shape == (len(expressions), 10)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
  # A forward pass of the best checkpoint, restored on its own.
  mc = steps.model_config(config, data)
  graphdef, state, _ = steps.init_state(mc, config.seed, steps.make_optimizer(config))
  ckpt = checkpoints.Checkpoints(workdir)
  state = ckpt.restore_best(state)
  ckpt.close()
  forward = jax.jit(lambda params, constants, inputs: jax.nn.softmax(
      nnx.merge(graphdef, params, constants)({'inputs': inputs}, deterministic=True)))
  expected = forward(state['params'], state['constants'], batch['inputs'][:5])
  np.testing.assert_allclose(probabilities[:5], expected, rtol=1e-5, atol=1e-6)
  accuracy = np.mean(probabilities.argmax(axis=1) == labels)
  assert accuracy == pytest.approx(results['best']['test_accuracy'], abs=1e-9)


def test_predict_cli_without_tensorflow(run):
  """`python -m lra_luna.predict` with TensorFlow unimportable: JSON lines, then a bad token."""
  _, workdir, _ = run
  code = f'''
import sys
sys.modules['tensorflow'] = None  # any `import tensorflow` now raises ImportError
sys.path.insert(0, {str(REPO)!r})
from lra_luna import predict
from lra_luna.datasets import text
config = predict.evaluate.load_run_config({str(workdir)!r})
config.task = 'text'
print(predict.encode_inputs(config, ['ab'])['inputs'][0, :3].tolist())
sys.exit(predict.main([{str(workdir)!r}, '[MAX 2 9 [MIN 4 7 ] 0 ]', '( ( [SM 3 4 ) ] )']) or
         predict.main([{str(workdir)!r}, '[MAX 2 X ]']))
'''
  proc = subprocess.run([sys.executable, '-c', code], env=run_env(), capture_output=True,
                        text=True)
  assert proc.returncode == 1, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert lines[0] == '[98, 99, 0]'
  first, second = (json.loads(line) for line in lines[1:])
  assert first['input'] == '[MAX 2 9 [MIN 4 7 ] 0 ]' and len(first['probabilities']) == 10
  assert first['class'] == int(np.argmax(first['probabilities']))
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: ListOps input '[MAX 2 X ]': unknown token 'X' (known: [MIN [MAX [MED [SM ] "
      "0 1 2 3 4 5 6 7 8 9 and parentheses).")


# ----------------------------------------------------------------------------------------------
# Tokenisation of every task equals its reader's.
# ----------------------------------------------------------------------------------------------
def task_config(task, **fields):
  config = tiny_config('unused')
  config.task = task
  config.update(fields)
  return config


def test_text_and_retrieval_ids_equal_the_readers(tmp_path):
  review = 'caf\u00e9, 10/10 \u2014 would watch again'
  config = task_config('text', max_length=40)
  np.testing.assert_array_equal(predict.encode_inputs(config, [review])['inputs'],
                                text.encode_bytes([review.encode()], 40))
  folder = tmp_path / 'aan'
  folder.mkdir()
  pair = ('first paper \u00fcber alles ' * 600, 'the second')  # over 10000 bytes: cut first
  (folder / 'pairs.tsv').write_text(f'1.0\tA\tB\t{pair[0]}\t{pair[1]}\n', encoding='utf-8')
  expected, _ = retrieval.read_aan_tsv(folder / 'pairs.tsv', 12000)
  batch = predict.encode_inputs(task_config('retrieval', max_length=12000), [pair])
  for name in ('inputs1', 'inputs2'):
    np.testing.assert_array_equal(batch[name], expected[name])
  with pytest.raises(ValueError, match='expected a pair of texts'):
    predict.encode_inputs(task_config('retrieval'), ['only one text'])


def test_image_file_is_made_gray_as_the_image_reader_does(tmp_path):
  rng = np.random.default_rng(0)
  rgb = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
  rgb[0, :5] = [(0, 0, 0), (255, 255, 255), (255, 0, 0), (0, 255, 0), (0, 0, 255)]
  Image.fromarray(rgb).save(tmp_path / 'picture.png')
  ids = predict.encode_inputs(task_config('image', max_length=1024), [tmp_path / 'picture.png'])
  np.testing.assert_array_equal(ids['inputs'][0], image.grayscale(rgb).reshape(-1))
  assert ids['inputs'][0, :5].tolist() == [0, 255, 76, 149, 29]  # tf.image.rgb_to_grayscale's
  Image.fromarray(rgb[:16]).save(tmp_path / 'small.png')
  with pytest.raises(ValueError, match='image is 32x16, expected 32x32'):
    predict.encode_inputs(task_config('image', max_length=1024), [tmp_path / 'small.png'])
  with pytest.raises(ValueError, match='cannot read this image'):
    predict.encode_inputs(task_config('image', max_length=1024), [tmp_path / 'absent.png'])


def test_grayscale_equals_tensorflow_for_every_colour():
  tf = pytest.importorskip('tensorflow')
  colours = np.arange(2**24, dtype=np.uint32)
  rgb = np.stack([colours >> 16, colours >> 8, colours], -1).astype(np.uint8)
  np.testing.assert_array_equal(image.grayscale(rgb),
                                tf.image.rgb_to_grayscale(rgb).numpy()[..., 0])


def test_pathfinder_png_is_read_as_the_reader_does(tmp_path):
  pixels = np.random.default_rng(1).integers(0, 256, (32, 32), dtype=np.uint8)
  Image.fromarray(pixels, mode='L').save(tmp_path / 'path.png')
  config = task_config('pathfinder', max_length=1024)
  config.pathfinder = {'resolution': 32}
  batch = predict.encode_inputs(config, [str(tmp_path / 'path.png')])
  np.testing.assert_array_equal(batch['inputs'][0], pixels.reshape(-1))
  (tmp_path / 'empty.png').write_bytes(b'')
  with pytest.raises(ValueError, match=r'empty.png: image is empty \(0 bytes\)'):
    predict.encode_inputs(config, [tmp_path / 'empty.png'])
  np.testing.assert_array_equal(pathfinder.read_image(tmp_path / 'path.png', 32),
                                pixels.reshape(-1))


def test_listops_token_ids_are_the_readers():
  assert listops.token_ids('( ( [MAX 2 ) 9 ) ] )') == listops.token_ids('[MAX 2 9 ]') == [
      listops.TOKEN_IDS[t] for t in ('[MAX', '2', '9', ']')]


def test_too_long_empty_or_unbalanced_input_is_refused_and_cut_only_where_training_cut(capsys):
  config = task_config('listops', max_length=7)
  assert predict.encode_inputs(config, ['[MAX 2 9 [MIN 4 ] ]'])['inputs'].shape == (1, 7)
  with pytest.raises(ValueError, match=r"has 9 tokens, 2 more than this model's max_length 7"):
    predict.encode_inputs(config, ['[MAX 2 9 [MIN 4 7 0 ] ]'])
  for empty in ('', '( )'):
    with pytest.raises(ValueError, match='is empty'):
      predict.encode_inputs(config, [empty])
  with pytest.raises(ValueError, match=r'brackets do not match \(1 operator'):
    predict.encode_inputs(config, ['[MAX 2 9'])
  with pytest.raises(ValueError, match=r'brackets do not match \(a \] closes nothing'):
    predict.encode_inputs(config, ['2 ] [MAX 9 ]'])
  # Text: refused when its config refuses cut reviews, cut with a note where training cut them.
  with pytest.raises(ValueError, match="Text input 'abcdef' has 6 tokens, 2 more"):
    predict.encode_inputs(task_config('text', max_length=4), ['abcdef'])
  with pytest.raises(ValueError, match='is empty'):
    predict.encode_inputs(task_config('text', max_length=4), [''])
  cut = task_config('text', max_length=4, max_truncated_fraction=1.0)
  np.testing.assert_array_equal(predict.encode_inputs(cut, ['abcdef'])['inputs'],
                                text.encode_bytes([b'abcd'], 4))
  assert "cut to the model's max_length 4" in capsys.readouterr().err
  with pytest.raises(ValueError, match="Retrieval text '' is empty"):
    predict.encode_inputs(task_config('retrieval', max_length=4), [('abc', '')])


def test_a_missing_folder_or_a_sweep_root_is_named_as_such(run, tmp_path, capsys):
  _, workdir, _ = run
  missing = tmp_path / 'nope'
  assert f'{missing}: no such folder' in one_line_error(evaluate.main, [str(missing)], capsys)
  sweep = tmp_path / 'sweep'
  for seed in (0, 1):
    folder = sweep / 'listops' / 'transformer' / 'cls' / f'seed{seed}'
    folder.mkdir(parents=True)
    (folder / 'config.json').write_text((workdir / 'config.json').read_text())
  for main, extra in ((evaluate.main, []), (predict.main, ['[MAX 1 ]'])):
    error = one_line_error(main, [str(sweep), *extra], capsys)
    assert f'{sweep} holds no run itself but 2 run folder(s) below it' in error
    assert f'{sweep}/listops/transformer/cls/seed0, {sweep}/listops/transformer/cls/seed1' in error
