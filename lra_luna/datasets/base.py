"""What every task reader returns, the one error type for bad data, and the on-disk array cache."""

import dataclasses
import os
import pathlib
import tempfile

import numpy as np

# Where datasets live unless `--config.data_dir` or $LRA_DATA_DIR says otherwise (ignored by git).
DEFAULT_DATA_ROOT = pathlib.Path(__file__).resolve().parents[2] / 'data' / 'store'
DATA_DIR_ENV = 'LRA_DATA_DIR'


class DataError(ValueError):
  """Bad or missing input data. The message names the file (and line or image) and what to do."""


@dataclasses.dataclass
class TaskData:
  """Token-id arrays of one task, ready for batching.

  splits: 'train' / 'validation' / 'test' -> {'inputs': [N, L], 'targets': int32 [N]}
    (Retrieval: 'inputs1' and 'inputs2' instead of 'inputs'). Inputs use the smallest integer
    type that holds the vocabulary (uint8 pixels, uint16 bytes + 1, int32 ListOps) to keep Path-X
    and AAN in memory; the model casts to int32. Pad id is 0 where a task pads.
  """
  splits: dict
  vocab_size: int
  num_classes: int
  max_length: int


def data_root(configured: str | None = None) -> pathlib.Path:
  """The data root: the config's `data_dir` if set, else $LRA_DATA_DIR, else DEFAULT_DATA_ROOT."""
  if configured:
    return pathlib.Path(configured).expanduser()
  if os.environ.get(DATA_DIR_ENV):
    return pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser()
  return DEFAULT_DATA_ROOT


def save_arrays_atomically(path: pathlib.Path, arrays: dict) -> None:
  """Writes an .npz so that a killed writer never leaves a half file behind."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.NamedTemporaryFile(dir=path.parent, suffix='.npz', delete=False) as f:
    np.savez(f, **arrays)
  os.chmod(f.name, 0o644)  # NamedTemporaryFile creates 0600; a cache is for every user.
  os.replace(f.name, path)


def cached_split_arrays(cache_path: pathlib.Path, build) -> dict:
  """Returns {split: {name: array}} from `cache_path`, building and saving it with `build()` once."""
  if cache_path.exists():
    with np.load(cache_path) as flat:
      splits: dict = {}
      for key in flat.files:
        split, name = key.split('/', 1)
        splits.setdefault(split, {})[name] = flat[key]
      return splits
  splits = build()
  save_arrays_atomically(
      cache_path, {f'{s}/{n}': a for s, arrays in splits.items() for n, a in arrays.items()})
  return splits
