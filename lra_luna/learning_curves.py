"""Learning curves: loss and accuracy over training steps, from run folders' metrics.jsonl, as
one PNG (run_folder.LEARNING_CURVES_FILE): per run, and per sweep with its seeds overlaid.
Training values are solid lines, validation values dashed with markers. matplotlib (Agg, no
display) is imported only when a figure is drawn; no JAX here.
"""

import pathlib

from lra_luna.training import run_folder

PANELS = (('loss', 'train_loss', 'val_loss'), ('accuracy', 'train_accuracy', 'val_accuracy'))


def series(rows: list[dict], key: str) -> tuple[list, list]:
  """(steps, values) of the metrics.jsonl rows that have `key`, in step order."""
  points = sorted((row['step'], row[key]) for row in rows if key in row)
  return [p[0] for p in points], [p[1] for p in points]


def plot(workdirs, path, title: str = '', labels=None) -> pathlib.Path:
  """Writes the learning curves of each run folder in `workdirs` (one colour each, labelled by
  `labels`, e.g. 'seed 0') to `path`; returns it. ValueError when no folder has metrics."""
  workdirs = [pathlib.Path(w) for w in workdirs]
  labels = list(labels) if labels else [None] * len(workdirs)
  runs = [(run_folder.read_jsonl(w / run_folder.METRICS_FILE), label)
          for w, label in zip(workdirs, labels)]
  runs = [(rows, label) for rows, label in runs if rows]
  if not runs:
    raise ValueError(f'no {run_folder.METRICS_FILE} with rows in {", ".join(map(str, workdirs))}')
  # A Figure without pyplot draws with Agg and leaves any interactive backend alone.
  import matplotlib  # pylint: disable=g-import-not-at-top
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  figure = figure_lib.Figure(figsize=(5 * len(PANELS), 3.6))
  axes = figure.subplots(1, len(PANELS))
  for (rows, label), colour in zip(runs, matplotlib.rcParams['axes.prop_cycle']):
    for ax, (name, train_key, val_key) in zip(axes, PANELS):
      ax.plot(*series(rows, train_key), color=colour['color'], linewidth=1,
              label=f'{label} train' if label else 'train')
      ax.plot(*series(rows, val_key), color=colour['color'], linestyle='--', marker='o',
              markersize=3, label=f'{label} validation' if label else 'validation')
      ax.set_xlabel('step')
      ax.set_ylabel(name)
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  if title:
    figure.suptitle(title)
  figure.tight_layout()
  path = pathlib.Path(path)
  figure.savefig(path, dpi=100)
  return path
