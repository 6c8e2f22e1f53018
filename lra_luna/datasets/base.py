"""What every task reader returns, the one error type for bad data, and the on-disk array cache."""

import dataclasses
import json
import os
import pathlib
import tempfile

import numpy as np

import lra_luna
from lra_luna import console

# Where datasets live unless `--config.data_dir` or $LRA_DATA_DIR says otherwise (ignored by git).
# data/store/ of the checkout; an installed package (no checkout) keeps it in the user's cache.
DEFAULT_DATA_ROOT = (lra_luna.CHECKOUT / 'data' / 'store' if lra_luna.CHECKOUT
                     else pathlib.Path.home() / '.cache' / 'lra_luna' / 'data')
DATA_DIR_ENV = 'LRA_DATA_DIR'
# The LRA release, where its authors' README (github.com/google-research/long-range-arena) links
# it; its size as other projects report it (the authors publish neither size nor checksum).
LRA_RELEASE_URL = 'https://storage.googleapis.com/long-range-arena/lra_release.gz'
RELEASE_DOWNLOAD = (f'the release is {LRA_RELEASE_URL}, about 7.7 GB; unpack it with '
                    '`tar xzf lra_release.gz`')


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
  # Where the arrays came from, for results.json: {'source': 'release' | 'generated' | 'tfds',
  # 'path', 'examples': {split: N}, 'truncated': {split: N}, ...} (see describe_source).
  source: dict = dataclasses.field(default_factory=dict)


def data_root(configured: str | None = None) -> pathlib.Path:
  """The data root: the config's `data_dir` if set, else $LRA_DATA_DIR, else DEFAULT_DATA_ROOT.

  DataError when that path exists but is not a folder.
  """
  if configured:
    root, origin = pathlib.Path(configured).expanduser(), '--config.data_dir'
  elif os.environ.get(DATA_DIR_ENV):
    root, origin = pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser(), f'${DATA_DIR_ENV}'
  else:
    root, origin = DEFAULT_DATA_ROOT, 'the default data root'
  if root.exists() and not root.is_dir():
    raise DataError(f'The data root {root} (from {origin}) is a file, not a folder; point '
                    f'--config.data_dir (or ${DATA_DIR_ENV}) at the folder that holds the data.')
  return root


def make_folder(folder: pathlib.Path) -> None:
  """mkdir -p, with a DataError that names the folder when the data root is not writable."""
  try:
    folder.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise DataError(f'Cannot create {folder} ({e.strerror}); the readers write generated data '
                    f'and array caches under the data root: point --config.data_dir at a '
                    f'writable folder, or make this one writable.') from None
  if not os.access(folder, os.W_OK):
    raise DataError(f'Cannot write to {folder} (permission denied); the readers write generated '
                    f'data and array caches under the data root: point --config.data_dir at a '
                    f'writable folder, or make this one writable.')


def save_arrays_atomically(path: pathlib.Path, arrays: dict) -> None:
  """Writes an .npz so that a killed writer never leaves a half file behind."""
  make_folder(path.parent)
  with tempfile.NamedTemporaryFile(dir=path.parent, suffix='.npz', delete=False) as f:
    np.savez(f, **arrays)
  os.chmod(f.name, 0o644)  # NamedTemporaryFile creates 0600; a cache is for every user.
  os.replace(f.name, path)


SOURCES_KEY = '__sources__'  # The cache entry that holds the fingerprint of its source files.
INFO_KEY = '__info__'  # The cache entry that holds what `build` said of its data (JSON).


def source_files(source: pathlib.Path) -> list:
  """The files under `source` (itself if a file), following symbolic links to files and folders:
  an imported release is linked, and what a link points to is what the reader reads."""
  if not source.is_dir():
    return [source]
  return sorted(pathlib.Path(folder) / name
                for folder, _, names in os.walk(source, followlinks=True) for name in names)


def source_fingerprint(sources, exclude: pathlib.Path | None = None) -> str:
  """(path, size, mtime) of every file in `sources` (files, or folders walked recursively,
  through links) but `exclude`, as JSON: it changes when a source file is replaced, edited,
  added or removed, also behind a link."""
  entries = []
  for source in sources:
    for path in source_files(pathlib.Path(source)):
      if path.exists() and path != exclude:
        stat = path.stat()  # follows links: the file's own size and time
        entries.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
  return json.dumps(entries)


def cached_split_arrays(cache_path: pathlib.Path, build, sources=()) -> tuple[dict, dict]:
  """Returns ({split: {name: array}}, info) from `cache_path`, built and saved by `build()` once.

  build() -> (splits, info), info a JSON-able dict of what the reader saw (e.g. truncation
  counts), kept with the arrays. The cache remembers the fingerprint of `sources` (the files
  `build` reads): when they changed since, the cache is rebuilt rather than silently serving
  the old arrays.
  """
  fingerprint = source_fingerprint(sources, exclude=cache_path)
  if cache_path.exists():
    with np.load(cache_path) as flat:
      if (SOURCES_KEY in flat.files and INFO_KEY in flat.files
          and str(flat[SOURCES_KEY]) == fingerprint):
        splits: dict = {}
        for key in flat.files:
          if key not in (SOURCES_KEY, INFO_KEY):
            split, name = key.split('/', 1)
            splits.setdefault(split, {})[name] = flat[key]
        return splits, json.loads(str(flat[INFO_KEY]))
    console.say(f'{cache_path} was built from other source files (they changed since, or it '
                'predates source fingerprints); rebuilding it.')
  splits, info = build()
  save_arrays_atomically(
      cache_path, {SOURCES_KEY: np.array(fingerprint), INFO_KEY: np.array(json.dumps(info)),
                   **{f'{s}/{n}': a for s, arrays in splits.items() for n, a in arrays.items()}})
  return splits, info


def example_counts(splits: dict) -> dict:
  """{split: number of examples} of {split: {name: array}}, for TaskData.source."""
  return {split: len(arrays['targets']) for split, arrays in splits.items()}


def check_truncation(config, truncated: dict, examples: dict, what: str) -> None:
  """Reports how many examples of each split were cut to config.max_length, and raises DataError
  when a split's share is above config.max_truncated_fraction (the data is not what the config
  was made for: a longer max_length, or other data, is needed)."""
  if not any(truncated.values()):
    return
  counts = ', '.join(f'{split} {truncated[split]} of {examples[split]}' for split in truncated)
  console.say(f'{what}: cut to max_length {config.max_length}: {counts}.')
  limit = config.max_truncated_fraction
  for split, count in truncated.items():
    if count > limit * examples[split]:
      raise DataError(
          f'{what}: {count} of {examples[split]} {split} examples ({count / examples[split]:.1%})'
          f' are longer than config.max_length = {config.max_length} and would be cut, more '
          f'than config.max_truncated_fraction = {limit}. Raise --config.max_length (and the '
          f'model size it needs), use data made for this config, or allow the cut with '
          f'--config.max_truncated_fraction=1.')


# ----------------------------------------------------------------------------------------------
# The end-of-sequence token of the Luna authors' data (config.append_eos).
# ----------------------------------------------------------------------------------------------
def append_eos(ids: np.ndarray, lengths, eos_id: int, max_length: int) -> np.ndarray:
  """[N, max_length]: row i's first lengths[i] ids, then eos_id, cut to max_length, 0-padded.

  As fairseq's binarised lines (the EOS ends each line) cut to max_positions by the authors'
  task: a row of max_length or more ids keeps its first max_length and loses the EOS. The type
  widens when eos_id does not fit (uint8 pixels + EOS 256 -> uint16).
  """
  lengths = np.minimum(np.asarray(lengths), max_length)
  out = np.zeros((len(ids), max_length), np.promote_types(ids.dtype, np.min_scalar_type(eos_id)))
  width = min(ids.shape[1], max_length)
  out[:, :width] = np.where(np.arange(width) < lengths[:, None], ids[:, :width], 0)
  rows = np.flatnonzero(lengths < max_length)
  out[rows, lengths[rows]] = eos_id
  return out


def with_eos(data: TaskData, max_length: int, full_length: bool) -> TaskData:
  """`data` with the EOS token (id = data.vocab_size, so the vocabulary grows by one) appended to
  every input sequence by `append_eos`. full_length: every row is a whole example (pixel tasks,
  where 0 is a pixel); otherwise a row ends at its first pad id 0."""
  eos_id = data.vocab_size
  if full_length and max_length > data.max_length + 1:
    raise ValueError(f'config.max_length = {max_length} is longer than the {data.max_length} '
                     f'tokens of every example plus the end-of-sequence token; set '
                     f'--config.max_length={data.max_length + 1} (or less, to cut).')
  converted = {}  # id(array) -> its copy with EOS: a split shared by two names stays one copy

  def convert(ids):
    if id(ids) not in converted:
      # Readers pad at the end, so a padded row's length is its number of nonzero ids.
      lengths = np.full(len(ids), ids.shape[1]) if full_length else np.sum(ids != 0, axis=1)
      converted[id(ids)] = append_eos(ids, lengths, eos_id, max_length)
    return converted[id(ids)]

  splits = {split: {name: convert(a) if name.startswith('inputs') else a
                    for name, a in arrays.items()} for split, arrays in data.splits.items()}
  return dataclasses.replace(data, splits=splits, vocab_size=data.vocab_size + 1,
                             max_length=max_length, source={**data.source, 'eos_id': eos_id})


# ----------------------------------------------------------------------------------------------
# Release or generated: the tasks that have a generator (ListOps, Pathfinder) never write into
# a folder of the LRA release, and say where a misplaced release is.
# ----------------------------------------------------------------------------------------------
# Top-level folders of the unpacked LRA release (lra.md §1); the tar nests them in a second
# lra_release/ folder.
RELEASE_FOLDERS = ('lra_release', 'listops-1000', 'tsv_data', 'pathfinder32', 'pathfinder64',
                   'pathfinder128', 'pathfinder256')
GENERATED_MARKER = 'generated.json'  # written by our generators beside what they made


def nested_release_hint(root: pathlib.Path, relative) -> str:
  """' Found <root>/lra_release/.../<relative>: point --config.data_dir at ...' or ''."""
  for nested in ('lra_release', 'lra_release/lra_release'):
    candidate = root / nested / relative
    if candidate.exists():
      return (f' Found {candidate}: the release is nested one level deeper; point '
              f'--config.data_dir at {root / nested}, or import it with '
              f'`python data/import_lra_release.py {root}`.')
  return ''


def check_generation_target(root: pathlib.Path, folder: pathlib.Path, release_relative,
                            what: str) -> None:
  """DataError when generated data would land in or beside an LRA release: a data root that is
  the unpacked release (or its outer folder), or a folder named as a release folder.

  release_relative: where the release keeps this task's data under its root (for the hint).
  """
  top = folder.relative_to(root).parts[0]
  if top in RELEASE_FOLDERS:
    raise DataError(
        f'{what}: not generating synthetic data into {folder}: {top} is a folder name of the LRA '
        f'release, and generated data must never pass for it. Set --config.dataset_name to '
        f'another name.')
  release_like = [name for name in RELEASE_FOLDERS if (root / name).is_dir()]
  if root.name == 'lra_release' or 'lra_release' in release_like or 'tsv_data' in release_like:
    raise DataError(
        f'{what}: not generating synthetic data into {root}: it looks like the unpacked LRA '
        f'release (named lra_release, or holding {", ".join(release_like)}).'
        f'{nested_release_hint(root, release_relative)} To train on generated data instead, '
        f'point --config.data_dir at another folder.')
