"""scaling.png: log-log step time and memory against sequence length, one line per model."""

import pathlib

from lra_luna import registry
from lra_luna.profile import slopes as slopes_lib
from lra_luna.profile import tabulate


def plot_panel(ax, results: dict, key: str, ylabel: str, scale: float) -> None:
  """One panel: results' points' `key` (times `scale`) against length, slope in the legend."""
  slopes = results['slopes']['step_s' if key == 'step_s' else 'memory']
  for name in results['models']:
    measured = sorted((p['length'], p[key] * scale) for p in results['points']
                      if p['model'] == name and p['status'] == 'ok' and p.get(key))
    if not measured:
      continue
    slope = slopes.get(name)
    label = registry.label(name) + (f' (slope {slopes_lib.format_slope(slope)})' if slope else '')
    ax.plot(*zip(*measured), marker='o', label=label)
  ax.set_xscale('log')
  ax.set_yscale('log')
  ax.set_xticks(results['lengths'], [tabulate.length_label(n) for n in results['lengths']])
  ax.set_xticks([], minor=True)
  ax.set_xlabel('sequence length')
  ax.set_ylabel(ylabel)
  if ax.lines:
    ax.legend(fontsize=7)
  else:  # --memory_only: nothing was timed.
    ax.text(0.5, 0.5, 'not measured', ha='center', va='center', transform=ax.transAxes)
  ax.grid(True, which='both', alpha=0.3)


def plot_scaling(results: dict, path: pathlib.Path) -> None:
  """Log-log step time and memory against length, one line per model, slope in the legend."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  memory = tabulate.memory_key(results['points'])
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
  plot_panel(axes[0], results, 'step_s', 'seconds per training step', 1.0)
  plot_panel(axes[1], results, memory, f'{tabulate.MEMORY_LABELS[memory]} (MiB)', 2.0**-20)
  fig.suptitle(tabulate.setting_line(results), fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
