"""Text (lra.md §1): byte-level IMDb sentiment from a prepared local TFDS `imdb_reviews`.

Token ids are the UTF-8 bytes + 1 (pad 0, vocab 257), cut or padded to config.max_length. The
TFDS access (and so TensorFlow) lives in tfds_source.py.
"""


import numpy as np

from lra_luna.datasets import base
from lra_luna.datasets import tfds_source

TFDS_NAME = 'imdb_reviews/plain_text'
VOCAB_SIZE = 257  # 256 byte values + 1, pad = 0
NUM_CLASSES = 2
VALIDATION_CHOICES = ('test', 'heldout')


def byte_ids(data: bytes, max_length: int) -> np.ndarray:
  """Token ids of a byte string: byte + 1 (so 0 stays the pad id), at most max_length of them."""
  return np.frombuffer(data[:max_length], np.uint8).astype(np.uint16) + 1


def encode_bytes(texts, max_length: int) -> np.ndarray:
  """Byte strings -> uint16 [N, max_length] of byte_ids, padded with 0."""
  ids = np.zeros((len(texts), max_length), np.uint16)
  for i, data in enumerate(texts):
    row = byte_ids(data, max_length)
    ids[i, :len(row)] = row
  return ids


def _read_imdb(split: str, data_dir, max_length: int) -> tuple[dict, int]:
  """({'inputs', 'targets'} of a TFDS split, number of reviews longer than max_length bytes)."""
  batches = tfds_source.read_tfds_split(TFDS_NAME, split, data_dir)
  texts = [text for batch in batches for text in batch['text']]
  labels = np.concatenate([batch['label'] for batch in batches]).astype(np.int32)
  num_truncated = sum(len(text) > max_length for text in texts)
  return {'inputs': encode_bytes(texts, max_length), 'targets': labels}, num_truncated


def load_text(config) -> base.TaskData:
  """IMDb as TaskData; arrays cached in <data root>/<dataset_name>/cache_len<L>_<validation>.npz.

  config: data_dir, dataset_name (cache folder), tfds_data_dir ('' = <data root>/tfds),
  max_length, text_validation ('test': LRA validated on the test split; 'heldout': the last
  config.text_heldout training examples, in file order, are the validation split).
  Inputs are uint16 (ids up to 256); cast a batch to int32 where a model needs it.
  """
  if config.text_validation not in VALIDATION_CHOICES:
    raise ValueError(f'config.text_validation = {config.text_validation!r} is not valid; valid '
                     f'choices: {list(VALIDATION_CHOICES)}.')
  heldout = config.text_validation == 'heldout'
  if heldout and config.text_heldout <= 0:
    raise ValueError(f'config.text_heldout must be positive, got {config.text_heldout}.')
  data_dir = tfds_source.tfds_dir(config)
  validation = f'heldout{config.text_heldout}' if heldout else 'test'
  cache_path = (base.data_root(config.data_dir) / config.dataset_name /
                f'cache_len{config.max_length}_{validation}.npz')

  def build() -> tuple[dict, dict]:
    train, train_cut = _read_imdb('train', data_dir, config.max_length)
    test, test_cut = _read_imdb('test', data_dir, config.max_length)
    # LRA's Text cuts reviews at max_length by design; counted over the TFDS splits.
    info = {'truncated': {'train': train_cut, 'test': test_cut}}
    if not heldout:
      return {'train': train, 'test': test}, info
    num_train = len(train['targets']) - config.text_heldout
    if num_train <= 0:
      raise base.DataError(f'config.text_heldout = {config.text_heldout} leaves no training '
                           f'examples (IMDb train has {len(train["targets"])}).')
    return {'train': {k: a[:num_train] for k, a in train.items()},
            'validation': {k: a[num_train:] for k, a in train.items()},
            'test': test}, info

  splits, info = base.cached_split_arrays(cache_path, build, sources=[data_dir / TFDS_NAME])
  if not heldout:
    splits['validation'] = splits['test']  # one copy, cached and in memory
  num_reviews = {'train': len(splits['train']['targets']) + (
      len(splits['validation']['targets']) if heldout else 0),
                 'test': len(splits['test']['targets'])}
  base.check_truncation(config, info['truncated'], num_reviews, 'Text (IMDb)')
  examples = base.example_counts(splits)
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=config.max_length,
                       source=tfds_source.describe(TFDS_NAME, data_dir, examples, info))
