"""Multi-query associative recall (MQAR; Arora et al., "Zoology", ICLR 2024, §3): a seeded
generator and the task loader.

One example of length L holds N key-value pairs, then each key once more as a query:

  k_1 v_1 k_2 v_2 ... k_N v_N | 0 0 k_3 0 k_1 0 0 0 k_2 0 ...
  label at a query position: its key's value; every other position is not predicted.

Keys come from 1 .. V/2 - 1 and values from V/2 .. V - 1, distinct within an example. The
queries sit at even offsets of the second part, at gaps drawn without replacement with
p(g) proportional to a g^(a - 1) (a power law: most queries come soon after the pairs). The
positions that are neither pairs nor queries are 0 (Zoology's Figure 2), or with
`random_non_queries` a random token that is none of the example's keys and values. The value of a
query never appears after it, so a bidirectional encoder cannot read it from the future.

Arrays per split: `inputs` [M, L], `query_positions` [M, N] (int32, in key order), `targets`
[M, N] (the values). The model predicts at the query positions only (models/recall.py).
"""

import hashlib

import numpy as np

from lra_luna import console
from lra_luna.datasets import base

VOCAB_SIZE = 8192  # Zoology's; config.mqar.vocab_size sets another
NUM_CLASSES = VOCAB_SIZE  # a query's label is a token of the vocabulary
SPLIT_SEEDS = {'train': 0, 'validation': 1, 'test': 10}  # added to config.mqar.seed (Zoology: +10)
# Zoology warns when more than this share of the test examples also occurs in training.
MAX_TEST_OVERLAP = 0.001
GENERATOR = 'lra_luna.datasets.mqar.generate_mqar'
_CHUNK = 2048  # examples per vectorised draw (keeps the key permutations' memory small)


def check_settings(length: int, num_kv_pairs: int, vocab_size: int, power_a: float) -> None:
  """ValueError in one line for settings that cannot make MQAR examples (Zoology's asserts)."""
  if length % 2:
    raise ValueError(f'MQAR: max_length = {length} is odd; queries sit at even offsets, so the '
                     f'length must be even (e.g. --config.max_length={length + 1}).')
  if num_kv_pairs < 1 or 4 * num_kv_pairs > length:
    raise ValueError(f'MQAR: {num_kv_pairs} key-value pairs do not fit max_length = {length}: '
                     f'the pairs take 2N positions and the queries need 2N more (4N <= L); use '
                     f'--config.mqar.num_kv_pairs <= {length // 4}.')
  if vocab_size <= length:  # with 4N <= L this also leaves V/2 - 1 >= N distinct keys
    raise ValueError(f'MQAR: a vocabulary of {vocab_size} is too small for max_length = {length} '
                     f'(Zoology needs V > L); raise --config.mqar.vocab_size.')
  if not 0 < power_a <= 1:
    raise ValueError(f'MQAR: power_a = {power_a} is not in (0, 1]; the gap law is '
                     f'p(g) ~ a g^(a-1) (Zoology: 0.01).')


def gap_probabilities(space: int, power_a: float) -> np.ndarray:
  """p(g) = a g^(a - 1) / sum, g = 1 .. space: the power law of the query gaps (Zoology)."""
  p = power_a * np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
  return p / p.sum()


def distinct_uniform(rng: np.random.Generator, rows: int, low: int, high: int,
                     size: int) -> np.ndarray:
  """[rows, size] distinct integers of low .. high - 1 per row, uniformly: drawn with
  replacement, and every row that holds a repeat drawn again (the rows kept are uniform over
  sets without repeats, in a uniform order)."""
  draws = rng.integers(low, high, size=(rows, size))
  while True:
    ordered = np.sort(draws, axis=1)
    repeats = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    if not len(repeats):
      return draws
    draws[repeats] = rng.integers(low, high, size=(len(repeats), size))


def weighted_distinct(rng: np.random.Generator, rows: int, p: np.ndarray, size: int) -> np.ndarray:
  """[rows, size] distinct indices of p per row, drawn one after another without replacement
  with probabilities p (Gumbel top-k, which is exactly that)."""
  scores = rng.gumbel(size=(rows, len(p))) + np.log(p)
  top = np.argpartition(-scores, size - 1, axis=1)[:, :size]  # the `size` largest, unordered
  order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
  return np.take_along_axis(top, order, axis=1)


def generate_mqar(num_examples: int, length: int, num_kv_pairs: int, *, vocab_size: int = VOCAB_SIZE,
                  power_a: float = 0.01, random_non_queries: bool = False, seed: int = 0) -> dict:
  """{'inputs' [M, L], 'query_positions' [M, N], 'targets' [M, N]} of `num_examples` MQAR
  examples drawn from `seed` (module docstring); the same arguments give the same arrays."""
  check_settings(length, num_kv_pairs, vocab_size, power_a)
  rng = np.random.default_rng(seed)
  n, half = num_kv_pairs, vocab_size // 2
  space = (length - 2 * n) // 2
  p = gap_probabilities(space, power_a)
  dtype = np.min_scalar_type(vocab_size)
  inputs = np.zeros((num_examples, length), dtype)
  positions = np.zeros((num_examples, n), np.int32)
  values = np.zeros((num_examples, n), dtype)
  for start in range(0, num_examples, _CHUNK):
    rows = min(_CHUNK, num_examples - start)
    keys = distinct_uniform(rng, rows, 1, half, n)
    vals = distinct_uniform(rng, rows, half, vocab_size, n)
    gaps = weighted_distinct(rng, rows, p, n)  # the gap g - 1
    block = np.zeros((rows, length), np.int64)
    if random_non_queries:
      block[:] = random_fillers(rng, keys, vals, length, vocab_size)
    block[:, 0:2 * n:2], block[:, 1:2 * n:2] = keys, vals
    query = 2 * n + 2 * gaps
    np.put_along_axis(block, query, keys, axis=1)
    inputs[start:start + rows] = block
    positions[start:start + rows], values[start:start + rows] = query, vals
  return {'inputs': inputs, 'query_positions': positions, 'targets': values}


def random_fillers(rng, keys, vals, length: int, vocab_size: int) -> np.ndarray:
  """[rows, L] tokens of 1 .. V - 1, none of them one of the row's keys or values (a filler
  equal to a value after its query would reveal it; one equal to a key would be a query)."""
  taken = np.concatenate([keys, vals], axis=1)
  fillers = rng.integers(1, vocab_size, size=(len(keys), length))
  while True:
    clash = (fillers[:, :, None] == taken[:, None, :]).any(-1)
    if not clash.any():
      return fillers
    fillers[clash] = rng.integers(1, vocab_size, size=int(clash.sum()))


def settings_of(config) -> dict:
  """The generator's settings of a config (config.mqar and max_length), as results.json says."""
  m = config.mqar
  return {'length': int(config.max_length), 'num_kv_pairs': int(m.num_kv_pairs),
          'vocab_size': int(m.vocab_size), 'power_a': float(m.power_a),
          'random_non_queries': bool(m.random_non_queries), 'seed': int(m.seed)}


def rows_in(rows: np.ndarray, other: np.ndarray) -> int:
  """How many rows of `rows` occur as a row of `other` (exact match)."""
  seen = {row.tobytes() for row in other}
  return sum(row.tobytes() in seen for row in rows)


def fingerprint(splits: dict) -> str:
  """sha256 of every array of every split: two runs with equal fingerprints read equal data."""
  digest = hashlib.sha256()
  for split in sorted(splits):
    for name in sorted(splits[split]):
      digest.update(np.ascontiguousarray(splits[split][name]).tobytes())
  return digest.hexdigest()


def load_mqar(config) -> base.TaskData:
  """MQAR as TaskData, generated in memory from config.mqar (train, validation from seed + 1 and
  test from seed + 10). DataError when more than MAX_TEST_OVERLAP of the test examples also
  occur in training (the test would measure memory of the training set, not recall)."""
  settings = settings_of(config)
  counts = {'train': config.mqar.num_train, 'validation': config.mqar.num_val,
            'test': config.mqar.num_test}
  generate = {key: value for key, value in settings.items() if key not in ('length', 'seed')}
  splits = {split: generate_mqar(int(counts[split]), settings['length'],
                                 seed=settings['seed'] + SPLIT_SEEDS[split], **generate)
            for split in counts}
  overlap = rows_in(splits['test']['inputs'], splits['train']['inputs'])
  if overlap > MAX_TEST_OVERLAP * counts['test']:
    raise base.DataError(
        f'MQAR: {overlap} of {counts["test"]} test examples also occur in the training set '
        f'(more than {MAX_TEST_OVERLAP:.1%}); raise --config.mqar.vocab_size or the length, or '
        'use fewer training examples.')
  console.say(f'MQAR: generated {counts["train"]} / {counts["validation"]} / {counts["test"]} '
              f'examples of {settings["length"]} tokens, {settings["num_kv_pairs"]} pairs, '
              f'vocabulary {settings["vocab_size"]} (seed {settings["seed"]}).')
  return base.TaskData(
      splits=splits, vocab_size=settings['vocab_size'], num_classes=settings['vocab_size'],
      max_length=settings['length'],
      source={'source': 'generated', 'generator': GENERATOR, 'settings': settings,
              'examples': base.example_counts(splits), 'test_in_train': overlap,
              'fingerprint': fingerprint(splits)})


def position_labels(query_positions: np.ndarray, targets: np.ndarray, length: int,
                    ignore: int = -100) -> np.ndarray:
  """[M, L] labels as Zoology writes them: the value at each query position, `ignore` elsewhere."""
  labels = np.full((len(targets), length), ignore, np.int64)
  np.put_along_axis(labels, query_positions.astype(np.int64), targets.astype(np.int64), axis=1)
  return labels

