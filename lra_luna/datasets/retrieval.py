"""Retrieval (lra.md §1): do two ACL Anthology Network papers cite each other? Byte-level pairs.

Reads the LRA release files `new_aan_pairs.{train,eval,test}.tsv` from <data root>/<dataset_name>
(default 'aan'; `python data/import_lra_release.py <lra_release>` links them there). Each line,
no header: label (written as a float, '1.0' or '0'), id1, id2, text1, text2, tab-separated.
As LRA, each text is cut to its first 10000 bytes, then encoded as byte + 1 (pad 0, vocab 257)
and cut or padded to config.max_length.
"""

import csv
import pathlib

import numpy as np

from lra_luna.datasets import base
from lra_luna.datasets import text as text_lib

SPLIT_FILES = {'train': 'new_aan_pairs.train.tsv', 'validation': 'new_aan_pairs.eval.tsv',
               'test': 'new_aan_pairs.test.tsv'}
NUM_COLUMNS = 5
MAX_TEXT_BYTES = 10000  # LRA's cut before encoding
VOCAB_SIZE = text_lib.VOCAB_SIZE
NUM_CLASSES = 2
FIELD_SIZE_LIMIT = 2**31 - 1  # texts are long; csv's default limit is 128 KiB
IMPORT_HINT = ('run `python data/import_lra_release.py <unpacked lra_release folder>` (it links '
               'tsv_data/new_aan_pairs.*.tsv there; ' + base.RELEASE_DOWNLOAD + '), or point '
               '--config.data_dir at a root holding <dataset_name>/new_aan_pairs.*.tsv')


def _rows(path: pathlib.Path):
  """Yields (line number, columns) of a release TSV; DataError on a line csv cannot split."""
  csv.field_size_limit(FIELD_SIZE_LIMIT)  # process-wide, and harmless to raise
  # surrogateescape keeps every byte, even in invalid UTF-8, so the encoding is byte-exact.
  with open(path, encoding='utf-8', errors='surrogateescape', newline='') as f:
    reader = csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE)
    while True:
      try:
        columns = next(reader)
      except StopIteration:
        return
      except csv.Error as e:
        raise base.DataError(f'{path}, line {reader.line_num}: cannot split this line '
                             f'({e}).') from None
      yield reader.line_num, columns


def _parse_label(path: pathlib.Path, line_number: int, label: str) -> int:
  try:
    value = float(label)
  except ValueError:
    raise base.DataError(f'{path}, line {line_number}: label {label!r} (1st column) is not a '
                         f'number.') from None
  if value not in (0.0, 1.0):
    raise base.DataError(f'{path}, line {line_number}: label {label!r} (1st column) must be 0 '
                         f'or 1.')
  return int(value)


def encode_text(text: str, max_length: int) -> tuple[np.ndarray, bool]:
  """(token ids, whether max_length cut the text) of one paper's text: its first MAX_TEXT_BYTES
  UTF-8 bytes, each + 1, at most max_length of them."""
  data = text.encode('utf-8', errors='surrogateescape')[:MAX_TEXT_BYTES]
  return text_lib.byte_ids(data, max_length), len(data) > max_length


def read_aan_tsv(path, max_length: int) -> tuple[dict, int]:
  """One release TSV -> ({'inputs1', 'inputs2': uint16 [N, max_length], 'targets': int32 [N]},
  number of documents (two per pair) longer than max_length after LRA's cut)."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise base.DataError(f'Retrieval file {path} not found; {IMPORT_HINT}.')
  # Two passes (count, then parse) keep memory at the output arrays, not at the text.
  num_rows = sum(1 for _ in _rows(path))
  if num_rows == 0:
    raise base.DataError(f'{path}: no examples (an empty file?); {IMPORT_HINT}.')
  inputs1 = np.zeros((num_rows, max_length), np.uint16)
  inputs2 = np.zeros((num_rows, max_length), np.uint16)
  targets = np.zeros(num_rows, np.int32)
  num_truncated = 0
  for i, (line_number, columns) in enumerate(_rows(path)):
    if len(columns) != NUM_COLUMNS:
      raise base.DataError(f'{path}, line {line_number}: expected {NUM_COLUMNS} tab-separated '
                           f'columns (label, id1, id2, text1, text2), found {len(columns)}.')
    label, _, _, text1, text2 = columns
    targets[i] = _parse_label(path, line_number, label)
    (ids1, cut1), (ids2, cut2) = encode_text(text1, max_length), encode_text(text2, max_length)
    inputs1[i, :len(ids1)] = ids1
    inputs2[i, :len(ids2)] = ids2
    num_truncated += cut1 + cut2
  return {'inputs1': inputs1, 'inputs2': inputs2, 'targets': targets}, num_truncated


def load_retrieval(config) -> base.TaskData:
  """AAN pairs as TaskData (train / eval file as validation / test), cached per max_length.

  config: data_dir, dataset_name (folder of the three TSVs, 'aan'), max_length.
  Inputs are uint16 (ids up to 256); cast a batch to int32 where a model needs it.
  """
  root = base.data_root(config.data_dir)
  folder = root / config.dataset_name
  missing = [name for name in SPLIT_FILES.values() if not (folder / name).is_file()]
  if missing:
    raise base.DataError(f'Retrieval files {", ".join(missing)} not found in {folder}.'
                         f'{base.nested_release_hint(root, pathlib.Path("tsv_data") / missing[0])}'
                         f' To get them, {IMPORT_HINT}.')

  def build() -> tuple[dict, dict]:
    splits, truncated = {}, {}
    for split, name in SPLIT_FILES.items():
      splits[split], truncated[split] = read_aan_tsv(folder / name, config.max_length)
    return splits, {'truncated_documents': truncated}

  splits, info = base.cached_split_arrays(
      folder / f'cache_len{config.max_length}.npz', build,
      sources=[folder / name for name in SPLIT_FILES.values()])
  examples = base.example_counts(splits)
  # Two documents per example: the share of documents cut is what max_truncated_fraction bounds.
  base.check_truncation(config, info['truncated_documents'],
                        {split: 2 * n for split, n in examples.items()}, f'Retrieval ({folder})')
  return base.TaskData(splits=splits, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES,
                       max_length=config.max_length,
                       source={'source': 'release', 'path': str(folder.resolve()),
                               'examples': examples, **info})
