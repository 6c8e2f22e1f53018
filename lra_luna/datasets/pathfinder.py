"""Pathfinder / Path-X (lra.md §1): reader for the LRA release layout (ours too) and the loader.

Inputs are the raw pixels 0..255 used as token ids (vocab 256), row-major, res * res long. There
is no padding: pixel 0 (black) is a real token. Inputs stay uint8 in memory as well as in the
cache (Path-X as int32 would take 13 GB); cast a batch to int32 where a model needs it.
"""

import logging
import pathlib

import numpy as np
from PIL import Image
from lra_luna import console
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
  hint = base.nested_release_hint(root, folder.relative_to(root))
  command = generate_command(resolution, difficulty)
  return base.DataError(
      f'No Pathfinder data at {folder}.{hint} Import the LRA release with `python '
      f'data/import_lra_release.py <unpacked lra_release folder>` ({base.RELEASE_DOWNLOAD}), '
      'point --config.data_dir at '
      f'a root holding the release\'s pathfinder{resolution}/, or train on generated data with '
      f'--config.data_source=generated (made by `{command}`).')


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
  with console.Progress(len(rows), f'Reading pathfinder{resolution} {difficulty}', 'img',
                        enabled=progress) as bar:
    for metadata_path, line_number, relative, label in rows:
      bar.update(1)
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


def _release_folder(root: pathlib.Path, resolution: int, difficulty: str) -> pathlib.Path:
  """<root>/pathfinder<res>/<difficulty folder>: the release's set, read as it is."""
  folder = generator.dataset_folder(root, resolution, difficulty)
  if not any((folder / 'metadata').glob('*.npy')):
    raise _missing_folder_error(root, folder, resolution, difficulty)
  if generator.read_record(folder) is not None:
    raise base.DataError(
        f'{folder} is where the LRA release keeps pathfinder{resolution}, but our generator '
        f'made it ({generator.RECORD_FILE}); generated data must not pass for the release. Move '
        f'{root / f"pathfinder{resolution}"} to {root / "pathfinder-generated"}/ (the folder of '
        f'generated sets, config.dataset_name) or delete it.')
  return folder


def _generated_folder(root: pathlib.Path, config) -> tuple[pathlib.Path, bool]:
  """(<root>/<dataset_name>/pathfinder<res>/<difficulty folder>: our generator's set for
  config.pathfinder, generated (or finished) here when generate_if_missing allows it; whether it
  was generated now)."""
  settings = config.pathfinder
  resolution, difficulty = int(settings.resolution), settings.difficulty
  if not config.dataset_name:
    raise base.DataError('config.dataset_name is empty; it names the folder of generated '
                         'Pathfinder sets under the data root (e.g. pathfinder-generated).')
  set_root = root / config.dataset_name
  folder = generator.dataset_folder(set_root, resolution, difficulty)
  base.check_generation_target(root, folder, folder.relative_to(set_root), 'Pathfinder')
  wanted = {'num_images': int(settings.get('num_images', 200000)),
            'images_per_batch': int(settings.get('images_per_batch', 1000)),
            'seed': int(settings.get('seed', 0))}
  command = (f'{generate_command(resolution, difficulty)} --num_images {wanted["num_images"]} '
             f'--images_per_batch {wanted["images_per_batch"]} --seed {wanted["seed"]} '
             f'--out_root {set_root}')
  record = generator.read_record(folder)
  if record is None and any((folder / 'metadata').glob('*.npy')):
    raise base.DataError(f'{folder} holds Pathfinder data that our generator did not write (no '
                         f'{generator.RECORD_FILE}), so it cannot be reported as generated data. '
                         f'Delete it to generate it anew, or use release data with '
                         f'--config.data_source=release.')
  if record is not None:
    recorded = {key: record[key] for key in wanted}
    if recorded != wanted:
      raise base.DataError(
          f'{folder} was generated with {recorded}, but the config asks for {wanted} '
          f'(config.pathfinder). Set --config.dataset_name to another folder for these '
          f'settings, or delete {folder} to regenerate it.')
    if not generator.missing_batches(folder, record):
      return folder, False
  if not bool(settings.get('generate_if_missing', False)):
    state = 'an unfinished generation' if record is not None else 'no data'
    raise base.DataError(f'{folder} holds {state}. Generate it with `{command}`, or point '
                         f'--config.data_dir at a root holding the LRA release\'s '
                         f'pathfinder{resolution}/ and use --config.data_source=release.')
  console.say(f'Pathfinder: {"resuming the generation" if record else "generating"} in '
              f'{folder} (docs/data.md) with {wanted}.')
  base.make_folder(set_root)
  generator.generate_pathfinder(set_root, resolution=resolution, difficulty=difficulty,
                                progress=True, **wanted)
  return folder, True


def load_pathfinder(config) -> base.TaskData:
  """Pathfinder as TaskData (inputs uint8 pixel ids, see the module docstring), split 80/10/10.

  config: data_dir ('' for the default root), data_source ('release':
  <root>/pathfinder<res>/<difficulty folder>, the release layout the import script makes;
  'generated': <root>/<dataset_name>/pathfinder<res>/<difficulty folder>, made by our generator
  (generation.json) when pathfinder.generate_if_missing; 'auto': the release if there, else
  generated), dataset_name and pathfinder.{resolution, difficulty ('easy' | 'intermediate' |
  'hard'), skip_bad_images, generate_if_missing, num_images, images_per_batch, seed} (generation
  settings; config.seed, the training seed, plays no part).
  Arrays are cached in <folder>/cache.npz, rebuilt when any file of that folder changes.
  """
  settings = config.pathfinder
  resolution, difficulty = int(settings.resolution), settings.difficulty
  generator.check_setting(resolution, difficulty)
  root = base.data_root(config.data_dir)
  source = config.data_source
  if source == 'auto':
    release = generator.dataset_folder(root, resolution, difficulty)
    has_release = (any((release / 'metadata').glob('*.npy'))
                   and generator.read_record(release) is None)
    source = 'release' if has_release else 'generated'
  if source == 'release':
    folder = _release_folder(root, resolution, difficulty)
    description = {'source': 'release', 'path': str(folder.resolve())}
    made_now = False
  else:
    folder, made_now = _generated_folder(root, config)
    record = generator.read_record(folder)
    # The shape ListOps records too: who generated it, and with which settings.
    description = {'source': 'generated', 'path': str(folder.resolve()),
                   'generator': {'generator': generator.__name__,
                                 'settings': {k: v for k, v in record.items() if k != 'generator'}}}

  def build() -> tuple[dict, dict]:
    arrays = read_pathfinder(folder.parents[1], resolution, difficulty,
                             skip_bad_images=bool(settings.get('skip_bad_images', False)),
                             progress=True)
    return split_in_file_order(*arrays), {'skipped_images': len(arrays.skipped)}

  splits, info = base.cached_split_arrays(folder / 'cache.npz', build, sources=[folder])
  examples = base.example_counts(splits)
  # Say whether this run made the data or only read it (made earlier, or the release).
  console.say(f'Pathfinder: data generated now in {folder}.' if made_now else
              f'Pathfinder: read {"previously generated" if source == "generated" else "release"} '
              f'data from {folder}.')
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=resolution * resolution,
                       source={**description, 'examples': examples, **info})
