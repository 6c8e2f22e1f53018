"""The mid-size evidence (docs/mid.md): LRA's published orderings put to the test on the mid runs.

  python -m lra_luna.mid_evidence runs/mid [--checkpoint best|last] [--figure runs/mid/mid.png]
      [--record docs/mid_results.csv]
  python -m lra_luna.mid_evidence docs/mid_results.csv --size mid [--figure docs/mid.png]

Reads every results.json under the folder (a `campaigns/mid.py` campaign or `sweep` folder) and
prints, as Markdown: each group's test accuracy per seed, mean ± sample std and n; then each
ordering of ORDERINGS whose two groups have finished: the difference of the means with its 95%
Welch interval and one word, `reproduces` (the interval lies on the published side of 0),
`reversed` (on the other side) or `not distinguishable` (it holds 0). With --figure it draws the
accuracy per model per task, error bars one sample std, the published full-size value as a
marker. A folder with no finished run is refused in one line. --listops_data and
--pathfinder_data also print what one cue gives on a generated set: the first token of a ListOps
expression, the distance between the two circles of a Pathfinder image; for ListOps also what a
masked-token pretraining can score (masked_token_baselines) and the best reader of the first w
tokens, estimated from completions drawn by the generator (start_window_bayes).

Run folders do not outlive their machine; the record keeps what they said. --record FILE merges
each run's row (size, task, group, seed, steps, test accuracy at the best and last checkpoints,
the commit and machine of its results.json `environment`, its preset and overrides) into a CSV, a
rerun replacing its row. Given that CSV instead of a folder, the tables and the figure are drawn
from its rows of one --size (the size words of the runs' presets: `mid`, `mid,long`).
"""

import argparse
import csv
import functools
import inspect
import math
import os
import pathlib
import statistics
import sys

import numpy as np

from lra_luna import config_lib
from lra_luna import published as published_lib
from lra_luna import registry
from lra_luna.report import runs as runs_lib

TASKS = ('listops', 'pathfinder')
# (task, better, worse, what LRA's papers say): the published ordering is `better` above `worse`
# (within: |difference| at most `margin` points is the claim instead).
ORDERINGS = (
    ('listops', 's4d', 'transformer', 'S4D > Transformer'),
    ('pathfinder', 's4d', 'transformer', 'S4D > Transformer'),
    ('listops', 'mega_chunk', 'transformer', 'Mega-chunk > Transformer'),
    ('pathfinder', 'mega_chunk', 'transformer', 'Mega-chunk > Transformer'),
    ('listops', 'transformer+spt', 'transformer', 'SPT Transformer > scratch Transformer'),
    ('pathfinder', 'transformer+spt', 'transformer', 'SPT Transformer > scratch Transformer'),
    ('listops', 'luna16', 'transformer', 'Luna-16 within a few points of the Transformer'),
    ('pathfinder', 'luna16', 'transformer', 'Luna-16 > Transformer (78.4 vs 71.8)'),
    ('listops', 's4d+spt', 's4d', 'SPT S4D >= scratch S4D'),
    # Amos et al. 2024: a diagonal linear RNN gains from SPT (DLR 77 -> 83.4, S4 82.8 -> 84.5).
    ('listops', 's5+spt', 's5', 'SPT S5 >= scratch S5'),
    # Miralles-González et al. 2025: with rotary positions a Transformer closes LRA's gaps.
    ('listops', 'transformer+rotary', 'transformer',
     'rotary Transformer > learned-position Transformer'),
    ('pathfinder', 'transformer+rotary', 'transformer',
     'rotary Transformer > learned-position Transformer'),
    ('listops', 'luna16+spt', 'luna16', 'SPT Luna-16 > scratch Luna-16'),
    ('pathfinder', 's4d+spt', 's4d', 'SPT S4D >= scratch S4D'),
    ('pathfinder', 'luna16+spt', 'luna16', 'SPT Luna-16 > scratch Luna-16'),
    # Across papers (each model's own Table 1 row): the SSMs above Luna-16.
    ('listops', 's4d', 'luna16', 'S4D > Luna-16 (60.47 vs 37.43)'),
    ('listops', 's5', 'luna16', 'S5 > Luna-16 (62.15 vs 37.43)'),
    ('listops', 's5', 's4d', 'S5 > S4D (62.15 vs 60.47)'),
    ('listops', 's5', 'lru', 'S5 > LRU (62.15 vs 60.2)'),
    ('listops', 'lru', 'luna16', 'LRU > Luna-16 (60.2 vs 37.43)'),
    ('pathfinder', 's4d', 'luna16', 'S4D > Luna-16 (93.06 vs 78.36)'),
    ('pathfinder', 's5', 'luna16', 'S5 > Luna-16 (95.33 vs 78.36)'),
    ('pathfinder', 'lru', 'luna16', 'LRU > Luna-16 (95.1 vs 78.36)'),
    # LRA's own Table 1, ListOps: the kernel and fixed-pattern attentions about 20 points
    # below the Transformer and Luna (the largest gaps among LRA's attention models).
    ('listops', 'transformer', 'performer', 'Transformer > Performer (36.37 vs 18.01)'),
    ('listops', 'transformer', 'linear_transformer',
     'Transformer > Linear Transformer (36.37 vs 16.13)'),
    ('listops', 'transformer', 'local', 'Transformer > Local attention (36.37 vs 15.82)'),
    ('listops', 'transformer', 'sparse_transformer',
     'Transformer > Sparse Transformer (36.37 vs 17.07)'),
    ('listops', 'luna16', 'performer', 'Luna-16 > Performer (37.43 vs 18.01)'),
    ('listops', 'luna16', 'linear_transformer', 'Luna-16 > Linear Transformer (37.43 vs 16.13)'),
    # LRA's Table 1, ListOps: the other attention models within about 3 points of the Transformer.
    *(('listops', model, 'transformer',
       f'{label} within a few points of the Transformer ({lra:.2f} vs 36.37)')
      for model, label, lra in (
          ('linformer', 'Linformer', 35.70), ('reformer', 'Reformer', 37.27),
          ('sinkhorn', 'Sinkhorn', 33.67), ('synthesizer', 'Synthesizer', 36.99),
          ('bigbird', 'BigBird', 36.05), ('longformer', 'Longformer', 35.63))),
    # The Luna paper's Table 1: the length of P changes ListOps by at most 0.6 points.
    ('listops', 'luna128', 'luna16', 'Luna-128 within a few points of Luna-16 (38.01 vs 37.43)'),
    ('listops', 'luna256', 'luna16', 'Luna-256 within a few points of Luna-16 (37.98 vs 37.43)'),
    # The Luna paper's Table 3: mean-pooled final P above [CLS] on every task it ran.
    ('listops', 'luna16/mean_p', 'luna16', 'Luna-16 P head > [CLS] head (38.06 vs 37.43)'),
)
WITHIN_POINTS = 3.0  # "within a few points": of the Transformer (LRA, Luna), of Luna-16 (P length)
# Published full-size numbers not in the registry's Table 1 rows (design/published_rows.md).
EXTRA_PUBLISHED = {('s5', 'listops'): 62.15, ('s5', 'pathfinder'): 95.33,
                   ('lru', 'listops'): 60.2, ('lru', 'pathfinder'): 95.1}


HEAD_LABELS = {'cls': '[CLS]', 'mean': 'mean', 'mean_p': 'P'}  # group_label's names of the heads


@functools.cache
def preset_head(preset: str) -> str | None:
  """The head a preset ('listops.py:luna16,mid') pools; None where it cannot be built."""
  config = config_lib.preset_config(preset)
  return None if config is None else config.model.head


def group_name(result: dict) -> str:
  """A run's group: its model, with `/<head>` where the run pooled another head than its preset
  (sweep --heads), so that two heads of one model are two groups, as in the sweep's folders."""
  head = preset_head((result.get('run') or {}).get('preset', ''))
  if head is None or result['head'] == head:
    return result['model']
  return f'{result["model"]}/{result["head"]}'


def group_label(name: str) -> str:
  """A group's table label: the model's, with its head where the group names one."""
  model, _, head = name.partition('/')
  return registry.label(model) + (f', {HEAD_LABELS.get(head, head)} head' if head else '')


def published(model: str, task: str) -> float | None:
  """The published full-size test accuracy of a group from scratch: a model's first Table 1 row,
  a Luna model's Table 3 row for a head group ('luna16/mean_p')."""
  model, _, head = model.partition('/')
  if head:
    rows = published_lib.matching(published_lib.TABLE3, model, head)
    return rows[0].accuracy.get(task) if rows else None
  if model in registry.MODELS:
    for row in registry.MODELS[model].table1:
      if task in row.accuracy:
        return row.accuracy[task]
  return EXTRA_PUBLISHED.get((model, task))


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
  """(mean(a) - mean(b), the 95% Welch interval's low and high end); needs 2+ values each
  (report.runs.welch_difference computes it)."""
  difference = runs_lib.welch_difference(runs_lib.seed_statistics(b), runs_lib.seed_statistics(a))
  return (difference.mean, *difference.interval)


def verdict(low: float, high: float, within: float | None = None) -> str:
  """reproduces / reversed / not distinguishable for an interval of better - worse; with
  `within`, whether the interval lies inside +-within (reproduces) or outside it (reversed)."""
  if within is not None:
    if -within <= low and high <= within:
      return 'reproduces'
    return 'reversed' if low > within or high < -within else 'not distinguishable'
  if low > 0:
    return 'reproduces'
  return 'reversed' if high < 0 else 'not distinguishable'


def group_accuracies(results: list[dict], checkpoint: str) -> dict:
  """{(task, group_name): {seed: accuracy}}."""
  groups = {}
  for result in results:
    groups.setdefault((result['task'], group_name(result)), {})[result['seed']] = (
        runs_lib.accuracy_of(result, checkpoint))
  return groups


def fmt(values: list[float]) -> str:
  if len(values) < 2:
    return f'{values[0]:.2f} (n = 1)'
  return f'{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} (n = {len(values)})'


def tables(groups: dict) -> str:
  lines = ['| task | model | per seed | mean ± std (n) | published, full size |',
           '|---|---|---|---|---:|']
  for (task, model), seeds in sorted(groups.items()):
    values = [seeds[s] for s in sorted(seeds)]
    pub = published(model, task)
    lines.append(f'| {task} | {group_label(model)} | '
                 f'{", ".join(f"{v:.2f}" for v in values)} | {fmt(values)} | '
                 f'{"" if pub is None else f"{pub:.2f}"} |')
  lines += ['', '| task | published ordering | better | worse | better − worse, 95% Welch | '
            'verdict |', '|---|---|---|---|---|---|']
  for task, better, worse, claim in ORDERINGS:
    a, b = groups.get((task, better), {}), groups.get((task, worse), {})
    if len(a) < 2 or len(b) < 2:
      continue
    diff, low, high = welch(list(a.values()), list(b.values()))
    within = WITHIN_POINTS if 'within' in claim else None
    lines.append(f'| {task} | {claim} | {fmt(list(a.values()))} | {fmt(list(b.values()))} | '
                 f'{diff:+.2f} [{low:+.2f}, {high:+.2f}] | {verdict(low, high, within)} |')
  return '\n'.join(lines)


def figure(groups: dict, path: pathlib.Path, size: str = 'mid') -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  tasks = [t for t in TASKS if any(task == t for task, _ in groups)]
  # A panel per task, as wide as its groups need; the groups by mean, highest first.
  widths = [max(4.0, 0.42 * sum(t == task for t, _ in groups)) for task in tasks]
  fig, axes = plt.subplots(1, len(tasks), figsize=(sum(widths) + 1.5, 5.0), squeeze=False,
                           gridspec_kw={'width_ratios': widths})
  for ax, task in zip(axes[0], tasks):
    models = sorted((m for t, m in groups if t == task),
                    key=lambda m: (-statistics.fmean(groups[(task, m)].values()), m))
    marked = False
    for x, model in enumerate(models):
      values = list(groups[(task, model)].values())
      std = statistics.stdev(values) if len(values) > 1 else 0.0
      ax.errorbar(x, statistics.fmean(values), yerr=std, fmt='o', color='C0', capsize=4,
                  label=f'{size}: mean ± std over seeds' if x == 0 else None)
      # The published value of the same model from scratch (none for SPT or rotary runs).
      pub = published(model, task) if model == registry.base_name(model) else None
      if pub is not None:
        ax.plot(x, pub, marker='x', color='C3', markersize=9, linestyle='none',
                label=None if marked else 'published, full size')
        marked = True
    ax.set_xticks(range(len(models)), [group_label(m) for m in models], rotation=45,
                  ha='right', rotation_mode='anchor')
    ax.set_title(f'{task} ({size})')
    ax.set_ylabel('test accuracy (%)')
  # One legend at the foot of the figure, below the labels, so that no marker hides behind it.
  handles = {}
  for ax in axes[0]:
    handles.update(zip(*reversed(ax.get_legend_handles_labels())))
  fig.legend(list(handles.values()), list(handles), fontsize=8, loc='lower center', ncol=2)
  fig.tight_layout(rect=(0, 0.07, 1, 1))
  fig.savefig(path, dpi=120)


RECORD_COLUMNS = ('size', 'task', 'group', 'seed', 'steps', 'best', 'last', 'commit', 'machine',
                  'config')
RECORD_KEY = ('size', 'task', 'group', 'seed')  # one row per run; a rerun replaces its row


def run_size(result: dict) -> str:
  """The size words of a run's preset ('listops.py:s5,mid,long,spt' -> 'mid,long'); 'full'."""
  words = (result.get('run') or {}).get('preset', '').partition(':')[2].split(',')
  return ','.join(w for w in words if w in config_lib.SHORTENING_WORDS) or 'full'


def record_rows(results: list[dict]) -> list[dict]:
  """The record's row of each run: test accuracy (%) at both checkpoints, and where it came from
  (results.json's environment: the commit, '+dirty' when the checkout differed from it)."""
  rows = []
  for result in results:
    env = result.get('environment') or {}
    commit = (env.get('commit') or '') + ('+dirty' if env.get('dirty') else '')
    machine = env.get('cpu', '') if env.get('platform', 'cpu') == 'cpu' else env.get(
        'device_kind', '')
    run = result.get('run') or {}
    rows.append({
        'size': run_size(result), 'task': result['task'], 'group': group_name(result),
        'seed': result['seed'], 'steps': result.get('steps', ''),
        **{checkpoint: (f'{runs_lib.accuracy_of(result, checkpoint):.2f}'
                        if checkpoint in result else '') for checkpoint in runs_lib.CHECKPOINTS},
        'commit': commit, 'machine': machine,
        'config': ' '.join([run.get('preset', ''), *(run.get('overrides') or [])]).strip()})
  return rows


def read_record(path) -> list[dict]:
  """The rows of a record CSV (seed an int, accuracies floats or None where not recorded);
  ValueError in one line naming the file and line of what is wrong."""
  path = pathlib.Path(path)
  with path.open(newline='') as f:
    reader = csv.DictReader(f)
    if tuple(reader.fieldnames or ()) != RECORD_COLUMNS:
      raise ValueError(f'{path}: the columns are {", ".join(reader.fieldnames or ())}, not '
                       f'{", ".join(RECORD_COLUMNS)}; write it with --record.')
    rows, seen = [], {}
    for row in reader:
      line = reader.line_num
      try:
        row['seed'] = int(row['seed'])
        for checkpoint in runs_lib.CHECKPOINTS:
          row[checkpoint] = float(row[checkpoint]) if row[checkpoint] else None
      except (TypeError, ValueError):
        raise ValueError(f'{path}, line {line}: seed {row["seed"]!r}, best {row["best"]!r}, '
                         f'last {row["last"]!r}: a seed is an integer and an accuracy a number '
                         '(percent) or empty.') from None
      key = tuple(row[k] for k in RECORD_KEY)
      if key in seen:
        raise ValueError(f'{path}, line {line}: the same run ({", ".join(map(str, key))}) as '
                         f'line {seen[key]}; keep one of them.')
      seen[key] = line
      rows.append(row)
  return rows


def write_record(path, rows: list[dict]) -> int:
  """Merges rows into the record at `path` (a row of the same run replaces the old one), sorted;
  written whole to a temporary file first, so that an interrupted write keeps the old record.
  Returns the number of rows in it."""
  path = pathlib.Path(path)
  merged = {tuple(row[k] for k in RECORD_KEY): row
            for row in (read_record(path) if path.exists() else [])}
  merged.update({tuple(row[k] for k in RECORD_KEY): row for row in rows})
  temporary = path.with_name(path.name + '.tmp')
  with temporary.open('w', newline='') as f:
    writer = csv.DictWriter(f, RECORD_COLUMNS, lineterminator='\n')
    writer.writeheader()
    for key in sorted(merged):
      writer.writerow({k: '' if v is None else (f'{v:.2f}' if isinstance(v, float) else v)
                       for k, v in merged[key].items()})
  os.replace(temporary, path)
  return len(merged)


def record_groups(rows: list[dict], path, size: str, checkpoint: str) -> dict:
  """{(task, group): {seed: accuracy}} of the record's rows of `size`; ValueError in one line
  when it has none, or a row of that size lacks the checkpoint's accuracy."""
  chosen = [row for row in rows if row['size'] == size]
  if not chosen:
    sizes = sorted({row['size'] for row in rows})
    raise ValueError(f'{path} has no run of size {size!r}; its sizes: {", ".join(sizes)} '
                     '(--size).')
  missing = [row for row in chosen if row[checkpoint] is None]
  if missing:
    raise ValueError(f'{path}: {len(missing)} runs of size {size!r} have no {checkpoint} '
                     f'accuracy (e.g. {missing[0]["task"]} {missing[0]["group"]} seed '
                     f'{missing[0]["seed"]}); use the other --checkpoint.')
  groups = {}
  for row in chosen:
    groups.setdefault((row['task'], row['group']), {})[row['seed']] = row[checkpoint]
  return groups


def listops_expressions(folder, split: str) -> list[tuple[list[str], str]]:
  """(the expression's tokens without parentheses, as the model reads them; its value) of each
  row of a ListOps split file (basic_<split>.tsv) in `folder`."""
  from lra_luna.datasets import listops  # pylint: disable=import-outside-toplevel
  path = pathlib.Path(folder) / listops.SPLIT_FILES[split]
  rows = []
  for number, line in enumerate(path.read_text(encoding='utf-8').splitlines()[1:], start=2):
    fields = line.split('\t')
    if len(fields) != 2:
      raise ValueError(f'{path}, line {number}: expected "expression<TAB>value", got '
                       f'{len(fields)} field(s); regenerate the set (data/generate_listops.py).')
    tokens = [t for t in fields[0].split() if t not in listops.PARENTHESES]
    known = {*listops.OPERATORS, listops.CLOSE, *listops.DIGITS}
    unknown = sorted(set(tokens) - known | ({fields[1]} - set(listops.DIGITS)))
    if unknown:
      raise ValueError(f'{path}, line {number}: unknown token(s) {unknown}; regenerate the set '
                       '(data/generate_listops.py).')
    try:
      value = listops.evaluate_expression(fields[0])
    except ValueError as e:
      raise ValueError(f'{path}, line {number}: the expression is not one complete tree ({e}); '
                       'regenerate the set (data/generate_listops.py).') from None
    if value != int(fields[1]):
      raise ValueError(f'{path}, line {number}: the expression evaluates to {value}, its label is '
                       f'{fields[1]}; regenerate the set (data/generate_listops.py).')
    rows.append((tokens, fields[1]))
  if not rows:
    raise ValueError(f'{path} holds no expression; regenerate the set (data/generate_listops.py).')
  return rows


def first_token_baseline(folder) -> tuple[float, float]:
  """(the test split's majority-class rate, as the probe's, and the best guess from the first
  token alone), test accuracy in percent, of a
  ListOps set (basic_train.tsv / basic_test.tsv in `folder`): the outermost operator's most
  frequent value in training, predicted for every test expression with that operator. What a
  model gets from a window of one token at the start."""
  return first_token_scores(listops_expressions(folder, 'train'),
                            listops_expressions(folder, 'test'))


def first_token_scores(train_rows, test_rows) -> tuple[float, float]:
  """first_token_baseline on rows already read (listops_expressions)."""
  train = [(tokens[0], v) for tokens, v in train_rows]
  test = [(tokens[0], v) for tokens, v in test_rows]
  by_operator = {}
  for operator, value in train:
    counts = by_operator.setdefault(operator, {})
    counts[value] = counts.get(value, 0) + 1
  guess = {op: max(counts, key=counts.get) for op, counts in by_operator.items()}
  overall = {}
  for _, value in test:
    overall[value] = overall.get(value, 0) + 1
  return (100 * max(overall.values()) / len(test),
          100 * sum(guess.get(op) == v for op, v in test) / len(test))


def read_prefix(tokens: list[str], window: int) -> tuple[list, int | None]:
  """The first `window` tokens of a ListOps expression (tokens without parentheses) as (its open
  operator nodes, outermost first, each (operator, its closed children's values); the
  expression's value where the window closes it, else None)."""
  from lra_luna.datasets import listops  # pylint: disable=import-outside-toplevel
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


def completion_labels(tokens: list[str], window: int, settings: dict, rng,
                      samples: int) -> list[int]:
  """Labels of `samples` completions of an expression's first `window` tokens, drawn from LRA's
  generator (lra_luna.datasets.listops) conditioned on that prefix: each open node's arity
  uniform over what its seen children allow, further arguments drawn as the generator draws
  them at their depth, and only completions whose length the set keeps (min_length < tokens <
  max_length, the generation record's `settings`). The share of the most frequent label is
  the best a reader of those tokens can score on that expression (the Bayes rule), up to
  sampling noise."""
  from lra_luna.datasets import listops  # pylint: disable=import-outside-toplevel
  max_depth, max_args = settings['max_depth'], settings['max_args']
  stack, value = read_prefix(tokens, window)
  if value is not None:  # the window holds the whole expression
    return [value] * samples
  uniforms = iter(rng.random(1 << 20).tolist())
  length = 0

  def subtree(depth):  # the generator's node(): its draws in its order, its length count
    nonlocal length
    length += 1
    if length >= settings['max_length']:
      raise OverflowError
    if depth < max_depth and next(uniforms) < listops.OPERATOR_PROBABILITY:
      arity = listops.MIN_ARGS + int(next(uniforms) * (max_args - listops.MIN_ARGS + 1))
      operator = listops.OPERATORS[int(next(uniforms) * len(listops.OPERATORS))]
      values = [subtree(depth + 1) for _ in range(arity)]
      length += 1
      return listops.apply_operator(operator, values)
    return int(next(uniforms) * listops.NUM_CLASSES)

  labels = []
  for _ in range(100 * samples):  # a prefix that few kept lengths complete returns fewer
    if len(labels) == samples:
      break
    length = min(window, len(tokens))
    open_child = None
    try:
      for depth, (operator, values) in reversed(list(enumerate(stack, start=1))):
        children = [*values, *([] if open_child is None else [open_child])]
        low = max(listops.MIN_ARGS, len(children))
        arity = low + int(next(uniforms) * (max_args - low + 1))
        children += [subtree(depth + 1) for _ in range(arity - len(children))]
        length += 1  # its `]`
        open_child = listops.apply_operator(operator, children)
    except OverflowError:
      continue
    except StopIteration:
      uniforms = iter(rng.random(1 << 20).tolist())
      continue
    if settings['min_length'] < length < settings['max_length']:
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
      counts = np.bincount(labels, minlength=10)
      right.append(counts.argmax() == int(value))
      top.append(counts.max() / len(labels))
    if not right:
      raise ValueError(f'no test expression could be completed at window {window}.')
    accuracy = float(np.mean(right))
    half_width = 1.96 * math.sqrt(accuracy * (1 - accuracy) / len(right))
    rows.append((window, 100 * accuracy, 100 * half_width, 100 * float(np.mean(top))))
  return rows


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
  from lra_luna.datasets import listops  # pylint: disable=import-outside-toplevel
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


def circle_distance_baseline(root, resolution: int, difficulty: str) -> tuple[float, float]:
  """(the test split's majority-class rate, and the accuracy of one threshold on the circles'
  distance), test accuracy in percent, of the Pathfinder set <root>/pathfinder<res>/<difficulty
  folder> split as training splits it: 'connected' when the circles are closer than the
  threshold that is best on the training split; the majority class where no two circles are
  found. By construction a positive's circles are the two ends of one path (at most its span
  apart) and a negative's the ends of two paths, so the distance alone carries some of the label
  where paths are short."""
  from lra_luna.datasets import pathfinder  # pylint: disable=import-outside-toplevel
  arrays = pathfinder.read_pathfinder(root, resolution, difficulty)
  splits = pathfinder.split_in_file_order(arrays[0], arrays[1])
  train, test = splits['train'], splits['test']
  test_majority = np.bincount(test['targets'], minlength=2).max() / len(test['targets'])
  return 100 * float(test_majority), 100 * threshold_accuracy(
      circle_distances(train['inputs'], resolution), train['targets'],
      circle_distances(test['inputs'], resolution), test['targets'])


def threshold_accuracy(train_distance, train_labels, test_distance, test_labels) -> float:
  """Test accuracy of predicting 1 ('connected') below the distance threshold that is best on
  the training pairs, and the training majority class where a distance is NaN."""
  majority = int(np.bincount(train_labels, minlength=2).argmax())
  def predict(distance, threshold):
    return np.where(np.isnan(distance), majority, distance < threshold)
  thresholds = np.unique(train_distance[~np.isnan(train_distance)])
  threshold = max(thresholds, key=lambda t: np.mean(predict(train_distance, t) == train_labels))
  return float(np.mean(predict(test_distance, threshold) == test_labels))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('folder', help='a folder of run folders, or a record CSV (--record)')
  parser.add_argument('--checkpoint', choices=tuple(runs_lib.CHECKPOINTS), default='best')
  parser.add_argument('--figure', default='', help='write the figure here (.png)')
  parser.add_argument('--record', default='',
                      help="merge the folder's runs into this record CSV (e.g. "
                      'docs/mid_results.csv), which can stand in for the folder later')
  parser.add_argument('--size', default='',
                      help="only the runs of this size (their presets' size words, e.g. mid, "
                      'mid,long); needed for a record holding several')
  parser.add_argument('--listops_data', default='',
                      help='also print, for the ListOps set in this folder (e.g. '
                      'data/store/listops-mid), the majority class, the first-token baseline, '
                      'the masked-token baselines and the best reader of the first w tokens '
                      '(several minutes)')
  parser.add_argument('--pathfinder_data', default='',
                      help='also print the majority class and the circle-distance baseline of '
                      'the Pathfinder set under this root (e.g. data/store/pathfinder-mid)')
  parser.add_argument('--pathfinder_difficulty', default='easy',
                      help="that set's difficulty: easy | intermediate | hard (32 x 32)")
  args = parser.parse_args(argv)
  if args.pathfinder_data:
    try:
      majority, by_distance = circle_distance_baseline(args.pathfinder_data, 32,
                                                       args.pathfinder_difficulty)
    except (OSError, ValueError) as e:
      sys.exit(f'error: --pathfinder_data {args.pathfinder_data}: {e}')
    print(f'Pathfinder test set {args.pathfinder_data} ({args.pathfinder_difficulty}): majority '
          f'class {majority:.1f}%, one threshold on the distance between the two circles '
          f'{by_distance:.1f}%.')
  if args.listops_data:
    from lra_luna.datasets import listops  # pylint: disable=import-outside-toplevel
    try:
      train = listops_expressions(args.listops_data, 'train')
      test = listops_expressions(args.listops_data, 'test')
      majority, first = first_token_scores(train, test)
      masked = masked_token_baselines([t for t, _ in train], [t for t, _ in test])
      record = listops.generation_record(args.listops_data)
      # A release folder has no record: LRA's own settings made it, our generator's defaults.
      settings = record['settings'] if record else {
          name: parameter.default for name, parameter
          in inspect.signature(listops.generate_listops).parameters.items()}
      # 1 token, 1/8 of the median input and 1/8 of the longest kept (the probe's windows).
      windows = (1, max(1, sorted(len(t) for t, _ in test)[len(test) // 2] // 8),
                 max(1, settings['max_length'] // 8))
      bayes = start_window_bayes(test, windows, settings)
    except OSError as e:
      sys.exit(f'error: --listops_data {args.listops_data}: {e.strerror}: {e.filename}')
    except ValueError as e:
      sys.exit(f'error: --listops_data {args.listops_data}: {e}')
    print(f'ListOps test set {args.listops_data}: majority class {majority:.1f}%, the first '
          f'token (the outermost operator) alone {first:.1f}%.')
    print(f'ListOps masked tokens (test tokens): the most frequent token {masked["frequency"]:.1f}%, '
          f'the most frequent between the same two neighbours {masked["neighbours"]:.1f}%, '
          f'the ceiling of knowing each token\'s kind {masked["kind ceiling"]:.1f}%.')
    print('ListOps start windows (the best reader of the first w tokens, from completions drawn '
          'by the generator): ' + ', '.join(
              f'w = {w}: {accuracy:.1f}% ± {half:.1f} (mean top share {top:.1f}%)'
              for w, accuracy, half, top in bayes) + '; the whole input: 100%.')
  if pathlib.Path(args.folder).suffix == '.csv':
    groups, size = groups_of_record(args)
  else:
    groups, size = groups_of_folder(args)
  print(tables(groups))
  if args.figure:
    figure(groups, pathlib.Path(args.figure), size)
    print(f'figure: {args.figure}')
  return 0


def groups_of_record(args) -> tuple[dict, str]:
  """main's groups and size from a record CSV; exits in one line on a bad record."""
  if args.record:
    sys.exit(f'error: {args.folder} is a record already; --record takes a folder of runs.')
  try:
    rows = read_record(args.folder)
    sizes = sorted({row['size'] for row in rows})
    if not args.size and len(sizes) > 1:
      raise ValueError(f'{args.folder} holds runs of sizes {", ".join(sizes)}; choose one with '
                       '--size.')
    if not rows:
      raise ValueError(f'{args.folder} holds no run; write it with --record.')
    size = args.size or sizes[0]
    return record_groups(rows, args.folder, size, args.checkpoint), size
  except OSError as e:
    sys.exit(f'error: {args.folder}: {e.strerror}.')
  except ValueError as e:
    sys.exit(f'error: {e}')


def groups_of_folder(args) -> tuple[dict, str]:
  """main's groups and size from the run folders under args.folder (those of --size), after
  merging them into --record; exits in one line on a folder without finished runs."""
  try:
    results = runs_lib.load_results(args.folder)
  except (FileNotFoundError, ValueError) as e:
    sys.exit(f'error: {e}')
  if results and args.size:
    sizes = sorted({run_size(result) for result in results})
    results = [result for result in results if run_size(result) == args.size]
    if not results:
      sys.exit(f'error: {args.folder} holds no finished run of size {args.size!r}; its sizes: '
               f'{", ".join(sizes)} (--size).')
  if not results:
    sys.exit(f'error: {args.folder} holds no finished run (results.json); run '
             '`python -m lra_luna.campaign campaigns/mid.py --dir DIR` first.')
  if args.record:
    try:
      count = write_record(args.record, record_rows(results))
    except OSError as e:
      sys.exit(f'error: --record {args.record}: {e.strerror}.')
    except ValueError as e:
      sys.exit(f'error: --record: {e}')
    print(f'record: {len(results)} runs merged into {args.record} ({count} runs in it).')
  return (group_accuracies(results, args.checkpoint),
          ' / '.join(sorted({run_size(result) for result in results})))


if __name__ == '__main__':
  sys.exit(main())
