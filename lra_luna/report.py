"""Tables and figure of a sweep, beside the published numbers (registry.py, published.py).

  python -m lra_luna.report runs/sweep [--checkpoint best|last] [--profile profile.json]
                            [--out_dir runs/sweep/report]

Reads every results.json under the sweep folder (by its own task/model/head/seed keys, not its
path) and writes to out_dir (default SWEEP_DIR/report):
- table1.{md,tex,csv}: test accuracy per task and (model, head): mean ± sample std (ddof=1) over
  seeds with n; the average over the five tasks and without Retrieval; the papers' rows beside.
- table3.{md,tex,csv}: Luna's [CLS] (`cls`) vs mean-pooled final P (`mean_p`) on ListOps, Text,
  Retrieval, with their average.
- figure1.{png,pdf}: accuracy (y) vs training steps/s (x), circle area proportional to memory.
Accuracies are percent of the chosen checkpoint's test set; every table says which checkpoint.
A missing cell is '—' (empty in CSV), never 0; an average needs every one of its tasks.

Figure 1. y: the average without Retrieval (the paper's Figure 1) for the rows that have it;
if none has, the task with the most rows. x and circle area, with --profile: the profile's point
of each model at the longest length measured for all plotted models (else the longest there is).
Fields read per point (the file is a list of points, or {'points': [...]} as lra_luna/profile.py
writes): 'model', 'length'; speed 'steps_per_sec' or 'steps_per_s'; memory, the first of
'memory_bytes', 'device_peak_bytes', 'estimated_bytes' that every measured point has (none: one
circle size); a point with 'oom': true or a 'status' other than 'ok' is not measured. Others are
ignored. A profile of another task than y's is plotted with the mismatch stated in the title
(and on stderr). Without --profile: x = one speed per model, the median logged training steps/s
over all its runs behind y, every head and seed (metrics.jsonl; training-time speed, under
whatever load the machine had; a vmapped run logs the speed of all its seeds together), all
circles one size. Labels are moved apart where they would overlap.

Every caption (and the figure's title where any run was shortened) says how many steps the runs
trained against their protocol's steps and marks SHORTENED runs; CSV rows carry the same fields
(training_record: protocol, steps, protocol_steps, shortened, overrides).

A folder that lra_luna/campaign.py ran holds campaign.json: its facts (protocol, training steps,
data, and CUT SHORT with what falls short of the protocol) then close every table caption, sit
under the figure and fill a 'campaign' column of the CSVs.
"""

import argparse
import csv
import dataclasses
import functools
import json
import pathlib
import statistics
import sys
import textwrap

from lra_luna import config_lib
from lra_luna import published
from lra_luna import registry
from lra_luna.models.model_config import HEADS
from lra_luna.training import run_folder

TASK_NAMES = {'listops': 'ListOps', 'text': 'Text', 'retrieval': 'Retrieval', 'image': 'Image',
              'pathfinder': 'Pathfinder', 'pathx': 'Path-X'}
CHECKPOINTS = {'best': 'best checkpoint (highest validation accuracy)',
               'last': 'last checkpoint (end of training)'}
MISSING = '—'
AVG, AVG_NO_RETRIEVAL = 'avg', 'avg_no_retrieval'


# ----------------------------------------------------------------------------------------------
# Reading results.
# ----------------------------------------------------------------------------------------------
RESULT_KEYS = ('task', 'model', 'head', 'seed')


def load_results(sweep_dir) -> list[dict]:
  """Every results.json under sweep_dir, each with its folder as 'workdir'."""
  if not pathlib.Path(sweep_dir).is_dir():
    raise FileNotFoundError(f'{sweep_dir} is not a folder; give the --sweep_dir of a sweep (or '
                            'any folder holding run folders with results.json).')
  found, seen = [], {}
  for path in sorted(pathlib.Path(sweep_dir).rglob(run_folder.RESULTS_FILE)):
    try:
      result = json.loads(path.read_text())
    except ValueError as e:
      raise ValueError(f'{path}: not valid JSON ({e}); rerun that run, or remove it.') from None
    missing = [key for key in RESULT_KEYS if key not in result]
    if missing:
      raise ValueError(f'{path}: no {", ".join(missing)} field; not a results.json of '
                       'run_lra.py. Move it out of the sweep folder.')
    key = tuple(result[k] for k in RESULT_KEYS)
    if key in seen:
      # Averaging a run twice would weigh it double; the user must say which one counts.
      raise ValueError(f'Two results for task/model/head/seed {key}: {seen[key]} and {path}.')
    seen[key] = path
    found.append({**result, 'workdir': path.parent})
  return found


def accuracy_of(result: dict, checkpoint: str) -> float:
  """Test accuracy (percent) of the chosen checkpoint of one run."""
  if checkpoint not in result:
    raise ValueError(f"{result['workdir']} has no '{checkpoint}' section in its results.json.")
  return 100.0 * result[checkpoint]['test_accuracy']


# Fields that do not change how a run trains (where it runs, which seed, filled in from the
# data), so they are never reported as overrides of its protocol.
NOT_PROTOCOL_FIELDS = ('seed', 'data_dir', 'tfds_data_dir', 'progress_bar', 'model.head',
                       'model.attention', 'model.vocab_size', 'model.num_classes',
                       'model.max_length')


def flat_fields(config: dict, prefix: str = '') -> dict:
  """{'model.dim': 64, ...}: the leaves of a config loaded from JSON."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, dict) and value:
      flat.update(flat_fields(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


@functools.cache
def preset_fields(task: str, arg: str) -> dict | None:
  """The flat fields of configs/<task>.py:<arg> as written to config.json; None if that preset
  does not exist (e.g. a protocol the config file does not know)."""
  try:
    config = config_lib.load_config(f'{config_lib.CONFIG_DIR / task}.py:{arg}')
  except ValueError:
    return None
  return flat_fields(json.loads(config.to_json()))


def training_record(result: dict) -> dict:
  """How one run trained against its protocol: {'protocol', 'steps', 'protocol_steps',
  'shortened', 'overrides'} ('protocol_steps' and 'shortened' None when unknown).

  The protocol is config.json's `protocol` ('lra' when absent); its steps are the
  num_train_steps of the task config's preset before overrides (configs/<task>.py:<model>, or
  its ',quick' variant, whichever the run's config is closer to); 'overrides' lists the fields
  where the run's config.json differs from that preset ('key=value', NOT_PROTOCOL_FIELDS left
  out), so a `sweep --override num_train_steps=300` shows as shortened with its override.
  """
  steps = result.get('steps')
  record = {'protocol': 'lra', 'steps': steps, 'protocol_steps': None, 'shortened': None,
            'overrides': None}
  config_path = pathlib.Path(result['workdir']) / run_folder.CONFIG_FILE
  if not config_path.is_file():
    return record  # Not recorded: the report says so rather than guess.
  config = flat_fields(json.loads(config_path.read_text()))
  protocol = config.get('protocol') or 'lra'
  record['protocol'] = protocol
  model = config.get('model_name') or result['model']
  arguments = [model, f'{model},quick']
  if protocol != 'lra':
    arguments = [f'{a},{protocol}' for a in arguments] + arguments
  best = None
  for argument in arguments:
    preset = preset_fields(result['task'], argument)
    if preset is None or (preset.get('protocol') or 'lra') != protocol:
      continue
    differing = sorted(k for k in set(preset) | set(config)
                       if k not in NOT_PROTOCOL_FIELDS and preset.get(k) != config.get(k))
    if best is None or len(differing) < len(best[1]):
      best = (preset, differing)
  if best is None:
    return record
  preset, differing = best
  record['protocol_steps'] = preset['num_train_steps']
  record['steps'] = steps = config.get('num_train_steps', steps)
  record['shortened'] = steps is not None and steps < preset['num_train_steps']
  record['overrides'] = [f'{k}={json.dumps(config.get(k))}' for k in differing]
  return record


def describe_training(records: list[dict]) -> str:
  """One phrase for the runs of a table row (or any group of runs): steps trained of the
  protocol's steps, SHORTENED where fewer, and the overrides of the protocol."""
  phrases = []
  for record in dict.fromkeys(json.dumps(r, sort_keys=True) for r in records):
    record = json.loads(record)
    if record['protocol_steps'] is None:
      phrases.append(f'{record["steps"]} steps ({record["protocol"]}), protocol steps unknown')
      continue
    text = f'{record["steps"]}/{record["protocol_steps"]} steps ({record["protocol"]})'
    if record['shortened']:
      text += ' SHORTENED'
    if record['overrides']:
      text += '; overrides: ' + ' '.join(record['overrides'])
    phrases.append(text)
  return ' | '.join(phrases)


def describe_data(data: dict | None) -> tuple[tuple, str]:
  """(what identifies the data a run read, its description in words) from results.json 'data'.
  Paths differ between machines, so they describe the data but do not identify it."""
  if not data:
    return ('unrecorded',), 'not recorded (a results.json from before data provenance)'
  source, counts = data['source'], json.dumps(data.get('examples'), sort_keys=True)
  if source == 'generated':
    settings = (data.get('generator') or {}).get('settings', {})
    words = ', '.join(f'{k} {v}' for k, v in sorted(settings.items()))
    return (source, json.dumps(settings, sort_keys=True), counts), f'generated ({words})'
  if source == 'tfds':
    versions = tuple(data.get('versions', ()))
    return (source, data['name'], versions, counts), f'TFDS {data["name"]} {", ".join(versions)}'
  return (source, counts), f'LRA release ({data["path"]})'


def data_sources(results: list[dict]) -> dict:
  """{task: description of the data its runs read}. ValueError when runs of one task read
  different data: their accuracies would share a table without being comparable."""
  by_task = {}
  for r in results:
    identity, words = describe_data(r.get('data'))
    first = by_task.setdefault(r['task'], (identity, words, r['workdir']))
    if first[0] != identity:
      raise ValueError(f"{r['task']} runs read different data: {first[2]} read {first[1]}, "
                       f"{r['workdir']} read {words}. Report them from separate folders.")
  return {task: words for task, (_, words, _) in by_task.items()}


@dataclasses.dataclass(frozen=True)
class Cell:
  """A test accuracy (percent): a mean over n seeds and their sample std (None for one seed, a
  published number or an average over tasks)."""
  mean: float
  std: float | None = None
  n: int | None = None


def seed_statistics(accuracies: list[float]) -> Cell:
  std = statistics.stdev(accuracies) if len(accuracies) > 1 else None
  return Cell(statistics.fmean(accuracies), std, len(accuracies))


def summarize(results: list[dict], checkpoint: str) -> dict:
  """{(model, head): {task: Cell}} over seeds."""
  grouped = {}
  for r in results:
    grouped.setdefault((r['model'], r['head']), {}).setdefault(r['task'], []).append(
        accuracy_of(r, checkpoint))
  return {key: {task: seed_statistics(accs) for task, accs in tasks.items()}
          for key, tasks in grouped.items()}


def average(cells: dict, tasks) -> Cell | None:
  """Mean of the task means; None unless every task is there."""
  if any(cells.get(t) is None for t in tasks):
    return None
  return Cell(statistics.fmean(cells[t].mean for t in tasks))


def row_order(key):
  """Models in config_lib.MODELS order, then heads in HEADS order."""
  model, head = key
  models = list(config_lib.MODELS)
  return (models.index(model) if model in models else len(models), model,
          HEADS.index(head) if head in HEADS else len(HEADS), head)


# ----------------------------------------------------------------------------------------------
# Tables.
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
  label: str
  head: str
  source: str          # 'ours' or 'paper, table'
  values: dict         # column key -> Cell
  group: int           # rows of one group sit together between rules
  training: list | None = None  # ours: training_record of each run behind the row


@dataclasses.dataclass
class Table:
  name: str            # file stem
  title: str
  columns: list        # [(key, header)]
  rows: list
  notes: list = dataclasses.field(default_factory=list)  # lines under the table (markdown)


def published_row(entry: published.PublishedRow, group: int, columns) -> Row:
  """A paper's row; its head is blank where the paper ran its own protocol."""
  values = {t: Cell(v) for t, v in entry.accuracy.items()}
  for key, value in ((AVG, entry.average), (AVG_NO_RETRIEVAL, entry.average_no_retrieval)):
    if value is not None and key in dict(columns):
      values[key] = Cell(value)
  return Row(entry.label, entry.head or '', f'{entry.paper}, {entry.table}', values, group)


def training_records(results: list[dict], tasks) -> dict:
  """{(model, head): [training_record of each of its runs on `tasks`]}."""
  records = {}
  for r in results:
    if r['task'] in tasks:
      records.setdefault((r['model'], r['head']), []).append(training_record(r))
  return records


def training_title(rows: list[Row]) -> str:
  """The caption's sentence on training length: every table says it, shortened or not."""
  ours = [r for r in rows if r.training is not None]
  shortened = [r for r in ours if any(t['shortened'] for t in r.training)]
  unknown = [r for r in ours if any(t['protocol_steps'] is None for t in r.training)]
  records = [t for r in ours for t in r.training]
  text = (' Ours trained (steps / the protocol\'s steps, its config before overrides; per row '
          f'in the Training column): {describe_training(records) or MISSING}.')
  if shortened:
    text += (f' SHORTENED: {len(shortened)} of our {len(ours)} rows trained fewer steps than '
             'their protocol; they are not comparable with full runs or the papers\' rows.')
  elif ours and not unknown:
    text += ' Every row of ours trained its protocol\'s full steps.'
  if unknown:
    text += (f' {len(unknown)} rows have runs whose protocol steps are unknown (no config.json, '
             'or no preset of their protocol in configs/).')
  return text


def table1(summary: dict, checkpoint: str, training: dict | None = None) -> Table:
  tasks = list(published.TASKS)
  if any('pathx' in cells for cells in summary.values()):
    tasks.append('pathx')  # Shown when run; not in the averages, as in the papers.
  no_retrieval = [t for t in published.TASKS if t != 'retrieval']
  columns = ([(t, TASK_NAMES[t]) for t in tasks] +
             [(AVG, 'Avg.'), (AVG_NO_RETRIEVAL, 'Avg. (w/o Retrieval)')])
  rows = []
  for group, (model, head) in enumerate(sorted(summary, key=row_order)):
    cells = summary[(model, head)]
    rows.append(Row(model, head, 'ours', {**cells, AVG: average(cells, published.TASKS),
                                          AVG_NO_RETRIEVAL: average(cells, no_retrieval)}, group,
                    (training or {}).get((model, head), [])))
    rows += [published_row(p, group, columns)
             for p in published.matching(registry.table1_rows(), model, head)]
  notes = [f'{r.label} ({r.paper}): {r.note}' for r in registry.table1_rows()
           if r.note and any(row.label == r.label for row in rows)]
  title = (f'Table 1: LRA test accuracy (%), {CHECKPOINTS[checkpoint]}; ours: mean ± sample std '
           'over seeds (n seeds); averages over tasks of the task means.')
  return Table('table1', title + training_title(rows), columns, rows, notes)


def table3(summary: dict, checkpoint: str, training: dict | None = None) -> Table:
  tasks = published.CLS_VS_P_TASKS
  columns = [(t, TASK_NAMES[t]) for t in tasks] + [(AVG, 'Avg.')]
  # The models with a P to pool (a plug-in is no registry entry and has none).
  luna_models = sorted({m for m, _ in summary
                        if m in registry.MODELS and 'mean_p' in registry.MODELS[m].heads},
                       key=lambda m: row_order((m, '')))
  rows = []
  for group, model in enumerate(luna_models):
    for head in ('cls', 'mean_p'):
      cells = {t: c for t, c in summary.get((model, head), {}).items() if t in tasks}
      rows.append(Row(model, head, 'ours', {**cells, AVG: average(cells, tasks)}, group,
                      (training or {}).get((model, head), [])))
    rows += [published_row(p, group, columns)
             for p in published.TABLE3 if p.model == model]
  title = (f'Table 3: [CLS] (cls) vs mean-pooled P (mean_p), test accuracy (%), '
           f'{CHECKPOINTS[checkpoint]}; ours: mean ± sample std over seeds (n seeds).')
  return Table('table3', title + training_title(rows), columns, rows)


def format_cell(cell: Cell | None, plus_minus: str) -> str:
  if cell is None:
    return MISSING
  text = f'{cell.mean:.2f}'
  if cell.std is not None:
    text += f' {plus_minus} {cell.std:.2f}'
  if cell.n is not None:
    text += f' ({cell.n})'
  return text


def training_cell(row: Row) -> str:
  return '' if row.training is None else describe_training(row.training) or MISSING


def to_markdown(table: Table) -> str:
  header = ['Model', 'Head', 'Source'] + [h for _, h in table.columns] + ['Training']
  lines = [table.title, '', '| ' + ' | '.join(header) + ' |',
           '|' + '---|' * 3 + '---:|' * len(table.columns) + '---|']
  for row in table.rows:
    cells = [format_cell(row.values.get(k), '±') for k, _ in table.columns]
    lines.append('| ' + ' | '.join([row.label, row.head, row.source] + cells
                                   + [training_cell(row)]) + ' |')
  lines += ['', *table.notes] if table.notes else []
  return '\n'.join(lines) + '\n'


def latex_escape(text: str) -> str:
  return text.replace('\\', r'\textbackslash{}').replace('_', r'\_').replace('&', r'\&') \
             .replace('%', r'\%').replace('#', r'\#')


def to_latex(table: Table) -> str:
  header = ['Model', 'Head', 'Source'] + [h for _, h in table.columns] + ['Training']
  lines = [r'\begin{table}', r'\centering', r'\small',
           r'\caption{' + latex_escape(table.title).replace('±', r'$\pm$') + '}',
           r'\label{tab:' + table.name + '}',
           r'\begin{tabular}{lll' + 'r' * len(table.columns) + 'l}', r'\toprule',
           ' & '.join(latex_escape(h) for h in header) + r' \\', r'\midrule']
  for i, row in enumerate(table.rows):
    if i and row.group != table.rows[i - 1].group:
      lines.append(r'\midrule')
    cells = [format_cell(row.values.get(k), r'$\pm$').replace(MISSING, '--')
             for k, _ in table.columns]
    lines.append(' & '.join([latex_escape(row.label), latex_escape(row.head),
                             latex_escape(row.source)] + cells
                            + [latex_escape(training_cell(row))]) + r' \\')
  lines += [r'\bottomrule', r'\end{tabular}', r'\end{table}']
  return '\n'.join(lines) + '\n'


def write_csv(table: Table, checkpoint: str, path: pathlib.Path) -> None:
  """One row per table row; per column its mean, std and n (empty where missing); for ours,
  how it trained (training_record's fields; ' | ' between differing runs of one row)."""
  fields = ['model', 'head', 'source', 'checkpoint']
  for key, _ in table.columns:
    fields += [f'{key}_mean', f'{key}_std', f'{key}_n']
  training_fields = ['protocol', 'steps', 'protocol_steps', 'shortened', 'overrides']
  fields += training_fields
  with path.open('w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(fields)
    for row in table.rows:
      line = [row.label, row.head, row.source, checkpoint if row.source == 'ours' else '']
      for key, _ in table.columns:
        cell = row.values.get(key)
        line += ['', '', ''] if cell is None else [
            f'{cell.mean:.4f}', '' if cell.std is None else f'{cell.std:.4f}',
            '' if cell.n is None else cell.n]
      for name in training_fields:
        values = [t[name] for t in row.training or []]
        values = [' '.join(v) if isinstance(v, list) else '' if v is None else str(v)
                  for v in values]
        line.append(' | '.join(dict.fromkeys(values)))
      writer.writerow(line)


def write_table(table: Table, checkpoint: str, out_dir: pathlib.Path) -> list[pathlib.Path]:
  paths = [out_dir / f'{table.name}.{ext}' for ext in ('md', 'tex', 'csv')]
  paths[0].write_text(to_markdown(table))
  paths[1].write_text(to_latex(table))
  write_csv(table, checkpoint, paths[2])
  return paths


# ----------------------------------------------------------------------------------------------
# Figure 1.
# ----------------------------------------------------------------------------------------------
SPEED_KEYS = ('steps_per_sec', 'steps_per_s')
MEMORY_KEYS = {'memory_bytes': 'peak memory', 'device_peak_bytes': 'device peak memory',
               'estimated_bytes': 'XLA memory estimate'}


def measured_points(profile) -> tuple[list[dict], str | None]:
  """(points as {'model', 'length', 'steps_per_sec', 'memory_bytes'}, the memory field read) of a
  loaded profile JSON; see the module docstring for the fields."""
  points = profile.get('points', []) if isinstance(profile, dict) else profile
  measured = []
  for p in points:
    speed = next((p[k] for k in SPEED_KEYS if p.get(k) is not None), None)
    if (speed is not None and 'model' in p and 'length' in p and not p.get('oom')
        and p.get('status', 'ok') == 'ok'):
      measured.append({**p, 'steps_per_sec': speed})
  # One memory kind for every circle, else sizes would not compare.
  memory_key = next((k for k in MEMORY_KEYS if measured and all(p.get(k) for p in measured)),
                    None)
  return [{'model': p['model'], 'length': p['length'], 'steps_per_sec': p['steps_per_sec'],
           'memory_bytes': p.get(memory_key)} for p in measured], memory_key


def figure_accuracy(summary: dict) -> tuple[str, str | None, dict]:
  """(y label, its task or None for the average, {(model, head): accuracy}); see the module
  docstring."""
  no_retrieval = [t for t in published.TASKS if t != 'retrieval']
  averages = {k: average(c, no_retrieval) for k, c in summary.items()}
  averages = {k: c.mean for k, c in averages.items() if c is not None}
  if averages:
    return 'avg. test accuracy w/o Retrieval (%)', None, averages
  counts = {t: sum(t in c for c in summary.values()) for t in TASK_NAMES}
  task = max(TASK_NAMES, key=lambda t: counts[t])  # Ties go to the earlier task.
  return (f'{TASK_NAMES[task]} test accuracy (%)', task,
          {k: c[task].mean for k, c in summary.items() if task in c})


def profile_speeds(points: list[dict], models) -> tuple[str, dict]:
  """(x label, {model: (steps/s, memory bytes or None)}) at one length for every model."""
  lengths_of = {m: {p['length'] for p in points if p['model'] == m} for m in models}
  measured = [ls for ls in lengths_of.values() if ls]
  common = set.intersection(*measured) if measured else set()
  every = set().union(*measured) if measured else set()
  if not every:
    return 'training steps/s', {}
  length = max(common or every)
  at_length = {p['model']: p for p in points if p['length'] == length and p['model'] in models}
  return (f'training steps/s at length {length} (profile)',
          {m: (p['steps_per_sec'], p.get('memory_bytes')) for m, p in at_length.items()})


def logged_speed(result: dict) -> float | None:
  """Median logged training steps/s of a run, without its first interval (it holds the compile)
  where there are others."""
  speeds = [row['steps_per_sec'] for row in
            run_folder.read_jsonl(result['workdir'] / run_folder.METRICS_FILE)
            if 'steps_per_sec' in row]
  return statistics.median(speeds[1:] or speeds) if speeds else None


def model_speeds(results: list[dict], models, task: str | None) -> dict:
  """{model: one training steps/s}: the median logged speed over all of the model's runs (every
  head and seed; of `task`, or of every task when None), so that one model sits at one x."""
  speeds = {}
  for model in models:
    logged = [logged_speed(r) for r in results
              if r['model'] == model and (task is None or r['task'] == task)]
    logged = [s for s in logged if s is not None]
    if logged:
      speeds[model] = statistics.median(logged)
  return speeds


def profile_mismatch(profile: dict | list, y_task: str | None) -> str | None:
  """A sentence when the profile measured another task than the accuracy's, else None."""
  task = profile.get('task') if isinstance(profile, dict) else None
  if task is None:
    return 'the profile does not say its task: speed may be of another task than the accuracy'
  if task != y_task:
    accuracy = TASK_NAMES[y_task] if y_task else 'the average over tasks'
    return (f'task mismatch: speed and memory from a {TASK_NAMES.get(task, task)} profile, '
            f'accuracy of {accuracy}')
  return None


# Label offsets (points) tried in turn, the first that overlaps no earlier label wins.
LABEL_OFFSETS = [(dx, dy) for dy in (8, -16, 22, -30, 36, -44) for dx in (8, -8)]


def place_labels(fig, ax, labels) -> list:
  """Annotations of (text, x, y) that do not overlap each other nor leave the figure (the first
  free offset)."""
  renderer = fig.canvas.get_renderer()
  placed, boxes = [], []
  for text, x, y in labels:
    for dx, dy in LABEL_OFFSETS:
      annotation = ax.annotate(text, (x, y), textcoords='offset points', xytext=(dx, dy),
                               fontsize=8, ha='left' if dx > 0 else 'right')
      box = annotation.get_window_extent(renderer)
      inside = fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1
      free = inside and not any(box.overlaps(other) for other in boxes)
      if free or (dx, dy) == LABEL_OFFSETS[-1]:
        break
      annotation.remove()
    placed.append(annotation)
    boxes.append(box)
  return placed


def figure1(summary: dict, results: list[dict], profile: dict | list | None, checkpoint: str,
            caption: str = ''):
  """Figure 1 as a matplotlib figure; `profile` is the loaded profile JSON or None; `caption`
  is written under the plot."""
  import matplotlib
  matplotlib.use('Agg')  # Files only, no display.
  from matplotlib import pyplot as plt

  y_label, y_task, accuracy = figure_accuracy(summary)
  points = {}  # (model, head) -> (x, y, memory or None)
  memory_key, notes = None, []
  if profile is not None:
    profile_points, memory_key = measured_points(profile)
    x_label, speeds = profile_speeds(profile_points, {m for m, _ in accuracy})
    for (model, head), y in accuracy.items():
      if model in speeds:
        points[(model, head)] = (speeds[model][0], y, speeds[model][1])
    mismatch = profile_mismatch(profile, y_task)
    if mismatch:
      notes.append(mismatch.upper())
      print(f'Figure 1: {mismatch}.', file=sys.stderr)
  else:
    x_label = ('training steps/s: median logged over all runs of each model (no --profile; '
               'speed under the load of training time)')
    speeds = model_speeds(results, {m for m, _ in accuracy}, y_task)
    points = {(model, head): (speeds[model], y, None)
              for (model, head), y in accuracy.items() if model in speeds}
  left_out = sorted(set(accuracy) - set(points), key=row_order)
  if left_out:
    print(f'Figure 1 leaves out (no speed measured): {left_out}', file=sys.stderr)
  plotted = [training_record(r) for r in results if (r['model'], r['head']) in points
             and (y_task is None or r['task'] == y_task)]
  if any(t['shortened'] for t in plotted):
    notes.append('Training: ' + describe_training(
        [{**t, 'overrides': None} for t in plotted]))

  fig, ax = plt.subplots(figsize=(6, 4.5))
  memories = [m for _, _, m in points.values() if m]
  biggest = max(memories) if memories else None
  several_heads = {m for m, _ in points if sum(mm == m for mm, _ in points) > 1}
  labels = []
  for (model, head), (x, y, memory) in sorted(points.items(), key=lambda kv: row_order(kv[0])):
    area = 2000.0 * memory / biggest if memory and biggest else 200.0  # area ∝ memory
    ax.scatter([x], [y], s=area, alpha=0.5, edgecolors='black')
    label = f'{model} [{head}]' if model in several_heads else model
    if memory:
      label += f'\n{memory / 2**30:.2f} GiB'
    labels.append((label, x, y))
  if not points:
    ax.text(0.5, 0.5, 'no points: no speed measured for any model', ha='center',
            transform=ax.transAxes)
  ax.set_xlabel(textwrap.fill(x_label, 80), fontsize=8 if profile is None else None)
  ax.set_ylabel(y_label)
  size_note = (f'circle area ∝ {MEMORY_KEYS[memory_key]}' if memories and memory_key
               else 'no memory measured')
  ax.set_title('\n'.join([f'Figure 1: accuracy ({checkpoint} checkpoint) vs speed; {size_note}',
                          *(textwrap.fill(n, 90) for n in notes)]), fontsize=8)
  ax.margins(0.2)
  if caption:
    caption = textwrap.fill(caption, 110)
    fig.text(0.01, 0.01, caption, fontsize=6, va='bottom')
    fig.tight_layout(rect=(0, 0.04 + 0.025 * caption.count('\n'), 1, 1))
  else:
    fig.tight_layout()
  place_labels(fig, ax, labels)  # After the layout, which moves the points.
  return fig


def write_figure(summary: dict, results: list[dict], profile: dict | list | None,
                 checkpoint: str, out_dir: pathlib.Path,
                 caption: str = '') -> list[pathlib.Path]:
  """figure1.png and .pdf; `profile` is the loaded profile JSON or None."""
  from matplotlib import pyplot as plt
  fig = figure1(summary, results, profile, checkpoint, caption)
  paths = [out_dir / 'figure1.png', out_dir / 'figure1.pdf']
  for path in paths:
    fig.savefig(path, dpi=150)
  plt.close(fig)
  return paths


# ----------------------------------------------------------------------------------------------
# Campaign facts: a folder that lra_luna/campaign.py ran holds campaign.json; every caption, the
# figure and the CSVs then state its protocol, data and steps, and whether it was cut short.
# ----------------------------------------------------------------------------------------------
CAMPAIGN_FILE = 'campaign.json'


def campaign_note(sweep_dir, sources: dict) -> str:
  """The campaign's facts in one sentence ('' for a folder that no campaign wrote)."""
  path = pathlib.Path(sweep_dir) / CAMPAIGN_FILE
  if not path.exists():
    return ''
  facts = json.loads(path.read_text())['facts']
  steps = ', '.join(f'{TASK_NAMES[t]} ' + ' / '.join(str(ours) for ours, _ in pairs)
                    for t, pairs in sorted(facts['steps'].items()))
  data = '; '.join(f'{TASK_NAMES[t]}: {words}' for t, words in sorted(sources.items()))
  short = facts['cut_short']
  return (f"Campaign {facts['name']}, protocol {facts['protocol']}; training steps: {steps}; "
          f'data: {data}. ' + (f'CUT SHORT: {"; ".join(short)}.' if short
                               else 'Full protocol (its steps and seeds).'))


def add_campaign_column(csv_path: pathlib.Path, note: str) -> None:
  """Adds a 'campaign' column to a written table CSV: the note on our rows, empty on the papers'."""
  with csv_path.open(newline='') as f:
    rows = list(csv.reader(f))
  source = rows[0].index('source')
  rows = [rows[0] + ['campaign']] + [row + [note if row[source] == 'ours' else '']
                                     for row in rows[1:]]
  with csv_path.open('w', newline='') as f:
    csv.writer(f).writerows(rows)


# ----------------------------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------------------------
def load_profile(path) -> dict | list:
  """The profile JSON for --profile; one line naming the flag, that it is optional and the
  command that makes the file, when it is missing or unreadable."""
  path = pathlib.Path(path)
  make = (f'python -m lra_luna.profile --out_dir {path.parent} (README, "Efficiency profiler") '
          'makes it')
  if not path.is_file():
    raise FileNotFoundError(f'--profile {path}: no such file. --profile is optional (without it '
                            f'Figure 1 uses the runs\' logged training speed); {make}.')
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise ValueError(f'--profile {path}: not valid JSON ({e}); {make}.') from None


def make_report(sweep_dir, checkpoint: str = 'last', profile=None, out_dir=None) -> list:
  """Writes the tables and the figure; returns the paths written."""
  if checkpoint not in CHECKPOINTS:
    raise ValueError(f'checkpoint = {checkpoint!r}; valid choices: {list(CHECKPOINTS)}.')
  profile = load_profile(profile) if profile else None  # Before any work: a typo fails fast.
  results = load_results(sweep_dir)
  if not results:
    raise FileNotFoundError(f'No {run_folder.RESULTS_FILE} under {sweep_dir}.')
  out_dir = pathlib.Path(out_dir or pathlib.Path(sweep_dir) / 'report')
  out_dir.mkdir(parents=True, exist_ok=True)
  summary = summarize(results, checkpoint)
  sources = data_sources(results)
  note = campaign_note(sweep_dir, sources)
  paths = []
  tables = (table1(summary, checkpoint, training_records(results, TASK_NAMES)),
            table3(summary, checkpoint, training_records(results, published.CLS_VS_P_TASKS)))
  for table in tables:
    tasks = [key for key, _ in table.columns if key in sources]
    table.notes.insert(0, 'Data: ' + '; '.join(f'{TASK_NAMES[t]}: {sources[t]}' for t in tasks)
                       + '.')
    table.title += f' {note}' if note else ''
    paths += write_table(table, checkpoint, out_dir)
    if note:
      add_campaign_column(paths[-1], note)
  paths += write_figure(summary, results, profile, checkpoint, out_dir, caption=note)
  return paths


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m lra_luna.report', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('sweep_dir', help='folder searched for results.json files')
  parser.add_argument('--checkpoint', choices=list(CHECKPOINTS), default='last',
                      help='which test numbers: of the last or the best-on-validation checkpoint')
  parser.add_argument('--profile', help='optional: profile.json of python -m lra_luna.profile, '
                      "for Figure 1's speed and memory (without it: the runs' logged speed)")
  parser.add_argument('--out_dir', help='output folder (default: SWEEP_DIR/report)')
  args = parser.parse_args(argv)
  try:
    paths = make_report(args.sweep_dir, args.checkpoint, args.profile, args.out_dir)
  except (ValueError, FileNotFoundError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  for path in paths:
    if path.suffix == '.md':
      print(path.read_text())
  print('Wrote ' + ', '.join(str(p) for p in paths))
  return 0


if __name__ == '__main__':
  sys.exit(main())
