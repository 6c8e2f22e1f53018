"""What every task reader returns, the one error type for bad data, and the on-disk array cache."""

import dataclasses
import json
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


SOURCES_KEY = '__sources__'  # The cache entry that holds the fingerprint of its source files.


def source_fingerprint(sources, exclude: pathlib.Path | None = None) -> str:
  """(path, size, mtime) of every file in `sources` (files, or folders walked recursively) but
  `exclude`, as JSON: it changes when a source file is replaced, edited, added or removed."""
  entries = []
  for source in sources:
    source = pathlib.Path(source)
    files = sorted(p for p in source.rglob('*') if p.is_file()) if source.is_dir() else [source]
    for path in files:
      if path.exists() and path != exclude:
        stat = path.stat()
        entries.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
  return json.dumps(entries)


def cached_split_arrays(cache_path: pathlib.Path, build, sources=()) -> dict:
  """Returns {split: {name: array}} from `cache_path`, building and saving it with `build()` once.

  The cache remembers the fingerprint of `sources` (the files `build` reads): when they changed
  since, the cache is rebuilt rather than silently serving the old arrays.
  """
  fingerprint = source_fingerprint(sources, exclude=cache_path)
  if cache_path.exists():
    with np.load(cache_path) as flat:
      if SOURCES_KEY in flat.files and str(flat[SOURCES_KEY]) == fingerprint:
        splits: dict = {}
        for key in flat.files:
          if key != SOURCES_KEY:
            split, name = key.split('/', 1)
            splits.setdefault(split, {})[name] = flat[key]
        return splits
    print(f'{cache_path} was built from other source files (they changed since, or it predates '
          'source fingerprints); rebuilding it.', flush=True)
  splits = build()
  save_arrays_atomically(
      cache_path, {SOURCES_KEY: np.array(fingerprint),
                   **{f'{s}/{n}': a for s, arrays in splits.items() for n, a in arrays.items()}})
  return splits
