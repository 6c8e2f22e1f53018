"""ListOps (lra.md §1-2): a seeded generator, a reader for the LRA release TSVs, and the task loader.

An expression such as MAX(2, 9) is printed as in the LRA release, `( ( ( [MAX 2 ) 9 ) ] )`. The
reader drops the parentheses, as LRA did, but keeps `]`, whose position carries the tree structure.
"""

import json
import os
import pathlib

import numpy as np

from lra_luna import console
from lra_luna.datasets import base

PAD = '<pad>'
OPERATORS = ('[MIN', '[MAX', '[MED', '[SM')
CLOSE = ']'
DIGITS = tuple(str(d) for d in range(10))
# Fixed order, so token ids never change between runs (LRA's came from a Python set).
VOCAB = (PAD, *OPERATORS, CLOSE, *DIGITS)
TOKEN_IDS = {token: i for i, token in enumerate(VOCAB)}
VOCAB_SIZE = len(VOCAB)
PARENTHESES = frozenset(('(', ')'))
NUM_CLASSES = 10

HEADER = 'Source\tTarget'
SPLIT_FILES = {'train': 'basic_train.tsv', 'validation': 'basic_val.tsv', 'test': 'basic_test.tsv'}
RELEASE_FOLDER = 'listops-1000'  # the release's folder name, and where the import script links it
GENERATE_HINT = ('run `python data/generate_listops.py` or point --config.data_dir at the LRA '
                 'release (the folder holding listops-1000/)')
RELEASE_HINT = ('import the LRA release with `python data/import_lra_release.py <unpacked '
                'lra_release folder>` (it links listops-1000/ into the data root; '
                + base.RELEASE_DOWNLOAD + '), point '
                '--config.data_dir at a root holding listops-1000/, or train on generated data '
                'with --config.data_source=generated')

OPERATOR_PROBABILITY = 0.25  # below the maximum depth, a node is an operator this often
MIN_ARGS = 2


def _median_int(values: list) -> int:
  """Integer part of the median; the mean of the two middle values for even counts."""
  ordered = sorted(values)
  middle = len(ordered) // 2
  if len(ordered) % 2:
    return ordered[middle]
  return (ordered[middle - 1] + ordered[middle]) // 2  # values are >= 0, so // is int()


def apply_operator(operator: str, values: list) -> int:
  """The value of a ListOps operator token ('[MAX', ...) over its arguments' values."""
  if operator == '[MIN':
    return min(values)
  if operator == '[MAX':
    return max(values)
  if operator == '[MED':
    return _median_int(values)
  if operator == '[SM':
    return sum(values) % 10
  raise ValueError(f'unknown operator {operator!r}')


def evaluate_expression(text: str) -> int:
  """Value of a printed expression: a stack machine over its tokens, parentheses ignored.

  Independent of the generator, so tests can check the generated labels with it.
  """
  frames = []  # one [operator, argument values] per open operator
  result = None
  for token in text.split():
    if token in PARENTHESES:
      continue
    if result is not None:
      raise ValueError(f'tokens after the end of the expression: {token!r}')
    if token in OPERATORS:
      frames.append((token, []))
    elif token == CLOSE:
      if not frames:
        raise ValueError('`]` without an open operator')
      operator, values = frames.pop()
      if not values:
        raise ValueError(f'{operator} has no arguments')
      value = apply_operator(operator, values)
      if frames:
        frames[-1][1].append(value)
      else:
        result = value
    elif token in DIGITS:
      if frames:
        frames[-1][1].append(int(token))
      else:
        result = int(token)
    else:
      raise ValueError(f'unknown token {token!r}')
  if frames or result is None:
    raise ValueError('incomplete expression')
  return result


class _TooLong(Exception):
  """Raised inside the sampler once a tree reaches max_length tokens: it would be rejected anyway."""


def _tree_sampler(rng: np.random.Generator, max_depth: int, max_args: int, max_length: int):
  """Returns sample() -> (expression, value, length), or None for a tree of max_length+ tokens.

  Builds the printed string, the value and the length in one pass. Random numbers come from
  large numpy batches (per-call overhead dominates otherwise), consumed in a fixed order, so a
  seed always gives the same trees.
  """
  def uniforms():
    while True:
      yield from rng.random(1 << 16).tolist()

  next_uniform = uniforms().__next__
  num_arities = max_args - MIN_ARGS + 1
  pieces = []  # printed pieces of the current tree, each with a leading space
  length = 0

  def node(depth: int) -> int:
    nonlocal length
    length += 1
    if length >= max_length:
      raise _TooLong
    if depth < max_depth and next_uniform() < OPERATOR_PROBABILITY:
      num_children = MIN_ARGS + int(next_uniform() * num_arities)
      operator = OPERATORS[int(next_uniform() * len(OPERATORS))]
      # LRA nests to the left: ( ( ( [OP c1 ) c2 ) ] ), one '(' per child plus one for ']'.
      pieces.append(' (' * (num_children + 1) + ' ' + operator)
      values = []
      for _ in range(num_children):
        values.append(node(depth + 1))
        pieces.append(' )')
      length += 1
      pieces.append(' ] )')
      return apply_operator(operator, values)
    digit = int(next_uniform() * 10)
    pieces.append(' ' + DIGITS[digit])
    return digit

  def sample():
    nonlocal length
    pieces.clear()
    length = 0
    try:
      value = node(1)
    except _TooLong:
      return None
    if length >= max_length:  # the final `]` can still reach the bound
      return None
    return ''.join(pieces)[1:], value, length

  return sample


def _write_tsv_atomically(path: pathlib.Path, rows: list) -> None:
  """Writes header + rows to a temp file, then renames it, so no half-written split survives."""
  # A plain open() (not tempfile) so the file gets the usual umask permissions, not 0600.
  temp_path = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
  try:
    with open(temp_path, 'w', encoding='utf-8', newline='\n') as f:
      f.write(HEADER + '\n')
      for expression, value in rows:
        f.write(f'{expression}\t{value}\n')
    os.replace(temp_path, path)
  finally:
    temp_path.unlink(missing_ok=True)


def generate_listops(out_dir, *, num_train: int = 96000, num_val: int = 2000,
                     num_test: int = 2000, min_length: int = 500, max_length: int = 2000,
                     max_depth: int = 10, max_args: int = 10, seed: int = 0,
                     progress: bool = True) -> dict:
  """Generates basic_{train,val,test}.tsv in `out_dir` (lra.md §2); returns {split: path}.

  Keeps trees with min_length < length < max_length, unique across all splits; the first
  num_train accepted go to train, then validation, then test.
  """
  if max_args < MIN_ARGS:
    raise ValueError(f'max_args must be >= {MIN_ARGS}, got {max_args}')
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  sample = _tree_sampler(np.random.default_rng(seed), max_depth, max_args, max_length)
  total = num_train + num_val + num_test
  seen = set()
  rows = []
  with console.Progress(total, 'ListOps examples', 'ex', enabled=progress) as bar:
    while len(rows) < total:
      tree = sample()
      if tree is None:
        continue
      expression, value, length = tree
      if length <= min_length or expression in seen:
        continue
      seen.add(expression)
      rows.append((expression, value))
      bar.update(1)
  bounds = {'train': (0, num_train), 'validation': (num_train, num_train + num_val),
            'test': (num_train + num_val, total)}
  paths = {}
  for split, (start, stop) in bounds.items():
    paths[split] = out_dir / SPLIT_FILES[split]
    _write_tsv_atomically(paths[split], rows[start:stop])
  # Last, so that only a finished set is marked; the marker tells generated data from a release.
  settings = dict(num_train=num_train, num_val=num_val, num_test=num_test, min_length=min_length,
                  max_length=max_length, max_depth=max_depth, max_args=max_args, seed=seed)
  (out_dir / base.GENERATED_MARKER).write_text(
      json.dumps({'generator': 'lra_luna.datasets.listops', 'settings': settings}, indent=1),
      encoding='utf-8')
  return paths


def token_ids(expression: str) -> list[int]:
  """Token ids of a printed expression: parentheses dropped, the rest mapped through VOCAB.
  KeyError (the token) for a token outside VOCAB."""
  return [TOKEN_IDS[t] for t in expression.split() if t not in PARENTHESES]


def generation_record(folder) -> dict | None:
  """What our generator recorded in `folder` ({'generator', 'settings'}), or None."""
  path = pathlib.Path(folder) / base.GENERATED_MARKER
  if not path.is_file():
    return None
  try:
    return json.loads(path.read_text(encoding='utf-8'))
  except (OSError, ValueError) as e:
    raise base.DataError(f'{path}: unreadable generation record ({e}); delete the folder '
                         f'{folder} to generate it anew.') from None


def _text_lines(path: pathlib.Path):
  """(line number, line) of a UTF-8 text file; DataError naming the line that is not UTF-8."""
  with open(path, 'rb') as f:  # decoded line by line, so that an error names its line
    for line_number, raw in enumerate(f, start=1):
      try:
        yield line_number, raw.decode('utf-8')
      except UnicodeDecodeError as e:
        raise base.DataError(f'{path}, line {line_number}: not UTF-8 text ({e.reason} at byte '
                             f'{e.start} of the line); ListOps files are UTF-8 TSVs as in the '
                             f'LRA release: re-export or regenerate this file.') from None


def read_listops_tsv(path, max_length: int) -> tuple:
  """Reads one LRA ListOps TSV into (inputs int32 [N, max_length], targets int32 [N], number of
  examples longer than max_length).

  Parentheses are dropped, other tokens mapped through VOCAB, then truncated and padded with 0.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise base.DataError(f'ListOps file {path} not found; {GENERATE_HINT}.')
  # Two passes over the file (count, then parse) keep memory at the output arrays: the full
  # train split is 600+ MB of text.
  num_lines, has_header = 0, False
  for line_number, line in _text_lines(path):
    num_lines = line_number
    has_header = has_header or (line_number == 1 and line.rstrip('\r\n') == HEADER)
  num_rows = num_lines - has_header
  if num_rows == 0:
    raise base.DataError(f'{path}: no examples (an empty file?); {GENERATE_HINT}.')
  inputs = np.zeros((num_rows, max_length), np.int32)
  targets = np.zeros(num_rows, np.int32)
  num_truncated = 0
  rows = _text_lines(path)
  if has_header:
    next(rows)
  for i, (line_number, line) in enumerate(rows):
    columns = line.rstrip('\r\n').split('\t')
    if len(columns) != 2:
      raise base.DataError(f'{path}, line {line_number}: expected 2 tab-separated columns '
                           f'(expression, label), found {len(columns)}.')
    expression, label = columns
    label = label.strip()
    if not (label.isascii() and label.isdigit() and int(label) < NUM_CLASSES):
      raise base.DataError(f'{path}, line {line_number}: label {label!r} is not an integer '
                           f'in 0..{NUM_CLASSES - 1}.')
    try:
      ids = token_ids(expression)
    except KeyError as e:
      raise base.DataError(f'{path}, line {line_number}: unknown token {e.args[0]!r} '
                           f'(known: {" ".join(VOCAB[1:])} and parentheses).') from None
    num_truncated += len(ids) > max_length
    ids = ids[:max_length]
    inputs[i, :len(ids)] = ids
    targets[i] = int(label)
  return inputs, targets, num_truncated


def generator_settings(config) -> dict:
  """The generator settings of config.listops, as generate_listops records them."""
  keys = ('num_train', 'num_val', 'num_test', 'min_length', 'max_length', 'max_depth',
          'max_args', 'seed')
  return {key: int(config.listops[key]) for key in keys}


def _generated_folder(config, root: pathlib.Path) -> tuple[pathlib.Path, bool]:
  """(<root>/<dataset_name>, holding our generator's set for config.listops, whether it was made
  now because it was missing)."""
  if not config.dataset_name:
    raise base.DataError('config.dataset_name is empty; it names the folder of the generated '
                         'ListOps set under the data root (e.g. listops-generated).')
  folder = root / config.dataset_name
  base.check_generation_target(root, folder, RELEASE_FOLDER, 'ListOps')
  settings = generator_settings(config)
  present = [name for name in SPLIT_FILES.values() if (folder / name).exists()]
  if not present:
    console.say(f'ListOps: no data in {folder}; generating it (docs/data.md) with {settings}.')
    base.make_folder(folder)
    generate_listops(folder, progress=True, **settings)
    return folder, True
  if len(present) < len(SPLIT_FILES):
    # Never regenerate over a user's files: half a set is their mistake to look at.
    missing = sorted(set(SPLIT_FILES.values()) - set(present))
    raise base.DataError(f'ListOps folder {folder} lacks {", ".join(missing)} but has the other '
                         f'split files; restore them, or empty the folder to regenerate '
                         f'(or {GENERATE_HINT}).')
  record = generation_record(folder)
  if record is None:
    raise base.DataError(
        f'{folder} holds ListOps files that our generator did not mark as its own (no '
        f'{base.GENERATED_MARKER}), so they cannot be reported as generated data. Delete the '
        f'folder to generate it anew, or put release files in <data root>/{RELEASE_FOLDER} and '
        f'use --config.data_source=release.')
  if record.get('settings') != settings:
    raise base.DataError(
        f'{folder} was generated with {record.get("settings")}, but the config asks for '
        f'{settings} (config.listops). Set --config.dataset_name to another folder for these '
        f'settings, or delete {folder} to regenerate it.')
  return folder, False


def load_listops(config) -> base.TaskData:
  """ListOps as TaskData, from the LRA release or our generator, arrays cached per max_length.

  config: data_dir ('' for the default root), data_source ('release': <root>/listops-1000, as
  the import script places it; 'generated': <root>/<dataset_name>, generated on first use with
  config.listops and marked by generated.json; 'auto': the release if it is there, else
  generated), max_length, max_truncated_fraction. config.seed is the training seed and does not
  touch the data.
  """
  root = base.data_root(config.data_dir)
  release = root / RELEASE_FOLDER
  source = config.data_source
  if source == 'auto':
    has_release = any((release / name).exists() for name in SPLIT_FILES.values())
    source = 'release' if has_release else 'generated'
  if source == 'release':
    folder = release
    missing = [name for name in SPLIT_FILES.values() if not (folder / name).is_file()]
    if missing:
      raise base.DataError(f'ListOps release files {", ".join(missing)} not found in {folder}.'
                           f'{base.nested_release_hint(root, RELEASE_FOLDER)} To get them, '
                           f'{RELEASE_HINT}.')
    description = {'source': 'release', 'path': str(folder.resolve())}
    made_now = False
  else:
    folder, made_now = _generated_folder(config, root)
    description = {'source': 'generated', 'path': str(folder.resolve()),
                   'generator': generation_record(folder)}
  paths = {split: folder / name for split, name in SPLIT_FILES.items()}

  def build() -> tuple[dict, dict]:
    splits, truncated = {}, {}
    for split, path in paths.items():
      inputs, targets, truncated[split] = read_listops_tsv(path, config.max_length)
      splits[split] = {'inputs': inputs, 'targets': targets}
    return splits, {'truncated': truncated}

  splits, info = base.cached_split_arrays(folder / f'cache_len{config.max_length}.npz', build,
                                           sources=paths.values())
  examples = base.example_counts(splits)
  base.check_truncation(config, info['truncated'], examples, f'ListOps ({folder})')
  # Say whether this run made the data or only read it (made earlier, or the release).
  console.say(f'ListOps: data generated now in {folder}.' if made_now else
              f'ListOps: read {"previously generated" if source == "generated" else "release"} '
              f'data from {folder}.')
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=config.max_length,
                       source={**description, 'examples': examples, **info})
