"""Image (lra.md §1): grayscale CIFAR-10 from a prepared local TFDS `cifar10`, 1024 pixel tokens.

Each image goes through `grayscale`, the arithmetic of `tf.image.rgb_to_grayscale` that LRA used
(Y = 0.2989 R + 0.5870 G + 0.1140 B on [0, 1], back to uint8 by TF's convert_image_dtype, i.e.
floor(Y * 255.5)) in numpy, so that prediction on an image file needs no TensorFlow; then it is
flattened row-major. Pixel values 0..255 are the token ids (vocab 256). There is no padding: pixel
0 is black, not a pad, so the configs set model.mask_padding = False (LRA masked black pixels).
"""

import numpy as np

from lra_luna.datasets import base
from lra_luna.datasets import tfds_source

TFDS_NAME = 'cifar10'
VOCAB_SIZE = 256
NUM_CLASSES = 10
NUM_PIXELS = 32 * 32
TRAIN_PERCENT = 90  # train[:90%] / train[90%:], as LRA


GRAY_WEIGHTS = tuple(np.float32(w) for w in (0.2989, 0.5870, 0.1140))  # TF's (ITU-R BT.601)


def grayscale(rgb: np.ndarray) -> np.ndarray:
  """uint8 [..., 3] RGB -> uint8 [...] gray, step by step in float32 as
  tf.image.rgb_to_grayscale computes it (equal to it for all 2^24 colours: tests/test_predict.py)."""
  x = rgb.astype(np.float32) * np.float32(1 / 255)
  r, g, b = GRAY_WEIGHTS
  y = x[..., 0] * r + x[..., 1] * g + x[..., 2] * b
  return (y * np.float32(255.5)).astype(np.uint8)  # convert_image_dtype: scale, truncate.


def _read_cifar10(split: str, data_dir) -> dict:
  tf, _ = tfds_source.import_tensorflow_datasets()

  def pixels(example):
    return {'inputs': tf.reshape(example['image'], [NUM_PIXELS, 3]),
            'targets': tf.cast(example['label'], tf.int32)}

  batches = tfds_source.read_tfds_split(TFDS_NAME, split, data_dir, decode=pixels)
  return {'inputs': np.concatenate([grayscale(batch['inputs']) for batch in batches]),
          'targets': np.concatenate([batch['targets'] for batch in batches])}


def load_image(config) -> base.TaskData:
  """CIFAR-10 as TaskData: 45k / 5k / 10k, inputs uint8 [N, 1024], targets int32 [N].

  Validation is the last 10% of the TFDS train split in file order (= TFDS 'train[90%:]').
  config: data_dir, dataset_name (cache folder), tfds_data_dir ('' = <data root>/tfds).
  Arrays are cached in <data root>/<dataset_name>/cache_gray.npz.
  """
  data_dir = tfds_source.tfds_dir(config)
  if config.get('append_eos', False):
    # The EOS follows the pixels (datasets.load_task); a shorter max_length cuts the sequence
    # as the Luna authors' 1024 positions did (protocols.py).
    if not 0 < config.max_length <= NUM_PIXELS + 1:
      raise ValueError(f'config.max_length must be at most {NUM_PIXELS + 1} (32 x 32 pixels and '
                       f'the end-of-sequence token) for the image task with append_eos, got '
                       f'{config.max_length}.')
  elif config.max_length != NUM_PIXELS:
    raise ValueError(f'config.max_length must be {NUM_PIXELS} (32 x 32 pixels) for the image '
                     f'task, got {config.max_length}.')

  def build() -> tuple[dict, dict]:
    train = _read_cifar10('train', data_dir)
    # TFDS's rule for 'train[:90%]' (rounding to the closest example).
    num_train = round(TRAIN_PERCENT * len(train['targets']) / 100)
    return {'train': {k: a[:num_train] for k, a in train.items()},
            'validation': {k: a[num_train:] for k, a in train.items()},
            'test': _read_cifar10('test', data_dir)}, {}

  cache_path = base.data_root(config.data_dir) / config.dataset_name / 'cache_gray.npz'
  splits, info = base.cached_split_arrays(cache_path, build, sources=[data_dir / TFDS_NAME])
  examples = base.example_counts(splits)
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=NUM_PIXELS,
                       source=tfds_source.describe(TFDS_NAME, data_dir, examples, info))
