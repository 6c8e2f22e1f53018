"""The published orderings of LRA's papers put to the test on a sweep or a record, at any size.

Each run is a record row (report/record.py: size, task, group, seed, steps, accuracies, commit),
whether it comes from a results.json or from a record CSV. A group is the runs of one size, task
and model (with `/<head>` where a sweep pooled another head than the preset's). Two tables:
- groups: each group's test accuracy per seed, mean ± sample std (n), the published full-size
  value with its source, and the commits its runs were computed at ('not recorded' for rows
  copied into a record by hand);
- orderings: each ordering of ORDERINGS whose two groups ran, better − worse with its 95% Welch
  interval and a verdict: `reproduces` (the interval on the published side of 0), `reversed` (on
  the other side), `not distinguishable` (it holds 0); "within" claims reproduce only inside
  ±WITHIN_POINTS. Its caption names the size, steps and checkpoint; its last line counts the
  distinguishable orderings.
The group figure (groups.png): mean ± std per group, a panel per size and task, the published
full-size value as a marker.
"""

import dataclasses
import functools
import statistics

from lra_luna import config_lib
from lra_luna import published as published_lib
from lra_luna import registry
from lra_luna import tables
from lra_luna import tasks
from lra_luna.report import runs as runs_lib

WITHIN_POINTS = 3.0  # "within a few points": of the Transformer (LRA, Luna), of Luna-16 (P length)
RELATIONS = {'>': '>', '>=': '>=', 'within': f'within {WITHIN_POINTS:g} points of'}
HEAD_LABELS = {'cls': '[CLS]', 'mean': 'mean', 'mean_p': 'P'}  # group_label's names of the heads
NO_COMMIT = '*'  # marks a group with runs of no recorded commit
NOT_RECORDED = 'not recorded'  # the commit (or machine) of a run that has none
NO_COMMIT_REASON = ('a results.json from before commits were recorded, or a record row copied in '
                    'by hand after its run folder was gone')


@dataclasses.dataclass(frozen=True)
class Ordering:
  """`better` above `worse` on `task` (or within WITHIN_POINTS of it), as `paper` (its `table`)
  prints them; paper None: each group's own first published row. `reference`: the paper that
  claims it, for groups without a published number of their own (SPT, rotary)."""
  task: str
  better: str
  worse: str
  relation: str = '>'
  paper: str | None = None
  table: str | None = None
  reference: str = ''


_LUNA_T1 = {'paper': published_lib.LUNA_PAPER, 'table': 'Table 1'}
_SPT = {'relation': '>=', 'reference': published_lib.SPT_PAPER}
_ROTARY = {'reference': published_lib.LOCALITY_PAPER}
ORDERINGS = (
    *(Ordering(task, better, 'transformer') for better in ('s4d', 'mega_chunk')
      for task in ('listops', 'pathfinder')),
    Ordering('listops', 'transformer+spt', 'transformer', reference=published_lib.SPT_PAPER),
    Ordering('pathfinder', 'transformer+spt', 'transformer', reference=published_lib.SPT_PAPER),
    Ordering('listops', 'luna16', 'transformer', 'within', **_LUNA_T1),
    Ordering('pathfinder', 'luna16', 'transformer', **_LUNA_T1),
    # Amos et al. 2024: a diagonal linear RNN gains from SPT (DLR 77 -> 83.4, S4 82.8 -> 84.5).
    Ordering('listops', 's4d+spt', 's4d', **_SPT),
    Ordering('listops', 's5+spt', 's5', **_SPT),
    Ordering('listops', 'transformer+rotary', 'transformer', **_ROTARY),
    Ordering('pathfinder', 'transformer+rotary', 'transformer', **_ROTARY),
    Ordering('listops', 'luna16+spt', 'luna16', reference=published_lib.SPT_PAPER),
    Ordering('pathfinder', 's4d+spt', 's4d', **_SPT),
    Ordering('pathfinder', 'luna16+spt', 'luna16', reference=published_lib.SPT_PAPER),
    # Across papers (each model's own Table 1 row): the SSMs above Luna-16.
    *(Ordering('listops', better, worse) for better, worse in (
        ('s4d', 'luna16'), ('s5', 'luna16'), ('s5', 's4d'), ('s5', 'lru'), ('lru', 'luna16'))),
    *(Ordering('pathfinder', better, 'luna16') for better in ('s4d', 's5', 'lru')),
    # LRA's Table 1, ListOps: the kernel and fixed-pattern attentions about 20 points below the
    # Transformer and Luna (the largest gaps among LRA's attention models).
    *(Ordering('listops', 'transformer', worse) for worse in (
        'performer', 'linear_transformer', 'local', 'sparse_transformer')),
    Ordering('listops', 'luna16', 'performer'),
    Ordering('listops', 'luna16', 'linear_transformer'),
    # LRA's Table 1, ListOps: the other attention models within about 3 points of the Transformer.
    *(Ordering('listops', model, 'transformer', 'within') for model in (
        'linformer', 'reformer', 'sinkhorn', 'synthesizer', 'bigbird', 'longformer')),
    # The Luna paper's Table 1: the length of P changes ListOps by at most 0.6 points.
    Ordering('listops', 'luna128', 'luna16', 'within', **_LUNA_T1),
    Ordering('listops', 'luna256', 'luna16', 'within', **_LUNA_T1),
    # The Luna paper's Table 3: mean-pooled final P above [CLS] on every task it ran.
    Ordering('listops', 'luna16/mean_p', 'luna16', paper=published_lib.LUNA_PAPER,
             table='Table 3'),
)


# ----------------------------------------------------------------------------------------------
# Groups: names, labels and their published values.
# ----------------------------------------------------------------------------------------------
@functools.cache
def preset_head(preset: str) -> str | None:
  """The head a preset ('listops.py:luna16,mid') pools; None where it cannot be built."""
  config = config_lib.preset_config(preset)
  return None if config is None else config.model.head


def group_name(result: dict) -> str:
  """A run's group: its model, with `/<head>` where the run pooled another head than its preset
  (sweep --heads), so that two heads of one model are two groups, as in the sweep's folders."""
  head = preset_head((result.get('run') or {}).get('preset') or '')
  if head is None or result['head'] == head:
    return result['model']
  return f'{result["model"]}/{result["head"]}'


def group_label(name: str) -> str:
  """A group's table label: the model's (registry), with its head where the group names one."""
  model, _, head = name.partition('/')
  return registry.label(model) + (f', {HEAD_LABELS.get(head, head)} head' if head else '')


def published_rows(group: str) -> tuple:
  """The published rows of a group trained from scratch: a model's Table 1 rows, then the Luna
  paper's Table 3 [CLS] row; a head group's Table 3 row. None for SPT or rotary groups."""
  model, _, head = group.partition('/')
  if model not in registry.MODELS:
    return ()
  if head:
    return tuple(published_lib.matching(published_lib.TABLE3, model, head))
  return (*registry.MODELS[model].table1,
          *(r for r in published_lib.TABLE3 if r.model == model and r.head == 'cls'))


def published(group: str, task: str, paper: str | None = None,
              table: str | None = None) -> tuple[float, str] | None:
  """(the published full-size test accuracy, 'paper, table') of a group on a task: its first
  row with the task, of `paper` (and `table`) where given; None where there is none."""
  for row in published_rows(group):
    if task in row.accuracy and paper in (None, row.paper) and table in (None, row.table):
      return row.accuracy[task], f'{row.paper}, {row.table}'
  return None


# ----------------------------------------------------------------------------------------------
# Statistics and verdicts.
# ----------------------------------------------------------------------------------------------
def welch(better: list[float], worse: list[float]) -> tuple[float, float, float]:
  """(mean(better) - mean(worse), its 95% Welch interval's low and high end); 2+ values each
  (report.runs.welch_difference computes it)."""
  difference = runs_lib.welch_difference(runs_lib.seed_statistics(worse),
                                         runs_lib.seed_statistics(better))
  return (difference.mean, *difference.interval)


def verdict(low: float, high: float, within: float | None = None) -> str:
  """reproduces / reversed / not distinguishable for an interval of better - worse; with
  `within`, whether the interval lies inside ±within (reproduces) or outside it (reversed)."""
  if within is not None:
    if -within <= low and high <= within:
      return 'reproduces'
    return 'reversed' if low > within or high < -within else 'not distinguishable'
  if low > 0:
    return 'reproduces'
  return 'reversed' if high < 0 else 'not distinguishable'


def groups_of(rows: list[dict], checkpoint: str) -> dict:
  """{(size, task, group): [rows, by seed]}; every row must have the checkpoint's accuracy."""
  groups = {}
  for row in sorted(rows, key=lambda r: r['seed']):
    groups.setdefault((row['size'], row['task'], row['group']), []).append(row)
  return dict(sorted(groups.items(), key=lambda item: (
      item[0][0], runs_lib.task_order(item[0][1]), item[0][2])))


def accuracies(group_rows: list[dict], checkpoint: str) -> list[float]:
  return [row[checkpoint] for row in group_rows]


def describe(values: list[float]) -> str:
  """'30.92 ± 5.38 (n = 5)'; one value: '31.90 (n = 1)'."""
  if len(values) < 2:
    return f'{values[0]:.2f} (n = 1)'
  return f'{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} (n = {len(values)})'


def counted(names: list[str]) -> str:
  """'a' where every name is one, else 'a (3), b (2)' (first seen first); an empty name is
  NOT_RECORDED."""
  counts = {}
  for name in names:
    counts[name or NOT_RECORDED] = counts.get(name or NOT_RECORDED, 0) + 1
  if len(counts) == 1:
    return next(iter(counts))
  return ', '.join(f'{name} ({count})' for name, count in counts.items())


def commits(group_rows: list[dict]) -> str:
  """The commits of a group's runs: 'abc1234' or 'abc1234 (3), not recorded (2)'."""
  names = []
  for row in group_rows:
    commit, _, dirty = row['commit'].partition('+')
    names.append(commit[:7] + (f'+{dirty}' if dirty else ''))
  return counted(names)


# ----------------------------------------------------------------------------------------------
# The tables.
# ----------------------------------------------------------------------------------------------
def scope(groups: dict, checkpoint: str) -> str:
  """What the tables are drawn from: 'size mid (ListOps 1,600 steps, Pathfinder 400 steps);
  test accuracy (%) of the best checkpoint (...)'."""
  parts = []
  for size in dict.fromkeys(size for size, _, _ in groups):
    steps = {}
    for (s, task, _), group_rows in groups.items():
      if s == size:
        steps.setdefault(task, set()).update(_steps_text(r['steps']) for r in group_rows)
    said = ', '.join(f'{tasks.title(task)} {" / ".join(sorted(n, key=steps_key))} steps'
                     for task, n in steps.items())
    parts.append(f'size {size} ({said})')
  return (f'{"; ".join(parts)}; test accuracy (%) of the {runs_lib.CHECKPOINTS[checkpoint]}; '
          'published: the papers\' full-size numbers')


def _steps_text(steps) -> str:
  """'1,600' of 1600 or '1600'; other text as it is."""
  return f'{int(steps):,}' if str(steps).isdigit() else str(steps or '?')


def steps_key(steps: str):
  """Sorts steps texts ('1,600', '400') by their number, other text after them."""
  digits = steps.replace(',', '')
  return (0, int(digits)) if digits.isdigit() else (1, steps)


def sizes_column(groups: dict) -> bool:
  """Whether the tables need a size column (runs of several sizes)."""
  return len({size for size, _, _ in groups}) > 1


def groups_table(groups: dict, checkpoint: str) -> tables.Table:
  """Each group's per-seed accuracies, mean ± std (n), published value, source and commits."""
  sized = sizes_column(groups)
  rows = []
  for (size, task, group), group_rows in groups.items():
    values = accuracies(group_rows, checkpoint)
    value = published(group, task)
    rows.append([*([size] if sized else []), task, group_label(group),
                 ', '.join(f'{v:.2f}' for v in values), describe(values),
                 '' if value is None else f'{value[0]:.2f}', '' if value is None else value[1],
                 commits(group_rows)])
  header = [*(['size'] if sized else []), 'task', 'model', 'per seed', 'mean ± std (n)',
            'published, full size', 'source', 'commit']
  return tables.Table('groups', f'Groups: {scope(groups, checkpoint)}.', header, rows,
                      align='l' * (4 + sized) + 'rll')


def claim(ordering: Ordering) -> str:
  """'S4D > Transformer', 'Luna-128 within 3 points of Luna-16'."""
  return (f'{group_label(ordering.better)} {RELATIONS[ordering.relation]} '
          f'{group_label(ordering.worse)}')


def claimed(ordering: Ordering) -> tuple[str, str]:
  """(the published values, '60.47 vs 36.37' or '', and their sources or the reference)."""
  values = [published(group, ordering.task, ordering.paper, ordering.table)
            for group in (ordering.better, ordering.worse)]
  if None in values:
    return '', ordering.reference
  return (f'{values[0][0]:.2f} vs {values[1][0]:.2f}',
          '; '.join(dict.fromkeys(source for _, source in values)))


def marked(group_rows: list[dict], checkpoint: str) -> str:
  """describe() of a group, NO_COMMIT after it where a run has no recorded commit."""
  text = describe(accuracies(group_rows, checkpoint))
  return text + (NO_COMMIT if any(not row['commit'] for row in group_rows) else '')


def ordering_rows(groups: dict, checkpoint: str) -> tuple[list, dict]:
  """The orderings table's rows (every size, every ordering whose two groups ran) and the count
  of each verdict ('needs 2+ seeds a group' where one group has a single seed)."""
  rows, counts = [], {}
  for size in dict.fromkeys(size for size, _, _ in groups):
    for ordering in ORDERINGS:
      better = groups.get((size, ordering.task, ordering.better))
      worse = groups.get((size, ordering.task, ordering.worse))
      if not better or not worse:
        continue
      a, b = accuracies(better, checkpoint), accuracies(worse, checkpoint)
      if len(a) < 2 or len(b) < 2:
        difference, said = f'{statistics.fmean(a) - statistics.fmean(b):+.2f}', 'needs 2+ seeds'
      else:
        diff, low, high = welch(a, b)
        within = WITHIN_POINTS if ordering.relation == 'within' else None
        difference, said = f'{diff:+.2f} [{low:+.2f}, {high:+.2f}]', verdict(low, high, within)
      counts[said] = counts.get(said, 0) + 1
      rows.append([*([size] if sizes_column(groups) else []), ordering.task, claim(ordering),
                   *claimed(ordering), marked(better, checkpoint), marked(worse, checkpoint),
                   difference, said])
  return rows, counts


def summary(counts: dict) -> str:
  """'4 of 35 distinguishable (1 reproduces, 3 reversed).' and what could not be tested."""
  tested = sum(n for said, n in counts.items() if said != 'needs 2+ seeds')
  reproduce, reverse = counts.get('reproduces', 0), counts.get('reversed', 0)
  text = (f'{reproduce + reverse} of {tested} distinguishable ({reproduce} reproduce, '
          f'{reverse} reversed).')
  if counts.get('needs 2+ seeds'):
    text += f' {counts["needs 2+ seeds"]} more need two seeds of each group.'
  return text


def orderings_table(groups: dict, checkpoint: str) -> tables.Table:
  """The published orderings whose two groups ran, with their Welch intervals and verdicts."""
  rows, counts = ordering_rows(groups, checkpoint)
  sized = sizes_column(groups)
  header = [*(['size'] if sized else []), 'task', 'published ordering', 'published, full size',
            'source', 'better', 'worse', 'better − worse, 95% Welch', 'verdict']
  notes = [f'Verdict: reproduces where the 95% Welch interval lies on the published side of 0 '
           f'("within": inside ±{WITHIN_POINTS:g}), reversed on the other side, not '
           'distinguishable where it holds 0.']
  if any(NO_COMMIT in cell for row in rows for cell in row):
    notes.append(f'{NO_COMMIT}: some runs of the group have no recorded commit '
                 f'({NO_COMMIT_REASON}).')
  notes.append(summary(counts) if rows else 'No ordering has both of its groups here.')
  return tables.Table('orderings', f'Published orderings: {scope(groups, checkpoint)}.', header,
                      rows, align='l' * len(header), notes=notes)


# ----------------------------------------------------------------------------------------------
# The group figure.
# ----------------------------------------------------------------------------------------------
FIGURE = 'groups.png'


def draw_panel(ax, panel: dict, size: str, task: str) -> None:
  """One (size, task): each group's mean ± std, highest first; its published value marked."""
  order = sorted(panel, key=lambda g: (-statistics.fmean(panel[g]), g))
  marked_once = False
  for x, group in enumerate(order):
    values = panel[group]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    ax.errorbar(x, statistics.fmean(values), yerr=std, fmt='o', color='C0', capsize=4,
                label=f'{size}: mean ± std over seeds' if x == 0 else None)
    value = published(group, task) if group == registry.base_name(group) else None
    if value is not None:
      ax.plot(x, value[0], marker='x', color='C3', markersize=9, linestyle='none',
              label=None if marked_once else 'published, full size')
      marked_once = True
  ax.set_xticks(range(len(order)), [group_label(g) for g in order], rotation=45, ha='right',
                rotation_mode='anchor')
  ax.set_title(f'{tasks.title(task)} ({size})')
  ax.set_ylabel('test accuracy (%)')


def write_figure(groups: dict, checkpoint: str, path) -> None:
  """The group figure: a panel per (size, task), as wide as its groups need."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
  panels = {}
  for (size, task, group), group_rows in groups.items():
    panels.setdefault((size, task), {})[group] = accuracies(group_rows, checkpoint)
  widths = [max(4.0, 0.42 * len(panel)) for panel in panels.values()]
  fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths) + 1.5, 5.0), squeeze=False,
                           gridspec_kw={'width_ratios': widths})
  for ax, ((size, task), panel) in zip(axes[0], panels.items()):
    draw_panel(ax, panel, size, task)
  # One legend at the foot of the figure, below the labels, so that no marker hides behind it.
  handles = {}
  for ax in axes[0]:
    handles.update(zip(*reversed(ax.get_legend_handles_labels())))
  fig.legend(list(handles.values()), list(handles), fontsize=8, loc='lower center', ncol=2)
  fig.tight_layout(rect=(0, 0.07, 1, 1))
  fig.savefig(path, dpi=120)
  plt.close(fig)
