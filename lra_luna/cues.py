"""Cue baselines: what a classifier gets from one short cue of a ListOps or Pathfinder set, with no
model and no need for the input's range.

  python -m lra_luna.cues --listops data/store/listops-mid [--start_windows]
  python -m lra_luna.cues --pathfinder data/store/pathfinder-mid [--difficulty easy]

Each cue's test accuracy (%), as a Markdown table with what it is computed from:
- majority class: the training set's most frequent label, predicted for every test input;
- ListOps, first token: the outermost operator's most frequent value in training, predicted for
  every test expression with that operator (what a window of one token at the start gives);
- ListOps, masked tokens (masked_token_baselines): what a masked-token pretraining can score, the
  most frequent token, the most frequent between the same two neighbours, and the ceiling of
  knowing each token's kind;
- ListOps, start windows (--start_windows, minutes): the best reader of the first w tokens, the
  Bayes rule estimated from completions drawn by LRA's generator (start_window_bayes);
- Pathfinder, circle distance: one threshold on the distance between the two circles, fit on
  the training split (circle_distance_baseline).
`python -m lra_luna.report` shows the majority class and the first token of a sweep's ListOps
set (and the circle distance of its Pathfinder set) under Table 1 where that data is present.
"""

import dataclasses
import inspect
import math
import pathlib
import sys

import numpy as np

from lra_luna import cli
from lra_luna.datasets import listops
from lra_luna.datasets import pathfinder
from lra_luna.datasets import pathfinder_generator

REGENERATE = 'regenerate the set (data/generate_listops.py)'


@dataclasses.dataclass(frozen=True)
class Cue:
  task: str
  name: str          # what the cue is
  accuracy: float    # test accuracy, percent
  source: str        # what it was computed from (the set, the function)


# ----------------------------------------------------------------------------------------------
# ListOps: the first token, masked tokens, start windows.
# ----------------------------------------------------------------------------------------------
def listops_expressions(folder, split: str, check: bool = True) -> list[tuple[list[str], int]]:
  """(the expression's tokens without parentheses, as the model reads them; its value) of each
  row of a ListOps split file (basic_<split>.tsv) in `folder`; with `check`, each expression
  evaluated against its label. ValueError in one line naming the file and line."""
  path = pathlib.Path(folder) / listops.SPLIT_FILES[split]
  known = {*listops.OPERATORS, listops.CLOSE, *listops.DIGITS}
  rows = []
  for number, line in enumerate(path.read_text(encoding='utf-8').splitlines()[1:], start=2):
    fields = line.split('\t')
    if len(fields) != 2:
      raise ValueError(f'{path}, line {number}: expected "expression<TAB>value", got '
                       f'{len(fields)} field(s); {REGENERATE}.')
    tokens = [t for t in fields[0].split() if t not in listops.PARENTHESES]
    unknown = sorted(set(tokens) - known | ({fields[1]} - set(listops.DIGITS)))
    if unknown:
      raise ValueError(f'{path}, line {number}: unknown token(s) {unknown}; {REGENERATE}.')
    if check:
      try:
        value = listops.evaluate_expression(fields[0])
      except ValueError as e:
        raise ValueError(f'{path}, line {number}: the expression is not one complete tree ({e}); '
                         f'{REGENERATE}.') from None
      if value != int(fields[1]):
        raise ValueError(f'{path}, line {number}: the expression evaluates to {value}, its '
                         f'label is {fields[1]}; {REGENERATE}.')
    rows.append((tokens, int(fields[1])))
  if not rows:
    raise ValueError(f'{path} holds no expression; {REGENERATE}.')
  return rows


def majority_rate(train_labels, test_labels) -> float:
  """training.steps.majority_rate (the one definition; jax is imported only when it is needed)."""
  from lra_luna.training import steps  # pylint: disable=import-outside-toplevel
  return steps.majority_rate(train_labels, test_labels)


def first_token_scores(train_rows, test_rows) -> tuple[float, float]:
  """(the majority class: the training set's most frequent value, on the test set; the first
  token alone: each operator's most frequent training value), test accuracy in percent."""
  by_operator = {}
  for tokens, value in train_rows:
    counts = by_operator.setdefault(tokens[0], {})
    counts[value] = counts.get(value, 0) + 1
  guess = {op: max(counts, key=counts.get) for op, counts in by_operator.items()}
  test_values = [value for _, value in test_rows]
  majority = majority_rate([value for _, value in train_rows], test_values)
  return (100 * majority,
          100 * sum(guess.get(tokens[0]) == v for tokens, v in test_rows) / len(test_rows))


def masked_token_baselines(train: list[list[str]], test: list[list[str]]) -> dict[str, float]:
  """What a masked-token objective (every token equally likely masked) can score on ListOps
  expressions (token lists without parentheses), accuracy in percent over the test tokens:
  - 'frequency': always the most frequent training token (the token check's reference point);
  - 'neighbours': the most frequent training token between the same left and right neighbours
    (start and end count as neighbours), both visible: an objective-free local baseline;
  - 'kind ceiling': every ']' right, and for an operator or a value the most frequent of its
    kind. LRA's generator draws each operator and each value independently and uniformly, so
    no context says which operator or value a masked one is: knowing only where the brackets,
    operators and values are is all a model can learn, and this is its accuracy."""
  def kind(token):
    return ('close' if token == listops.CLOSE else
            'operator' if token in listops.OPERATORS else 'value')
  counts, by_context = {}, {}
  for tokens in train:
    padded = ['<s>', *tokens, '</s>']
    for left, token, right in zip(padded, padded[1:], padded[2:]):
      counts[token] = counts.get(token, 0) + 1
      context = by_context.setdefault((left, right), {})
      context[token] = context.get(token, 0) + 1
  most_frequent = max(counts, key=counts.get)
  by_kind = {}
  for token, count in counts.items():
    best = by_kind.get(kind(token))
    if best is None or count > counts[best]:
      by_kind[kind(token)] = token
  guess = {context: max(c, key=c.get) for context, c in by_context.items()}
  right = {'frequency': 0, 'neighbours': 0, 'kind ceiling': 0}
  total = 0
  for tokens in test:
    padded = ['<s>', *tokens, '</s>']
    for left, token, after in zip(padded, padded[1:], padded[2:]):
      total += 1
      right['frequency'] += token == most_frequent
      right['neighbours'] += token == guess.get((left, after), most_frequent)
      right['kind ceiling'] += token == by_kind.get(kind(token))
  if total == 0:
    raise ValueError('masked_token_baselines: no test token; check the ListOps set.')
  return {name: 100 * r / total for name, r in right.items()}


def read_prefix(tokens: list[str], window: int) -> tuple[list, int | None]:
  """The first `window` tokens of a ListOps expression (tokens without parentheses) as (its open
  operator nodes, outermost first, each (operator, its closed children's values); the
  expression's value where the window closes it, else None)."""
  stack = []
  for token in tokens[:window]:
    if token in listops.OPERATORS:
      stack.append((token, []))
      continue
    value = listops.apply_operator(*stack.pop()) if token == listops.CLOSE else int(token)
    if not stack:
      return [], value
    stack[-1][1].append(value)
  return stack, None


class _Draws:
  """LRA's generator's uniform draws, refilled when spent; `length` counts the tokens."""

  def __init__(self, rng):
    self.rng, self.values, self.length = rng, iter(()), 0

  def uniform(self) -> float:
    value = next(self.values, None)
    if value is None:
      self.values = iter(self.rng.random(1 << 20).tolist())
      value = next(self.values)
    return value


def _subtree(draws: _Draws, depth: int, settings: dict) -> int:
  """The generator's node(): its draws in its order, its length count; OverflowError past the
  longest kept length."""
  draws.length += 1
  if draws.length >= settings['max_length']:
    raise OverflowError
  if depth < settings['max_depth'] and draws.uniform() < listops.OPERATOR_PROBABILITY:
    arity = listops.MIN_ARGS + int(draws.uniform() * (settings['max_args'] - listops.MIN_ARGS + 1))
    operator = listops.OPERATORS[int(draws.uniform() * len(listops.OPERATORS))]
    values = [_subtree(draws, depth + 1, settings) for _ in range(arity)]
    draws.length += 1
    return listops.apply_operator(operator, values)
  return int(draws.uniform() * listops.NUM_CLASSES)


def completion_labels(tokens: list[str], window: int, settings: dict, rng,
                      samples: int) -> list[int]:
  """Labels of `samples` completions of an expression's first `window` tokens, drawn from LRA's
  generator (lra_luna.datasets.listops) conditioned on that prefix: each open node's arity
  uniform over what its seen children allow, further arguments drawn as the generator draws
  them at their depth, and only completions whose length the set keeps (min_length < tokens <
  max_length, the generation record's `settings`). The share of the most frequent label is the
  best a reader of those tokens can score on that expression (the Bayes rule), up to sampling
  noise."""
  stack, value = read_prefix(tokens, window)
  if value is not None:  # the window holds the whole expression
    return [value] * samples
  draws, labels = _Draws(rng), []
  for _ in range(100 * samples):  # a prefix that few kept lengths complete returns fewer
    if len(labels) == samples:
      break
    draws.length, open_child = min(window, len(tokens)), None
    try:
      for depth, (operator, values) in reversed(list(enumerate(stack, start=1))):
        children = [*values, *([] if open_child is None else [open_child])]
        low = max(listops.MIN_ARGS, len(children))
        arity = low + int(draws.uniform() * (settings['max_args'] - low + 1))
        children += [_subtree(draws, depth + 1, settings) for _ in range(arity - len(children))]
        draws.length += 1  # its `]`
        open_child = listops.apply_operator(operator, children)
    except OverflowError:
      continue
    if settings['min_length'] < draws.length < settings['max_length']:
      labels.append(open_child)
  return labels


def start_window_bayes(test_rows, windows, settings: dict, *, examples: int = 1000,
                       samples: int = 40, seed: int = 0) -> list[tuple]:
  """What the first w tokens of a ListOps expression can give at best: for each window w,
  (w, the accuracy of the Bayes rule estimated on the first `examples` test expressions, that
  estimate's 95% half-width over the expressions, the mean share of its most frequent label), in
  percent. Each expression's label posterior is `samples` completions of its first w tokens
  (completion_labels); the rule predicts the most frequent. With few samples the accuracy is a
  little low and the mean top share a little high."""
  rng = np.random.default_rng(seed)
  rows = []
  for window in windows:
    right, top = [], []
    for tokens, value in test_rows[:examples]:
      labels = completion_labels(tokens, window, settings, rng, samples)
      if not labels:  # no kept length completes this prefix in 100 x samples draws
        continue
      counts = np.bincount(labels, minlength=listops.NUM_CLASSES)
      right.append(counts.argmax() == int(value))
      top.append(counts.max() / len(labels))
    if not right:
      raise ValueError(f'no test expression could be completed at window {window}.')
    accuracy = float(np.mean(right))
    half_width = 1.96 * math.sqrt(accuracy * (1 - accuracy) / len(right))
    rows.append((window, 100 * accuracy, 100 * half_width, 100 * float(np.mean(top))))
  return rows


def generator_settings(folder) -> dict:
  """The settings that generated the ListOps set in `folder`; a release folder has no record:
  LRA's own settings made it, our generator's defaults."""
  record = listops.generation_record(folder)
  if record:
    return record['settings']
  return {name: parameter.default for name, parameter
          in inspect.signature(listops.generate_listops).parameters.items()}


def listops_cues(folder, start_windows: bool = False, check: bool = True) -> list[Cue]:
  """The ListOps cues of the set in `folder`: majority class, first token, masked tokens, and
  with start_windows the best readers of 1 token, 1/8 of the median input and 1/8 of the length
  cap (the probe's windows)."""
  train, test = (listops_expressions(folder, split, check) for split in ('train', 'test'))
  where = f'ListOps set {folder} ({len(train):,} train / {len(test):,} test expressions)'
  majority, first = first_token_scores(train, test)
  cues = [Cue('listops', "majority class (the training set's most frequent label)", majority,
              where),
          Cue('listops', 'the first token (the outermost operator) alone', first, where)]
  masked = masked_token_baselines([t for t, _ in train], [t for t, _ in test])
  cues += [Cue('listops', f'a masked token: {name}', value, f'{where}, test tokens')
           for name, value in (('always the most frequent token', masked['frequency']),
                               ('the most frequent between its two neighbours',
                                masked['neighbours']),
                               ("the ceiling of knowing each token's kind",
                                masked['kind ceiling']))]
  if start_windows:
    settings = generator_settings(folder)
    windows = (1, max(1, sorted(len(t) for t, _ in test)[len(test) // 2] // 8),
               max(1, settings['max_length'] // 8))
    cues += [Cue('listops', f'the best reader of the first {w} tokens (± {half:.1f}; mean top '
                 f'share {top:.1f}%)', accuracy, f'{where}, the first 1,000 test expressions, 40 '
                 'completions each by the generator')
             for w, accuracy, half, top in start_window_bayes(test, windows, settings)]
  return cues


# ----------------------------------------------------------------------------------------------
# Pathfinder: the distance between the two circles.
# ----------------------------------------------------------------------------------------------
def circle_distances(inputs, resolution: int):
  """The distance in pixels between the centres of the two circles of each Pathfinder image
  (inputs uint8 [N, res * res]): the two largest blobs of full-intensity pixels (>= 250; paths
  are drawn dimmer than the circles' filled discs); NaN where fewer than two blobs are found."""
  from scipy import ndimage  # pylint: disable=import-outside-toplevel
  distances = np.full(len(inputs), np.nan)
  for i, pixels in enumerate(inputs):
    bright = pixels.reshape(resolution, resolution) >= 250
    labels, count = ndimage.label(bright)
    if count < 2:
      continue
    sizes = ndimage.sum(bright, labels, range(1, count + 1))
    largest = np.argsort(sizes)[-2:] + 1
    (y1, x1), (y2, x2) = ndimage.center_of_mass(bright, labels, largest)
    distances[i] = math.hypot(y1 - y2, x1 - x2)
  return distances


def threshold_accuracy(train_distance, train_labels, test_distance, test_labels) -> float:
  """Test accuracy of predicting 1 ('connected') below the distance threshold that is best on
  the training pairs, and the training majority class where a distance is NaN."""
  majority = int(np.bincount(train_labels, minlength=2).argmax())
  def predict(distance, threshold):
    return np.where(np.isnan(distance), majority, distance < threshold)
  thresholds = np.unique(train_distance[~np.isnan(train_distance)])
  threshold = max(thresholds, key=lambda t: np.mean(predict(train_distance, t) == train_labels))
  return float(np.mean(predict(test_distance, threshold) == test_labels))


def pathfinder_cues(splits: dict, resolution: int, where: str) -> list[Cue]:
  """The Pathfinder cues of {split: {'inputs', 'targets'}}: the majority class and one threshold
  on the circles' distance. By construction a positive's circles are the two ends of one path
  (at most its span apart) and a negative's the ends of two paths, so the distance alone carries
  some of the label where paths are short."""
  train, test = splits['train'], splits['test']
  majority = majority_rate(train['targets'], test['targets'])
  by_distance = threshold_accuracy(
      circle_distances(train['inputs'], resolution), train['targets'],
      circle_distances(test['inputs'], resolution), test['targets'])
  return [Cue('pathfinder', "majority class (the training set's most frequent label)",
              100 * majority, where),
          Cue('pathfinder', "one threshold on the distance between the two circles",
              100 * by_distance, where)]


def circle_distance_baseline(root, resolution: int, difficulty: str) -> list[Cue]:
  """pathfinder_cues of the set <root>/pathfinder<res>/<difficulty folder>, split as training
  splits it."""
  arrays = pathfinder.read_pathfinder(root, resolution, difficulty)
  folder = pathfinder_generator.dataset_folder(root, resolution, difficulty)
  return pathfinder_cues(pathfinder.split_in_file_order(arrays[0], arrays[1]), resolution,
                         f'Pathfinder set {folder} ({len(arrays[1]):,} images, 80/10/10)')


# ----------------------------------------------------------------------------------------------
# What report shows under Table 1, and the command.
# ----------------------------------------------------------------------------------------------
def sweep_cues(data: dict) -> list[Cue]:
  """The cheap cues of each task's data that a sweep's results.json name ({task: its 'data'})
  and this machine holds: ListOps' majority class and first token; Pathfinder's majority class
  and circle distance where the run's array cache is there."""
  cues = []
  for task, source in sorted(data.items()):
    folder = pathlib.Path((source or {}).get('path', ''))
    if task == 'listops' and (folder / listops.SPLIT_FILES['test']).is_file():
      train, test = (listops_expressions(folder, s, check=False) for s in ('train', 'test'))
      where = f'ListOps set {folder}'
      majority, first = first_token_scores(train, test)
      cues += [Cue(task, "majority class (the training set's most frequent label)", majority,
                   where), Cue(task, 'the first token alone', first, where)]
    elif task == 'pathfinder' and (folder / 'cache.npz').is_file():
      with np.load(folder / 'cache.npz') as flat:
        splits = {s: {n: flat[f'{s}/{n}'] for n in ('inputs', 'targets')}
                  for s in ('train', 'test')}
      resolution = int(round(math.sqrt(splits['test']['inputs'].shape[1])))
      cues += pathfinder_cues(splits, resolution, f'Pathfinder set {folder}')
  return cues


def cue_notes(cues: list[Cue]) -> list[str]:
  """Table 1's lines of the cues, each with its source."""
  return [f'Cue baseline ({cue.task}; lra_luna/cues.py on {cue.source}): {cue.name}: '
          f'{cue.accuracy:.2f}%.' for cue in cues]


def cue_table(cues: list[Cue]) -> str:
  lines = ['| task | cue | test accuracy (%) | computed from |', '|---|---|---:|---|']
  lines += [f'| {c.task} | {c.name} | {c.accuracy:.1f} | {c.source} |' for c in cues]
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.cues', description=__doc__,
                              epilog='docs/mid.md ("Cue baselines") shows them on the mid sets.')
  parser.add_argument('--listops', default='', help='a ListOps set folder (basic_train.tsv, '
                      'basic_test.tsv), e.g. data/store/listops-mid')
  parser.add_argument('--start_windows', action='store_true',
                      help='also the best reader of the first w tokens (ListOps; minutes)')
  parser.add_argument('--pathfinder', default='', help='a data root holding a Pathfinder set, '
                      'e.g. data/store/pathfinder-mid')
  parser.add_argument('--resolution', type=int, default=32, help='its resolution')
  parser.add_argument('--difficulty', default='easy', help='easy | intermediate | hard')
  args = parser.parse_args(argv)
  if not args.listops and not args.pathfinder:
    parser.error('give --listops DIR, --pathfinder ROOT or both')
  cues = []
  for flag, compute in (('--listops', lambda: listops_cues(args.listops, args.start_windows)),
                        ('--pathfinder', lambda: circle_distance_baseline(
                            args.pathfinder, args.resolution, args.difficulty))):
    if not getattr(args, flag[2:]):
      continue
    try:
      cues += compute()
    except OSError as e:
      sys.exit(f'error: {flag} {getattr(args, flag[2:])}: {e.strerror or e}: {e.filename}')
    except ValueError as e:
      sys.exit(f'error: {flag} {getattr(args, flag[2:])}: {e}')
  print(cue_table(cues))
  return 0


if __name__ == '__main__':
  sys.exit(main())
