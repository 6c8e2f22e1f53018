"""Figure 1: test accuracy (y) vs training steps/s (x), circle area proportional to memory; the
speed and memory of a profile (lra_luna/profile) or, without one, the runs' logged speed.
See lra_luna/report/__init__.py for what is read and plotted."""

import pathlib
import statistics
import sys
import textwrap

from lra_luna import config_lib
from lra_luna import published
from lra_luna import registry
from lra_luna.report.runs import TASK_NAMES, average, describe_training, is_shortened, row_order
from lra_luna.training import run_folder

SPEED_KEY = 'steps_per_s'  # of profile points and of metrics.jsonl rows
MEMORY_KEYS = {'memory_bytes': 'peak memory', 'device_peak_bytes': 'device peak memory',
               'estimated_bytes': 'XLA memory estimate'}


def measured_points(profile) -> tuple[list[dict], str | None]:
  """(points as {'model', 'length', 'steps_per_s', 'memory_bytes'}, the memory field read) of a
  loaded profile JSON; see the package docstring for the fields."""
  points = profile.get('points', []) if isinstance(profile, dict) else profile
  measured = [p for p in points if p.get(SPEED_KEY) is not None and 'model' in p
              and 'length' in p and not p.get('oom') and p.get('status', 'ok') == 'ok']
  # One memory kind for every circle, else sizes would not compare.
  memory_key = next((k for k in MEMORY_KEYS if measured and all(p.get(k) for p in measured)),
                    None)
  return [{'model': p['model'], 'length': p['length'], SPEED_KEY: p[SPEED_KEY],
           'memory_bytes': p.get(memory_key)} for p in measured], memory_key


def figure_accuracy(summary: dict) -> tuple[str, str | None, dict]:
  """(y label, its task or None for the average, {(model, head): accuracy}): the average
  without Retrieval where rows have it, else the task with the most rows."""
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
          {m: (p[SPEED_KEY], p.get('memory_bytes')) for m, p in at_length.items()})


def logged_speed(result: dict) -> float | None:
  """Median logged training steps/s of a run, without its first interval (it holds the compile)
  where there are others."""
  speeds = [row[SPEED_KEY] for row in
            run_folder.read_jsonl(result['workdir'] / run_folder.METRICS_FILE)
            if SPEED_KEY in row]
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


def figure_points(summary: dict, results: list[dict], profile) -> dict:
  """What Figure 1 plots: {'points': {(model, head): (x, y, memory or None)}, 'x_label',
  'y_label', 'y_task', 'memory_key', 'notes' (title lines: a task mismatch, shortened runs)}."""
  y_label, y_task, accuracy = figure_accuracy(summary)
  models = {m for m, _ in accuracy}
  memory_key, notes = None, []
  if profile is not None:
    profile_points, memory_key = measured_points(profile)
    x_label, speeds = profile_speeds(profile_points, models)
    mismatch = profile_mismatch(profile, y_task)
    if mismatch:
      notes.append(mismatch.upper())
      print(f'Figure 1: {mismatch}.', file=sys.stderr)
  else:
    x_label = ('training steps/s: median logged over all runs of each model (no --profile; '
               'speed under the load of training time)')
    speeds = {m: (s, None) for m, s in model_speeds(results, models, y_task).items()}
  points = {(model, head): (speeds[model][0], y, speeds[model][1])
            for (model, head), y in accuracy.items() if model in speeds}
  left_out = sorted(set(accuracy) - set(points), key=row_order)
  if left_out:
    print(f'Figure 1 leaves out (no speed measured): {left_out}', file=sys.stderr)
  if any(model.endswith(config_lib.SPT_SUFFIX) for model, _ in points):
    notes.append(f'x of the {config_lib.SPT_SUFFIX} points: the speed of their fine-tuning '
                 'alone (their pretraining steps are not counted)')
  plotted = [(r['task'], r.get('run')) for r in results if (r['model'], r['head']) in points
             and (y_task is None or r['task'] == y_task)]
  if any(is_shortened(run) for _, run in plotted):
    notes.append('Training: ' + describe_training(
        [(task, run and {**run, 'overrides': None}) for task, run in plotted]))
  return {'points': points, 'x_label': x_label, 'y_label': y_label, 'y_task': y_task,
          'memory_key': memory_key, 'notes': notes}


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


def draw_points(ax, points: dict) -> list:
  """One circle per (model, head), area ∝ memory; the labels to place, as (text, x, y)."""
  memories = [m for _, _, m in points.values() if m]
  biggest = max(memories) if memories else None
  several_heads = {m for m, _ in points if sum(mm == m for mm, _ in points) > 1}
  labels = []
  for (model, head), (x, y, memory) in sorted(points.items(), key=lambda kv: row_order(kv[0])):
    area = 2000.0 * memory / biggest if memory and biggest else 200.0  # area ∝ memory
    # Not clipped: the slowest model sits at the x axis's 0 and keeps its whole circle.
    ax.scatter([x], [y], s=area, alpha=0.5, edgecolors='black', clip_on=False)
    label = registry.label(model) + (f' [{head}]' if model in several_heads else '')
    if memory:
      label += f'\n{memory / 2**30:.2f} GiB'
    labels.append((label, x, y))
  if not points:
    ax.text(0.5, 0.5, 'no points: no speed measured for any model', ha='center',
            transform=ax.transAxes)
  return labels


def figure1(summary: dict, results: list[dict], profile: dict | list | None, checkpoint: str,
            caption: str = ''):
  """Figure 1 as a matplotlib figure; `profile` is the loaded profile JSON or None; `caption`
  is written under the plot."""
  import matplotlib
  matplotlib.use('Agg')  # Files only, no display.
  from matplotlib import pyplot as plt

  plot = figure_points(summary, results, profile)
  fig, ax = plt.subplots(figsize=(6, 4.5))
  labels = draw_points(ax, plot['points'])
  ax.set_xlabel(textwrap.fill(plot['x_label'], 80), fontsize=8 if profile is None else None)
  ax.set_ylabel(plot['y_label'])
  measured = any(m for _, _, m in plot['points'].values()) and plot['memory_key']
  size_note = (f'circle area ∝ {MEMORY_KEYS[plot["memory_key"]]}' if measured
               else 'no memory measured')
  ax.set_title('\n'.join([f'Figure 1: accuracy ({checkpoint} checkpoint) vs speed; {size_note}',
                          *(textwrap.fill(n, 90) for n in plot['notes'])]), fontsize=8)
  ax.margins(0.2)
  if profile is None:
    # Logged speeds move with the machine's load: an axis from 0 shows their differences in
    # proportion, not a few percent of noise spread over the whole width.
    ax.set_xlim(left=0)
  if caption:
    caption = textwrap.fill(caption, 110)
    fig.text(0.01, 0.01, caption, fontsize=6, va='bottom')
    fig.tight_layout(rect=(0, 0.04 + 0.025 * caption.count('\n'), 1, 1))
  else:
    fig.tight_layout()
  place_labels(fig, ax, labels)  # After the layout, which moves the points.
  return fig


def write_figure(summary: dict, results: list[dict], profile: dict | list | None,
                 checkpoint: str, out_dir, caption: str = '') -> list:
  """figure1.png and .pdf; `profile` is the loaded profile JSON or None."""
  from matplotlib import pyplot as plt
  fig = figure1(summary, results, profile, checkpoint, caption)
  paths = [out_dir / 'figure1.png', out_dir / 'figure1.pdf']
  for path in paths:
    fig.savefig(path, dpi=150)
  plt.close(fig)
  return paths


# ----------------------------------------------------------------------------------------------
# The context probe's figures (lra_luna/probe.py): test accuracy against the window w of real
# tokens a model sees, one line per window placement (a run) or per model (a sweep's task).
# ----------------------------------------------------------------------------------------------
PROBE_FILE = 'probe.json'
PROBE_FIGURE = 'probe.png'
PLACEMENTS = ('start', 'end', 'random')
PLACEMENT_TITLES = {'start': 'the first w tokens', 'end': 'the last w tokens',
                    'random': 'w tokens at a random place'}


def draw_probe_panel(ax, lines: dict, majority: float | None, title: str,
                     full: float | None = None, lengths: dict | None = None,
                     relative: bool = False) -> None:
  """Accuracy (%) against w (log axis) for each line {label: (windows, accuracies, full-input
  accuracy or None)}, the full-input accuracy dotted in the line's colour; `full` (one run's)
  dotted black; the majority class dashed grey; the test inputs' `lengths` (probe.py
  length_summary) as a line at the median and a band to the 90th percentile. Accuracies are
  fractions; `relative` windows are fractions of each input."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  colours = [c['color'] for c in matplotlib.rcParams['axes.prop_cycle']]
  for (label, (windows, values, line_full)), colour in zip(lines.items(), colours):
    ax.plot(windows, [100 * v for v in values], marker='o', markersize=3, color=colour,
            label=label)
    if line_full is not None:
      ax.axhline(100 * line_full, color=colour, linestyle=':', linewidth=1)
  if full is not None:
    ax.axhline(100 * full, color='black', linestyle=':', linewidth=1, label='full input')
  if majority is not None:
    ax.axhline(100 * majority, color='grey', linestyle='--', linewidth=1, label='majority class')
  if lengths is not None and not relative:
    ax.axvspan(lengths['median'], max(lengths['p90'], lengths['median']), color='0.5',
               alpha=0.15, label=f"inputs: median {lengths['median']:g} tokens .. 90th "
               f"percentile {lengths['p90']:g}")
    ax.axvline(lengths['median'], color='0.3', linestyle='-.', linewidth=1.2)
  ax.set_xscale('log', base=2)
  ticks = sorted({w for windows, _, _ in lines.values() for w in windows})
  ax.set_xticks(ticks, [f'{w:g}' for w in ticks])
  ax.minorticks_off()
  ax.set_xlabel('window w (fraction of each input\'s real tokens)' if relative
                else 'window w (real tokens the model sees)')
  ax.set_ylabel('test accuracy (%)')
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)


def run_probe_figure(probe: dict, path) -> pathlib.Path:
  """One run's probe.png: a line per placement, the full-input accuracy dotted."""
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  figure = figure_lib.Figure(figsize=(6, 4.2))
  lines = {p: (probe['windows'], probe['accuracy'][p], None) for p in PLACEMENTS}
  lengths = probe.get('input_lengths', {}).get('test')
  said = (f"\ntest inputs: median {lengths['median']:g}, 90th percentile {lengths['p90']:g}, "
          f"max {lengths['max']} real tokens" if lengths else '')
  draw_probe_panel(figure.subplots(), lines, probe['majority_rate'],
                   f"{TASK_NAMES.get(probe['task'], probe['task'])} / {probe['model']}, seed "
                   f"{probe['seed']}, {probe['checkpoint']} checkpoint (step {probe['step']})"
                   + said, full=probe['full_accuracy'], lengths=lengths,
                   relative=probe.get('relative', False))
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  return pathlib.Path(path)


def probe_means(probes: list[dict]) -> dict:
  """{task: {model: {'windows', 'accuracy': {placement: [mean over seeds]}, 'full', 'majority',
  'seeds'}}} of the probe.json of several runs; runs of one model and task average seed by
  seed only over the windows they all probed."""
  grouped = {}
  for probe in probes:  # relative probes (fractions of each input) apart: '<task>_relative'
    task = probe['task'] + ('_relative' if probe.get('relative') else '')
    grouped.setdefault(task, {}).setdefault(probe['model'], []).append(probe)
  means = {}
  for task, models in grouped.items():
    for model, runs in sorted(models.items(), key=lambda item: row_order((item[0], ''))):
      windows = sorted(set.intersection(*(set(r['windows']) for r in runs)))
      at = lambda r, p, w: r['accuracy'][p][r['windows'].index(w)]
      means.setdefault(task, {})[model] = {
          'windows': windows, 'seeds': len(runs),
          'accuracy': {p: [statistics.fmean(at(r, p, w) for r in runs) for w in windows]
                       for p in PLACEMENTS},
          'full': statistics.fmean(r['full_accuracy'] for r in runs),
          'majority': runs[0]['majority_rate'], 'relative': runs[0].get('relative', False),
          'lengths': runs[0].get('input_lengths', {}).get('test')}
  return means


def write_probe_figures(probes: list[dict], out_dir) -> list:
  """probe_<task>.png per task: a panel per placement, a line per model (mean over seeds), each
  model's full-input accuracy dotted in its colour."""
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  paths = []
  for task, models in probe_means(probes).items():
    figure = figure_lib.Figure(figsize=(5 * len(PLACEMENTS), 4.2))
    for ax, placement in zip(figure.subplots(1, len(PLACEMENTS)), PLACEMENTS):
      lines = {f"{model} ({value['seeds']} seeds)": (value['windows'],
                                                     value['accuracy'][placement], value['full'])
               for model, value in models.items()}
      first = next(iter(models.values()))
      name = task.removesuffix('_relative')
      draw_probe_panel(ax, lines, first['majority'],
                       f'{TASK_NAMES.get(name, name)}: {PLACEMENT_TITLES[placement]}',
                       lengths=first['lengths'], relative=first['relative'])
    figure.suptitle('Context probe: test accuracy when the model sees w real tokens (dotted: '
                    'full input)', fontsize=10)
    figure.tight_layout()
    path = pathlib.Path(out_dir) / f'probe_{task}.png'
    figure.savefig(path, dpi=120)
    paths.append(path)
  return paths
