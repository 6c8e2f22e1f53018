"""Text, Retrieval, Image, Pathfinder and Path-X: readers on tiny data with exact ids, their
errors, the release import, the task configs, and one training step of each quick config.

Text and Image run under `tfds.testing.mock_data` with hand-made examples (as_dataset_fn), so
no prepared TFDS data is needed.
"""

import importlib.util
import json
import pathlib
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest

from lra_luna import config_lib
from lra_luna.datasets import input_pipeline
from lra_luna.training import train
from lra_luna.datasets import base
from lra_luna.datasets import image
from lra_luna.datasets import listops
from lra_luna.datasets import retrieval
from lra_luna.datasets import text
from lra_luna.datasets import tfds_source

REPO = pathlib.Path(__file__).resolve().parents[1]
TASKS = ('text', 'retrieval', 'image', 'pathfinder', 'pathx')


def load_module(path: pathlib.Path, name: str):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def task_config(task: str, arg: str = 'luna16'):
  return load_module(REPO / 'configs' / f'{task}.py', f'{task}_config').get_config(arg)


# ----------------------------------------------------------------------------------------------
# Hand-made TFDS examples, served by tfds.testing.mock_data in place of the prepared files.
# ----------------------------------------------------------------------------------------------
IMDB = {
    'train': [(b'ab', 1), ('h\u00e9llo'.encode(), 0), (b'x' * 40, 1), (b'', 0),
              (bytes([0, 255, 9, 10]), 1), (b'sixth', 0), (b'seventh', 1), (b'eighth', 0)],
    'test': [(b'test one', 0), (b'zz', 1), (b'qqq', 0), (b'four', 1)],
}
GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)  # tf.image.rgb_to_grayscale (ITU-R BT.601 luma)
# Known colours -> gray: trunc(sum(w * x / 255) * 255.5), TF's float -> uint8 conversion.
KNOWN_COLOURS = {(0, 0, 0): 0, (255, 255, 255): 255, (255, 0, 0): 76, (0, 255, 0): 149,
                 (0, 0, 255): 29}


def cifar_split(split: str) -> tuple:
  """Deterministic images [N, 32, 32, 3] (first pixels: the known colours) and labels."""
  count = {'train': 20, 'test': 5}[split]
  rng = np.random.default_rng({'train': 1, 'test': 2}[split])
  images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
  images[:, 0, :len(KNOWN_COLOURS)] = list(KNOWN_COLOURS)
  return images, np.arange(count) % 10


def mock_as_dataset(self, split, **unused):
  """FileReaderBuilder._as_dataset stand-in: the examples above, in a fixed file order."""
  tf, _ = tfds_source.import_tensorflow_datasets()
  if self.name == 'imdb_reviews':
    rows = IMDB[split]
    return tf.data.Dataset.from_tensor_slices(
        {'text': [t for t, _ in rows], 'label': np.array([label for _, label in rows])})
  images, labels = cifar_split(split)
  return tf.data.Dataset.from_tensor_slices(
      {'image': images, 'label': labels, 'id': [f'{split}_{i}' for i in range(len(labels))]})


@pytest.fixture
def mock_tfds():
  _, tfds = tfds_source.import_tensorflow_datasets()
  with tfds.testing.mock_data(as_dataset_fn=mock_as_dataset):
    yield


def tfds_config(tmp_path, task: str, **fields):
  c = task_config(task)
  c.data_dir = str(tmp_path / 'root')
  c.update(fields)
  return c


def expected_text_ids(data: bytes, length: int) -> list:
  ids = [b + 1 for b in data[:length]]
  return ids + [0] * (length - len(ids))


# ----------------------------------------------------------------------------------------------
# Text.
# ----------------------------------------------------------------------------------------------
def test_text_ids_labels_and_lra_splits(tmp_path, mock_tfds):
  data = text.load_text(tfds_config(tmp_path, 'text', max_length=6))
  assert (data.vocab_size, data.num_classes, data.max_length) == (257, 2, 6)
  for split, source in (('train', 'train'), ('validation', 'test'), ('test', 'test')):
    arrays = data.splits[split]
    assert arrays['inputs'].shape == (len(IMDB[source]), 6)
    assert arrays['targets'].dtype == np.int32
    np.testing.assert_array_equal(arrays['targets'], [label for _, label in IMDB[source]])
    np.testing.assert_array_equal(arrays['inputs'],
                                  [expected_text_ids(t, 6) for t, _ in IMDB[source]])
  # 'h\u00e9llo' is 6 UTF-8 bytes (c3 a9 for the accent); byte 0 -> id 1, byte 255 -> id 256.
  assert data.splits['train']['inputs'][1].tolist() == [105, 196, 170, 109, 109, 112]
  assert data.splits['train']['inputs'][4, :4].tolist() == [1, 256, 10, 11]
  assert (tmp_path / 'root' / 'text' / 'cache_len6_test.npz').exists()


def test_text_heldout_validation_is_the_end_of_train(tmp_path, mock_tfds):
  data = text.load_text(tfds_config(tmp_path, 'text', max_length=4, text_validation='heldout',
                                    text_heldout=3))
  train_rows, heldout_rows = IMDB['train'][:-3], IMDB['train'][-3:]
  np.testing.assert_array_equal(data.splits['train']['inputs'],
                                [expected_text_ids(t, 4) for t, _ in train_rows])
  np.testing.assert_array_equal(data.splits['validation']['targets'],
                                [label for _, label in heldout_rows])
  assert len(data.splits['test']['targets']) == len(IMDB['test'])
  assert (tmp_path / 'root' / 'text' / 'cache_len4_heldout3.npz').exists()
  with pytest.raises(ValueError, match="text_validation = 'dev'"):
    text.load_text(tfds_config(tmp_path, 'text', text_validation='dev'))


def forbid_download(*unused_args, **unused_kwargs):
  raise AssertionError('download_and_prepare must never be called')


@pytest.mark.parametrize('task, loader, dataset', [
    ('text', text.load_text, 'imdb_reviews'), ('image', image.load_image, 'cifar10')])
def test_missing_tfds_data_says_how_to_prepare(tmp_path, task, loader, dataset):
  _, tfds = tfds_source.import_tensorflow_datasets()
  config = tfds_config(tmp_path, task)
  with mock.patch.object(tfds.core.DatasetBuilder, 'download_and_prepare', forbid_download):
    with pytest.raises(base.DataError) as error:
      loader(config)
  tfds_dir = tmp_path / 'root' / 'tfds'
  assert (f"tfds.builder('{dataset}', data_dir='{tfds_dir}').download_and_prepare()"
          in str(error.value))
  assert 'never downloads' in str(error.value)
  assert not tfds_dir.exists()  # nothing was written either


def test_tensorflow_is_imported_only_when_a_tfds_task_loads():
  code = ('import sys; import lra_luna.datasets.text, lra_luna.datasets.image, '
          'lra_luna.datasets.retrieval; assert "tensorflow" not in sys.modules')
  subprocess.run([sys.executable, '-c', code], cwd=REPO, check=True)


# ----------------------------------------------------------------------------------------------
# Image.
# ----------------------------------------------------------------------------------------------
def gray_before_rounding(images: np.ndarray) -> np.ndarray:
  """sum(w * x / 255) * 255.5 per pixel, [N, 1024]: TF truncates it to uint8."""
  luma = images.astype(np.float64) / 255 @ np.array(GRAY_WEIGHTS)
  return (luma * 255.5).reshape(len(images), -1)


def test_image_grayscale_pixels_and_splits(tmp_path, mock_tfds):
  data = image.load_image(tfds_config(tmp_path, 'image'))
  assert (data.vocab_size, data.num_classes, data.max_length) == (256, 10, 1024)
  train_images, train_labels = cifar_split('train')
  test_images, test_labels = cifar_split('test')
  # train[:90%] / train[90%:] in file order (18 / 2 of 20), then test.
  sources = {'train': (train_images[:18], train_labels[:18]),
             'validation': (train_images[18:], train_labels[18:]),
             'test': (test_images, test_labels)}
  for split, (images, labels) in sources.items():
    inputs, targets = data.splits[split]['inputs'], data.splits[split]['targets']
    assert inputs.shape == (len(labels), 1024) and targets.dtype == np.int32
    np.testing.assert_array_equal(targets, labels)
    np.testing.assert_array_equal(inputs[:, :len(KNOWN_COLOURS)],
                                  np.tile(list(KNOWN_COLOURS.values()), (len(labels), 1)))
    scaled = gray_before_rounding(images)
    expected = np.trunc(scaled)
    # Exact wherever float32 rounding inside TF cannot tip the value over an integer.
    clear = np.abs(scaled - np.round(scaled)) > 1e-3
    np.testing.assert_array_equal(inputs[clear], expected[clear])
    assert np.abs(inputs.astype(int) - expected).max() <= 1
  assert (tmp_path / 'root' / 'image' / 'cache_gray.npz').exists()


# ----------------------------------------------------------------------------------------------
# Retrieval.
# ----------------------------------------------------------------------------------------------
AAN_ROWS = [
    ('1.0', 'P01-1', 'P02-2', 'first paper', 'cites the second'),
    ('0', 'P03-3', 'P04-4', 'caf\u00e9 \u00fcber', 'x'),
    ('0.0', 'P05-5', 'P06-6', 'a' * 30, ''),
    ('1', 'P07-7', 'P08-8', 'tab\\tescaped', 'last'),
]


def write_aan(folder: pathlib.Path, rows=AAN_ROWS, splits=retrieval.SPLIT_FILES.values()):
  folder.mkdir(parents=True, exist_ok=True)
  for name in splits:
    (folder / name).write_text(''.join('\t'.join(row) + '\n' for row in rows), encoding='utf-8')
  return folder


def test_retrieval_exact_ids_labels_and_lengths(tmp_path):
  write_aan(tmp_path / 'aan')
  config = task_config('retrieval', 'luna16,quick')
  config.update(data_dir=str(tmp_path), max_length=12)
  data = retrieval.load_retrieval(config)
  assert (data.vocab_size, data.num_classes, data.max_length) == (257, 2, 12)
  assert sorted(data.splits) == ['test', 'train', 'validation']
  for arrays in data.splits.values():
    np.testing.assert_array_equal(arrays['targets'], [1, 0, 0, 1])
    assert arrays['targets'].dtype == np.int32
    for key, column in (('inputs1', 3), ('inputs2', 4)):
      assert arrays[key].shape == (4, 12)
      np.testing.assert_array_equal(
          arrays[key], [expected_text_ids(row[column].encode(), 12) for row in AAN_ROWS])
  assert data.splits['train']['inputs1'][1, :6].tolist() == [100, 98, 103, 196, 170, 33]
  assert (tmp_path / 'aan' / 'cache_len12.npz').exists()
  # 'cites the second' and 'a' * 30 are longer than 12 bytes: 2 of 8 documents per split.
  assert data.source['source'] == 'release'
  assert data.source['truncated_documents'] == {'train': 2, 'validation': 2, 'test': 2}
  config.max_truncated_fraction = 0.2  # 25% are cut: refused, also from the cache
  with pytest.raises(base.DataError, match=r'2 of 8 train examples \(25.0%\)'):
    retrieval.load_retrieval(config)


def test_retrieval_cuts_texts_to_10000_bytes_first(tmp_path):
  path = tmp_path / 'long.tsv'
  path.write_text('1.0\ta\tb\t' + 'y' * 10010 + '\tshort\n', encoding='utf-8')
  arrays, num_truncated = retrieval.read_aan_tsv(path, max_length=10005)
  assert num_truncated == 0  # LRA's 10000-byte cut comes first and is not counted
  assert (arrays['inputs1'][0] > 0).sum() == 10000  # LRA's cut, before max_length
  assert (arrays['inputs2'][0] > 0).sum() == 5


@pytest.mark.parametrize('line, what', [
    ('1.0\ta\tb\tonly four', 'expected 5 tab-separated columns .* found 4'),
    ('1.0\ta\tb\tc\td\te', 'found 6'),
    ('', 'found 0'),
    ('yes\ta\tb\tc\td', "label 'yes' .* is not a number"),
    ('2.0\ta\tb\tc\td', "label '2.0' .* must be 0 or 1"),
    ('0.5\ta\tb\tc\td', "label '0.5' .* must be 0 or 1"),
])
def test_retrieval_bad_rows_name_file_and_line(tmp_path, line, what):
  path = tmp_path / 'bad.tsv'
  path.write_text('1.0\ta\tb\tc\td\n0\ta\tb\tc\td\n' + line + '\n', encoding='utf-8')
  with pytest.raises(base.DataError, match=rf'bad.tsv, line 3: .*{what}'):
    retrieval.read_aan_tsv(path, max_length=8)


def test_retrieval_missing_or_empty_files(tmp_path):
  config = task_config('retrieval', 'luna16,quick')
  config.data_dir = str(tmp_path)
  with pytest.raises(base.DataError, match=r'new_aan_pairs.train.tsv, .* not found.*'
                                           r'data/import_lra_release.py') as refused:
    retrieval.load_retrieval(config)
  # Where the release is published, so that a newcomer can get it.
  assert ('https://storage.googleapis.com/long-range-arena/lra_release.gz, about 7.7 GB'
          in str(refused.value))
  # The raw release under the data root: the message says where the files are.
  write_aan(tmp_path / 'lra_release' / 'tsv_data', rows=AAN_ROWS)
  with pytest.raises(base.DataError, match=r'Found .*lra_release/tsv_data/new_aan_pairs.train'):
    retrieval.load_retrieval(config)
  write_aan(tmp_path / 'aan', rows=[])
  with pytest.raises(base.DataError, match=r'new_aan_pairs.train.tsv: no examples'):
    retrieval.load_retrieval(config)


def test_same_seed_same_batches(tmp_path):
  arrays, _ = retrieval.read_aan_tsv(write_aan(tmp_path / 'aan', rows=AAN_ROWS * 3) /
                                     'new_aan_pairs.train.tsv', max_length=8)

  def batches(seed):
    iterator = input_pipeline.train_iterator(arrays, 4, seed, process_index=0, process_count=1)
    return [next(iterator) for _ in range(6)]  # two epochs

  first, again, other = batches(0), batches(0), batches(1)
  for a, b in zip(first, again):
    for key in ('inputs1', 'inputs2', 'targets'):
      np.testing.assert_array_equal(a[key], b[key])
  assert any(not np.array_equal(a['inputs1'], b['inputs1']) for a, b in zip(first, other))


# ----------------------------------------------------------------------------------------------
# Import of the LRA release.
# ----------------------------------------------------------------------------------------------
def fake_release(root: pathlib.Path) -> pathlib.Path:
  """lra_release/lra_release/{listops-1000, tsv_data, pathfinder32} plus a stray outer copy."""
  inner = root / 'lra_release' / 'lra_release'
  (inner / 'listops-1000').mkdir(parents=True)
  for name in ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv'):
    (inner / 'listops-1000' / name).write_text('Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n')
  write_aan(inner / 'tsv_data')
  (inner / 'tsv_data' / 'new_aan_pairs.test.tsv').unlink()  # reported as missing
  for folder in (inner, root / 'lra_release'):
    for part in ('imgs/0', 'metadata'):
      (folder / 'pathfinder32' / 'curv_contour_length_14' / part).mkdir(parents=True)
  return root / 'lra_release'


@pytest.mark.parametrize('copy', [False, True])
def test_import_lra_release_from_a_nested_tree(tmp_path, copy):
  release = fake_release(tmp_path / 'download')
  data_root = tmp_path / 'store'
  command = [sys.executable, str(REPO / 'data' / 'import_lra_release.py'), str(release),
             '--data_dir', str(data_root)] + (['--copy'] if copy else [])
  output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
  inner = release / 'lra_release'
  for source, target in (
      (inner / 'listops-1000' / 'basic_val.tsv', data_root / 'listops-1000' / 'basic_val.tsv'),
      (inner / 'tsv_data' / 'new_aan_pairs.eval.tsv', data_root / 'aan' / 'new_aan_pairs.eval.tsv'),
      (inner / 'pathfinder32' / 'curv_contour_length_14' / 'metadata',
       data_root / 'pathfinder32' / 'curv_contour_length_14' / 'metadata')):
    assert target.is_symlink() != copy
    if copy:
      assert target.exists() and not target.is_symlink()
    else:
      assert target.resolve() == source.resolve()
    assert not target.parent.is_symlink()  # caches go to the data root, not the release
  assert 'missing: ' in output and 'new_aan_pairs.test.tsv' in output
  assert f'another copy of pathfinder32/curv_contour_length_14 at {release}' in output
  # The readers take the imported files as they are.
  np.testing.assert_array_equal(
      retrieval.read_aan_tsv(data_root / 'aan' / 'new_aan_pairs.train.tsv', 8)[0]['targets'],
      [1, 0, 0, 1])
  _, targets, _ = listops.read_listops_tsv(data_root / 'listops-1000' / 'basic_test.tsv', 4)
  assert targets.tolist() == [9]
  # A second run changes nothing and says so.
  again = subprocess.run(command, check=True, capture_output=True, text=True).stdout
  assert 'already there' in again or 'kept existing' in again


# ----------------------------------------------------------------------------------------------
# Configs.
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('task', TASKS)
def test_configs_build_for_every_model(task):
  for model in config_lib.MODELS:
    # Path-X has no authors' protocol.
    for arg in (model, f'{model},quick', *([f'{model},paper'] if task != 'pathx' else [])):
      if arg == 'lru,paper':  # the LRU paper's settings are not in the suite: refused in one line
        with pytest.raises(ValueError, match="'paper' variant of lru has no"):
          task_config(task, arg)
        continue
      config = task_config(task, arg)
      config_lib.validate(config)
      assert config.task == task and config.model_name == model
  full = task_config(task)
  assert full.model.mask_padding == (task in ('text', 'retrieval'))
  assert full.model.dual_encoder == (task == 'retrieval')
  assert full.schedule == ('rsqrt' if task in ('text', 'retrieval') else 'cosine')
  if task == 'retrieval':
    assert full.num_train_steps == 20000 and full.learning_rate == 5e-5
  if task in ('pathfinder', 'pathx'):
    assert full.model.head == 'mean' and full.pathfinder.difficulty == 'hard'
    assert full.pathfinder.resolution == (32 if task == 'pathfinder' else 128)
    assert task_config(task, 'luna16,quick').dataset_name != full.dataset_name


# ----------------------------------------------------------------------------------------------
# One training step of each quick config, on tiny data.
# ----------------------------------------------------------------------------------------------
STEP_OVERRIDES = dict(num_train_steps=2, warmup_steps=1, eval_every=2, checkpoint_every=2,
                      log_every=1, progress_bar=False)


# Two steps of configs/<task>.py:<model>,quick on tiny data, for the models whose code differs by
# task: the Transformer (Luna-16 at Path-X length, where only a linear model fits; Luna itself has
# its own tests), S4D and Mega (full Mega on the text tasks, Mega-chunk on the pixel tasks; Path-X
# is Pathfinder's code at 16 times the length, a minute of CPU for Mega-chunk, so Pathfinder
# stands for it there), S5 where its options differ by task (ListOps: half_glu2 and lecun_normal
# C; Image: clip_eigs; the other tasks repeat these, Path-X's complex_normal C has its own test in
# test_s5.py) and LRU, whose options are the same on every task, on ListOps and on Retrieval's
# two documents.
QUICK_RUNS = ([(t, 'luna16' if t == 'pathx' else 'transformer') for t in TASKS]
              + [(t, 's4d') for t in ('listops', *TASKS)]
              + [(t, 'mega') for t in ('listops', 'text', 'retrieval')]
              + [(t, 'mega_chunk') for t in ('image', 'pathfinder')]
              + [(t, 's5') for t in ('listops', 'image')]
              + [(t, 'lru') for t in ('listops', 'retrieval')])


@pytest.mark.parametrize('task, model', QUICK_RUNS)
def test_quick_config_trains(tmp_path, mock_tfds, task, model):
  config = task_config(task, f'{model},quick')
  config.update(data_dir=str(tmp_path / 'root'), batch_size=4, eval_batch_size=2,
                **STEP_OVERRIDES)
  if task == 'listops':
    config.update(data_source='generated', max_length=24)
    config.listops.update(num_train=8, num_val=4, num_test=4, min_length=4, max_length=20)
  if task == 'retrieval':
    write_aan(tmp_path / 'root' / 'aan')
  if task in ('pathfinder', 'pathx'):
    config.pathfinder.update(num_images=20, images_per_batch=20)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  assert results['steps'] == 2 and np.isfinite(results['test_loss'])
  assert json.loads((tmp_path / 'run' / 'results.json').read_text())['task'] == task


# ----------------------------------------------------------------------------------------------
# The Luna authors' protocol: a few steps of each task's luna16,paper on tiny data.
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('task', ('listops', 'text', 'retrieval', 'image', 'pathfinder'))
def test_paper_config_trains(tmp_path, mock_tfds, task):
  # The authors' model (widths, head, tokens, optimizer) on short inputs, two steps, one eval.
  config = task_config(task, 'luna16,paper')
  config.update(data_dir=str(tmp_path / 'root'), batch_size=2, eval_batch_size=4,
                **STEP_OVERRIDES)
  if task == 'listops':
    config.update(data_source='generated', max_length=24)
    config.listops.update(num_train=8, num_val=4, num_test=4, min_length=4, max_length=20)
  if task in ('text', 'retrieval'):
    # One of the four layers: the same layer, a quarter of the compile (the full stack's
    # parameter count: tests/test_protocols.py; a full-size run: README "Two protocols").
    config.update(max_length=24)
    config.model.num_layers = 1
  if task == 'retrieval':
    write_aan(tmp_path / 'root' / 'aan')
  if task == 'pathfinder':
    config.pathfinder.update(num_images=20, images_per_batch=20)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  assert results['protocol'] == 'paper' and results['steps'] == 2
  assert np.isfinite(results['test_loss'])
  assert results['data']['eos_id'] == {'listops': 16, 'image': 256, 'pathfinder': 256}.get(task, 257)
