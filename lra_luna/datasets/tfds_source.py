"""Reading prepared TFDS datasets (IMDb, CIFAR-10) from a local folder, never downloading.

The only module that imports TensorFlow, and only inside its functions, with TF kept off the
GPUs (they are JAX's), so every other path runs where only JAX is installed.
"""

import os
import pathlib

from lra_luna.datasets import base

READ_BATCH = 1024  # examples per tf.data batch when reading a split


def tfds_dir(config) -> pathlib.Path:
  """config.tfds_data_dir, or <data root>/tfds when it is ''."""
  if config.tfds_data_dir:
    return pathlib.Path(config.tfds_data_dir).expanduser()
  return base.data_root(config.data_dir) / 'tfds'


def prepare_command(dataset: str, data_dir) -> str:
  """The one-liner that prepares `dataset` in `data_dir` (run it where there is internet)."""
  return (f'python -c "import tensorflow_datasets as tfds; '
          f"tfds.builder('{dataset}', data_dir='{data_dir}').download_and_prepare()\"")


def import_tensorflow_datasets():
  """Imports TFDS (and TensorFlow) on first use, with TensorFlow kept off the GPUs (JAX's)."""
  # TF's C++ start-up chatter: its log below warnings, and the oneDNN note (logged before absl
  # is set up, with absl's own warning about that), which only concerns TF's math, not reading.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
  import tensorflow as tf
  import tensorflow_datasets as tfds
  try:
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:
    pass  # TF set up its devices earlier in this process; too late to change them now.
  return tf, tfds


def read_tfds_split(name: str, split: str, data_dir, decode=None):
  """A prepared TFDS split as a list of numpy batches, in file order, never downloading.

  decode: optional (example dict of tensors) -> example dict, applied before batching.
  Raises DataError with the preparation command when the dataset is not in `data_dir`.
  """
  _, tfds = import_tensorflow_datasets()
  builder = tfds.builder(name, data_dir=str(data_dir))
  try:
    dataset = builder.as_dataset(split=split, shuffle_files=False)
  except AssertionError:  # TFDS's "could not find data in <dir>"
    dataset_name = name.split('/')[0]
    raise base.DataError(
        f'TFDS dataset {name} is not prepared in {data_dir}, and this code never downloads. '
        f'On a machine with internet run\n  {prepare_command(dataset_name, data_dir)}\nthen copy '
        f'{data_dir} here (or point --config.tfds_data_dir at the copy).') from None
  if decode is not None:
    dataset = dataset.map(decode)
  return list(tfds.as_numpy(dataset.batch(READ_BATCH)))


def describe(name: str, data_dir, examples: dict, info: dict) -> dict:
  """The TaskData.source of a TFDS dataset: its name, the prepared version read, and counts."""
  versions = sorted(p.name for p in (pathlib.Path(data_dir) / name).glob('*') if p.is_dir())
  return {'source': 'tfds', 'name': name, 'path': str(pathlib.Path(data_dir).resolve()),
          'versions': versions, 'examples': examples, **info}
