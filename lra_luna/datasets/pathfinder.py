"""Pathfinder / Path-X (lra.md §1): reader for the LRA release layout (ours too) and the loader.

Inputs are the raw pixels 0..255 used as token ids (vocab 256), row-major, res * res long. There
is no padding: pixel 0 (black) is a real token. Inputs stay uint8 in memory as well as in the
cache (Path-X as int32 would take 13 GB); cast a batch to int32 where a model needs it.
"""

import logging
import pathlib

import numpy as np
from PIL import Image
import tqdm

from lra_luna.datasets import base
from lra_luna.datasets import pathfinder_generator as generator

DIFFICULTY_FOLDERS = generator.DIFFICULTY_FOLDERS
VOCAB_SIZE = 256
NUM_CLASSES = 2
NUM_METADATA_FIELDS = 11
LABEL_FIELD = 3  # the 4th field

_log = logging.getLogger(__name__)


class PathfinderArrays(tuple):
  """(inputs, targets), unpacking like a plain pair; `.skipped` lists (image, reason) left out."""

  skipped: list

  def __new__(cls, inputs: np.ndarray, targets: np.ndarray, skipped: list):
    arrays = super().__new__(cls, (inputs, targets))
    arrays.skipped = skipped
    return arrays


def generate_command(resolution: int, difficulty: str) -> str:
  return f'python data/generate_pathfinder.py --resolution {resolution} --difficulty {difficulty}'


def _missing_folder_error(root: pathlib.Path, folder: pathlib.Path, resolution: int,
                          difficulty: str) -> base.DataError:
  """A DataError that says how to get the data, and where a release copy may be hiding."""
  hint = ''
  # The release tar nests lra_release/ inside lra_release/ (lra.md §1).
  for nested in ('lra_release', 'lra_release/lra_release'):
    candidate = root / nested / f'pathfinder{resolution}'
    if candidate.is_dir():
      hint = f' Found {candidate}: point --config.data_dir at {candidate.parent}.'
      break
  command = generate_command(resolution, difficulty)
  return base.DataError(
      f'No Pathfinder data at {folder}.{hint} Generate it with `{command}` (add --out_root '
      f'{root} if that is not the default data root), or point --config.data_dir at the folder '
      f'that holds pathfinder{resolution}/ from the LRA release.')


def _metadata_files(folder: pathlib.Path) -> list:
  """metadata/<batch>.npy files in numeric batch order."""
  files = []
  for path in (folder / 'metadata').glob('*.npy'):
    try:
      files.append((int(path.stem), path))
    except ValueError:
      raise base.DataError(f'{path}: metadata files are named <batch number>.npy; '
                           f'{path.name!r} is not.') from None
  return [path for _, path in sorted(files)]


def _read_metadata(path: pathlib.Path) -> list:
  """[(line number, image path relative to the difficulty folder, label)] of one file."""
  rows = []
  try:
    text = path.read_text(encoding='utf-8')
  except (OSError, UnicodeDecodeError) as e:
    raise base.DataError(f'{path}: cannot read this metadata file as text ({e}).') from None
  for line_number, line in enumerate(text.splitlines(), 1):
    fields = line.split()
    if not fields:
      continue
    if len(fields) != NUM_METADATA_FIELDS:
      raise base.DataError(
          f'{path}, line {line_number}: expected {NUM_METADATA_FIELDS} space-separated fields '
          f'(imgs/<batch> sample_<i>.png <index> <label> ...), got {len(fields)}: {line!r}')
    try:
      label = int(fields[LABEL_FIELD])
    except ValueError:
      raise base.DataError(f'{path}, line {line_number}: label (4th field) '
                           f'{fields[LABEL_FIELD]!r} is not an integer.') from None
    if label not in (0, 1):
      raise base.DataError(f'{path}, line {line_number}: label (4th field) must be 0 or 1, '
                           f'got {label}.')
    rows.append((line_number, pathlib.PurePosixPath(fields[0]) / fields[1], label))
  return rows


class _Unusable(Exception):
  """An image that is missing, empty or undecodable: skippable on request."""


def _decode(image_path: pathlib.Path, resolution: int) -> np.ndarray:
  """Pixels [res * res] uint8; raises DataError (bad size / depth) or _Unusable (skippable)."""
  if not image_path.exists():
    raise _Unusable('missing')
  if image_path.stat().st_size == 0:
    raise _Unusable('empty (0 bytes)')
  try:
    with Image.open(image_path) as image:
      image.load()
      if image.mode not in ('L', '1', 'P', 'LA', 'RGB', 'RGBA'):
        raise base.DataError(f'{image_path}: expected an 8-bit grayscale PNG, got mode '
                             f'{image.mode!r}.')
      pixels = np.asarray(image if image.mode == 'L' else image.convert('L'), np.uint8)
  except base.DataError:
    raise
  except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
    raise _Unusable(f'unreadable ({e})') from None
  if pixels.shape != (resolution, resolution):
    raise base.DataError(f'{image_path}: image is {pixels.shape[1]}x{pixels.shape[0]}, expected '
                         f'{resolution}x{resolution} (pathfinder{resolution}).')
  return pixels.reshape(-1)


def read_image(image_path, resolution: int) -> np.ndarray:
  """Pixels [res * res] uint8 of one image file, as the reader takes them; DataError when it is
  missing, empty, unreadable or not res x res."""
  try:
    return _decode(pathlib.Path(image_path), resolution)
  except _Unusable as e:
    raise base.DataError(f'{image_path}: image is {e}.') from None


def read_pathfinder(root, resolution: int, difficulty: str, *, skip_bad_images: bool = False,
                    progress: bool = False) -> PathfinderArrays:
  """All images of <root>/pathfinder<res>/<difficulty folder>, in metadata order.

  Returns (inputs uint8 [N, res*res], targets int32 [N]), with `.skipped`. Metadata files are
  read in numeric batch order, lines in file order; the label is the 4th field. Missing, empty or
  undecodable images raise DataError, or with skip_bad_images are left out and reported.
  """
  generator.check_setting(resolution, difficulty)
  root = pathlib.Path(root)
  folder = generator.dataset_folder(root, resolution, difficulty)
  if not folder.is_dir():
    raise _missing_folder_error(root, folder, resolution, difficulty)
  files = _metadata_files(folder)
  if not files:
    raise base.DataError(f'{folder / "metadata"}: no metadata files (<batch>.npy). An incomplete '
                         f'copy or generation? Regenerate with '
                         f'`{generate_command(resolution, difficulty)}` or re-extract the release.')
  rows = [(path, *row) for path in files for row in _read_metadata(path)]
  inputs = np.empty((len(rows), resolution * resolution), np.uint8)
  targets = np.empty(len(rows), np.int32)
  skipped = []
  count = 0
  for metadata_path, line_number, relative, label in tqdm.tqdm(
      rows, desc=f'Reading pathfinder{resolution} {difficulty}', unit='img', disable=not progress):
    image_path = folder / relative
    try:
      inputs[count] = _decode(image_path, resolution)
    except _Unusable as e:
      if not skip_bad_images:
        raise base.DataError(f'{image_path} ({metadata_path}, line {line_number}): image is '
                             f'{e}. Pass skip_bad_images (config.pathfinder.skip_bad_images) to '
                             f'leave such images out.') from None
      skipped.append((str(image_path), str(e)))
      continue
    targets[count] = label
    count += 1
  if skipped:
    _log.warning('Pathfinder: skipped %d bad image(s) of %d in %s: %s', len(skipped), len(rows),
                 folder, '; '.join(f'{path} ({why})' for path, why in skipped[:5]))
  return PathfinderArrays(inputs[:count], targets[:count], skipped)


def split_in_file_order(inputs: np.ndarray, targets: np.ndarray) -> dict:
  """First 80% train, next 10% validation, the rest (about 10%) test."""
  n = len(targets)
  train_end = n * 8 // 10
  validation_end = train_end + n // 10
  bounds = {'train': (0, train_end), 'validation': (train_end, validation_end),
            'test': (validation_end, n)}
  return {split: {'inputs': inputs[a:b], 'targets': targets[a:b]}
          for split, (a, b) in bounds.items()}


def _ensure_data(root: pathlib.Path, settings) -> None:
  """Generates or finishes our generated set when allowed; else says how to."""
  resolution, difficulty = int(settings.resolution), settings.difficulty
  folder = generator.dataset_folder(root, resolution, difficulty)
  allowed = bool(settings.get('generate_if_missing', False))
  record = generator.read_record(folder)
  if record is not None:  # our generator wrote here: resume a killed run with its settings
    todo = generator.missing_batches(folder, record)
    if not todo:
      return
    if not allowed:
      raise base.DataError(
          f'{folder} holds an unfinished generation ({len(todo)} batches missing). Resume it '
          f'with `{generate_command(resolution, difficulty)} --num_images '
          f'{record["num_images"]} --images_per_batch {record["images_per_batch"]} --seed '
          f'{record["seed"]} --out_root {root}`.')
    print(f'Pathfinder: resuming the generation in {folder}.', flush=True)
    generator.generate_pathfinder(
        root, resolution=resolution, difficulty=difficulty, num_images=record['num_images'],
        images_per_batch=record['images_per_batch'], seed=record['seed'], progress=True)
    return
  if any((folder / 'metadata').glob('*.npy')):
    return  # someone else's set, e.g. the LRA release: read as is
  if not allowed:
    raise _missing_folder_error(root, folder, resolution, difficulty)
  print(f'Pathfinder: no data in {folder}; generating it (lra.md §2).', flush=True)
  generator.generate_pathfinder(
      root, resolution=resolution, difficulty=difficulty,
      num_images=int(settings.get('num_images', 200000)),
      images_per_batch=int(settings.get('images_per_batch', 1000)),
      seed=int(settings.get('seed', 0)), progress=True)


def load_pathfinder(config) -> base.TaskData:
  """Pathfinder as TaskData (inputs uint8 pixel ids, see the module docstring), split 80/10/10.

  config: data_dir ('' for the default root), dataset_name ('' for the full set) and
  pathfinder.{resolution, difficulty
  ('easy' | 'intermediate' | 'hard'), skip_bad_images, generate_if_missing, num_images, seed}
  (num_images and seed are generation settings; config.seed, the training seed, plays no part).
  Arrays are cached in <root>/pathfinder<res>/<difficulty folder>/cache.npz, rebuilt when any
  file of that folder changes.
  """
  settings = config.pathfinder
  resolution, difficulty = int(settings.resolution), settings.difficulty
  generator.check_setting(resolution, difficulty)
  # An optional dataset_name keeps a separate set (the quick configs' small one) under its own
  # folder of the data root: <root>/<dataset_name>/pathfinder<res>/<difficulty folder>.
  root = base.data_root(config.data_dir) / config.get('dataset_name', '')
  folder = generator.dataset_folder(root, resolution, difficulty)
  cache_path = folder / 'cache.npz'
  if not cache_path.exists():
    _ensure_data(root, settings)

  def build() -> dict:
    inputs, targets = read_pathfinder(
        root, resolution, difficulty,
        skip_bad_images=bool(settings.get('skip_bad_images', False)), progress=True)
    return split_in_file_order(inputs, targets)

  splits = base.cached_split_arrays(cache_path, build, sources=[folder])
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=resolution * resolution)
