"""Tables 1 and 3 of a sweep beside the papers' rows: built from the seed statistics of
report.runs as cells, then laid out as Markdown, LaTeX and CSV by lra_luna/tables.py."""

import dataclasses

from lra_luna import config_lib
from lra_luna import published
from lra_luna import registry
from lra_luna import tables
from lra_luna.report.runs import (AVG, AVG_NO_RETRIEVAL, CHECKPOINTS, MISSING, TASK_NAMES, Cell,
                                  average, describe_training, is_shortened, row_order,
                                  welch_difference)


@dataclasses.dataclass
class Row:
  label: str
  head: str
  source: str          # 'ours' or 'paper, table'
  values: dict         # column key -> Cell
  group: int           # rows of one group sit together between rules
  training: list | None = None  # ours: [(task, results.json 'run' or None)] of its runs


@dataclasses.dataclass
class AccuracyTable:
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


def training_title(rows: list[Row]) -> str:
  """The caption's sentences on how our rows trained: every table says it, and never calls a
  row full when any of its runs is shortened or not recorded."""
  ours = [r for r in rows if r.training is not None]
  records = [record for r in ours for record in r.training]
  text = f' Ours trained: {describe_training(records) if records else MISSING}.'
  shortened = [r for r in ours if any(is_shortened(run) for _, run in r.training)]
  unrecorded = [r for r in ours if any(run is None for _, run in r.training)]
  if shortened:
    text += (f' SHORTENED: {len(shortened)} of our {len(ours)} rows trained less than the full '
             "run of their protocol; they are not comparable with full runs or the papers' rows.")
  elif ours and not unrecorded:
    text += " Every row of ours trained its protocol's full run."
  if unrecorded:
    text += (f' {len(unrecorded)} of our rows have runs whose training is not recorded (a '
             'results.json without its run record): whether they are full runs is unknown.')
  return text


def table1(summary: dict, checkpoint: str, training: dict | None = None) -> AccuracyTable | None:
  """Table 1: every (model, head) trained from scratch on every task, their averages, the papers'
  rows beside; self-pretrained rows are in table_spt only (a note says so). None without a
  row of ours."""
  pretrained = sorted(key for key in summary if key[0].endswith(config_lib.SPT_SUFFIX))
  summary = {key: cells for key, cells in summary.items() if key not in pretrained}
  if not summary:
    return None
  task_names = list(published.TASKS)
  if any('pathx' in cells for cells in summary.values()):
    task_names.append('pathx')  # Shown when run; not in the averages, as in the papers.
  no_retrieval = [t for t in published.TASKS if t != 'retrieval']
  columns = ([(t, TASK_NAMES[t]) for t in task_names] +
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
  if pretrained:
    notes.append(f'Self-pretrained rows ({", ".join(m for m, _ in dict.fromkeys(pretrained))}) '
                 'are in table_spt, beside the same models from scratch.')
  title = (f'Table 1: LRA test accuracy (%), {CHECKPOINTS[checkpoint]}; ours: mean ± sample std '
           'over seeds (n seeds); averages over tasks of the task means.')
  return AccuracyTable('table1', title + training_title(rows), columns, rows, notes)


def table3(summary: dict, checkpoint: str, training: dict | None = None) -> AccuracyTable | None:
  """Table 3: [CLS] vs mean-pooled P of the models with a P, only the heads that ran; None when
  no such model ran."""
  task_names = published.CLS_VS_P_TASKS
  columns = [(t, TASK_NAMES[t]) for t in task_names] + [(AVG, 'Avg.')]
  ran = {(model, head): {t: c for t, c in cells.items() if t in task_names}
         for (model, head), cells in summary.items() if head in ('cls', 'mean_p')}
  ran = {key: cells for key, cells in ran.items() if cells}
  # The models with a P to pool (a plug-in is no registry entry and has none).
  models = sorted({m for m, _ in ran if m in registry.MODELS and
                   'mean_p' in registry.MODELS[m].heads}, key=lambda m: row_order((m, '')))
  rows = []
  for group, model in enumerate(models):
    for head in [h for h in ('cls', 'mean_p') if (model, h) in ran]:
      cells = ran[(model, head)]
      rows.append(Row(model, head, 'ours', {**cells, AVG: average(cells, task_names)}, group,
                      (training or {}).get((model, head), [])))
    rows += [published_row(p, group, columns) for p in published.TABLE3 if p.model == model]
  if not models or not any(head == 'mean_p' for _, head in ran):
    return None  # Table 3 compares the heads: without a P run it has nothing to compare
  title = (f'Table 3: [CLS] (cls) vs mean-pooled P (mean_p), test accuracy (%), '
           f'{CHECKPOINTS[checkpoint]}; ours: mean ± sample std over seeds (n seeds).')
  return AccuracyTable('table3', title + training_title(rows), columns, rows)


def positions_table(summary: dict, checkpoint: str,
                    training: dict | None = None) -> AccuracyTable | None:
  """The positions ablation: each model with its own positions, with rotary positions
  (`<model>+rotary`) and the difference of their means (rotary - own), per task that ran and on
  average over the tasks both ran; None when no run used rotary positions."""
  own_name = lambda m: m.removesuffix(registry.ROTARY_SUFFIX)
  pairs = sorted({(own_name(m), h) for m, h in summary
                  if m.endswith(registry.ROTARY_SUFFIX) and (own_name(m), h) in summary},
                 key=row_order)
  if not pairs:
    return None
  ran = [t for t in TASK_NAMES if any(t in summary[key] for key in summary)]
  columns = [(t, TASK_NAMES[t]) for t in ran] + [(AVG, 'Avg.')]
  rows = []
  for group, (model, head) in enumerate(pairs):
    own, rotary = summary[(model, head)], summary[(model + registry.ROTARY_SUFFIX, head)]
    both = [t for t in ran if t in own and t in rotary]
    for name, cells in ((model, own), (model + registry.ROTARY_SUFFIX, rotary)):
      rows.append(Row(name, head, 'ours', {**cells, AVG: average(cells, both)}, group,
                      (training or {}).get((name, head), [])))
    difference = {t: Cell(rotary[t].mean - own[t].mean) for t in both}
    rows.append(Row('Δ rotary - own', head, 'ours', {**difference, AVG: average(difference, both)},
                    group))
  title = (f'Positions: own positions (learned for the attention models) vs rotary (RoFormer), '
           f'test accuracy (%), {CHECKPOINTS[checkpoint]}; mean ± sample std over seeds (n '
           'seeds); Δ: the difference of the means.')
  return AccuracyTable('positions', title + training_title(rows[:-1]), columns, rows)
def table_spt(summary: dict, checkpoint: str, training: dict | None = None,
              pretraining: dict | None = None) -> AccuracyTable | None:
  """Table SPT: each model and head trained from scratch beside the same self-pretrained
  (`<model>+spt`: spt.py, Amos et al. 2024 §3) on every task either ran, then per group: the
  difference SPT - scratch of their means with its 95% Welch interval (runs.welch_difference),
  the pretraining's token accuracy and that of always predicting the most frequent token
  (runs.pretraining_summary); last, the figures the SPT paper's text prints
  (published.SPT_FIGURES), each in its own column. None without self-pretrained runs."""
  suffix = config_lib.SPT_SUFFIX
  pairs = sorted({(model.removesuffix(suffix), head) for model, head in summary
                  if model.endswith(suffix)}, key=row_order)
  if not pairs:
    return None
  ran = {task for key in summary for task in summary[key]}
  task_names = [t for t in TASK_NAMES if t in ran]
  columns = ([(t, TASK_NAMES[t]) for t in task_names] + [(AVG, 'Avg.')]
             + list(published.SPT_COLUMNS.items()))
  rows = []
  for group, (model, head) in enumerate(pairs):
    for label in (model, model + suffix):
      if (label, head) in summary:
        cells = summary[(label, head)]
        rows.append(Row(label, head, 'ours', {**cells, AVG: average(cells, task_names)}, group,
                        (training or {}).get((label, head), [])))
    scratch, spt_cells = summary.get((model, head), {}), summary[(model + suffix, head)]
    both = [t for t in task_names if t in scratch and t in spt_cells]
    if both:
      difference = {t: welch_difference(scratch[t], spt_cells[t]) for t in both}
      rows.append(Row(DIFFERENCE_LABEL, head, 'ours',
                      {**difference, AVG: average(difference, task_names)}, group))
    pretrained = (pretraining or {}).get((model + suffix, head), {})
    if pretrained:
      rows.append(Row(TOKEN_ACCURACY_LABEL, head, 'ours',
                      {t: token for t, (token, _) in pretrained.items()}, group))
      rows.append(Row(MAJORITY_LABEL, head, 'ours',
                      {t: majority for t, (_, majority) in pretrained.items() if majority},
                      group))
  rows += [Row(f.label, '', f'{f.paper}, {f.where}', {f.column: Cell(f.value)}, len(pairs))
           for f in published.SPT_FIGURES]
  title = (f'Table SPT: test accuracy (%) from scratch (<model>) and after self-pretraining '
           f'on the training inputs (<model>{suffix}), {CHECKPOINTS[checkpoint]}; ours: mean ± '
           'sample std over seeds (n seeds); Avg. over the tasks shown.')
  notes = [f'{DIFFERENCE_LABEL}: the difference of the means with its 95% confidence interval '
           "(Welch's t, unequal variances); an interval that holds 0: not distinguishable.",
           f'{TOKEN_ACCURACY_LABEL}: the pretraining\'s accuracy on the tokens it predicts '
           '(masked or next) of held-in training inputs, over its distinct pretrainings (seeds '
           f'sharing one count once); {MAJORITY_LABEL}: the accuracy of always predicting the '
           'most frequent of those tokens, its reference point.',
           f'{published.SPT_PAPER}: the figures its text prints, each in its own column (LRA\'s '
           'average over six tasks; Path-X at 256 x 256); its tables\' per-task cells are not '
           'reproduced.']
  ours = [r for r in rows if r.training is not None]
  return AccuracyTable('table_spt', title + training_title(ours), columns, rows, notes)


DIFFERENCE_LABEL = 'Δ SPT - scratch'
TOKEN_ACCURACY_LABEL = 'pretraining: token accuracy'
MAJORITY_LABEL = 'pretraining: always the most frequent token'


def format_cell(cell: Cell | None) -> str:
  """'38.00 ± 2.00 (3)': mean ± sample std (n seeds); MISSING where there is no number."""
  if cell is None:
    return MISSING
  if cell.interval is not None:  # a difference of means: signed, with its 95% interval
    low, high = cell.interval
    return f'{cell.mean:+.2f} [{low:+.2f}, {high:+.2f}]'
  text = f'{cell.mean:.2f}'
  if cell.std is not None:
    text += f' ± {cell.std:.2f}'
  if cell.n is not None:
    text += f' ({cell.n})'
  return text


def training_cell(row: Row) -> str:
  """The Training column: how the row's runs trained (blank for a paper's row)."""
  if row.training is None:
    return ''
  return describe_training(row.training) if row.training else MISSING


# The CSV's fields of how our rows trained (results.json 'run'); differing runs joined by '; '.
TRAINING_FIELDS = ('preset', 'protocol', 'steps', 'full_steps', 'shortened', 'overrides')


def training_csv_cells(row: Row) -> list[str]:
  """Per TRAINING_FIELDS, the distinct values of the row's runs ('' for a paper's row and for
  a run without its record), lists joined by ', '."""
  cells = []
  for field in TRAINING_FIELDS:
    values = []
    for _, run in row.training or []:
      value = (run or {}).get(field)
      values.append(', '.join(value) if isinstance(value, list) else
                    '' if value is None else str(value))
    cells.append('; '.join(dict.fromkeys(values)))
  return cells


def csv_rows(table: AccuracyTable, checkpoint: str) -> tuple[list, list]:
  """(header, rows) of the CSV: raw means, stds and n per column, and how ours trained."""
  intervals = any(cell is not None and cell.interval is not None
                  for row in table.rows for cell in row.values.values())
  header = ['model', 'head', 'source', 'checkpoint']
  for key, _ in table.columns:
    header += [f'{key}_mean', f'{key}_std', f'{key}_n']
    header += [f'{key}_ci95_low', f'{key}_ci95_high'] if intervals else []
  header += ['training', *TRAINING_FIELDS]
  rows = []
  for row in table.rows:
    line = [row.label, row.head, row.source, checkpoint if row.source == 'ours' else '']
    for key, _ in table.columns:
      cell = row.values.get(key)
      line += ['', '', ''] if cell is None else [
          f'{cell.mean:.4f}', '' if cell.std is None else f'{cell.std:.4f}',
          '' if cell.n is None else str(cell.n)]
      if intervals:
        line += (['', ''] if cell is None or cell.interval is None
                 else [f'{bound:.4f}' for bound in cell.interval])
    rows.append(line + [training_cell(row), *training_csv_cells(row)])
  return header, rows


def shown_label(row: Row) -> str:
  """The Model cell: the papers' label for our rows too (Luna-16, not luna16), so that a row of
  ours and the paper's row of the same model read alike; the Source column marks ours."""
  return registry.label(row.label) if row.source == 'ours' else row.label


def training_column_needed(table: AccuracyTable) -> bool:
  """Whether our rows trained differently: only then does each carry its own Training cell
  (otherwise the caption's 'Ours trained: ...' says it once)."""
  return len({training_cell(row) for row in table.rows if row.training is not None}) > 1


def as_table(table: AccuracyTable, checkpoint: str, campaign: str = '') -> tables.Table:
  """The lra_luna.tables.Table of an accuracy table; `campaign` (its facts) closes the caption
  and fills a 'campaign' CSV column on our rows. The CSV keeps the config names and every
  row's training."""
  per_row = training_column_needed(table)
  header = ['Model', 'Head', 'Source', *(h for _, h in table.columns)]
  rows = [[shown_label(row), row.head, row.source,
           *(format_cell(row.values.get(k)) for k, _ in table.columns)]
          + ([training_cell(row)] if per_row else []) for row in table.rows]
  csv_header, csv_lines = csv_rows(table, checkpoint)
  if campaign:
    csv_header = [*csv_header, 'campaign']
    csv_lines = [line + [campaign if row.source == 'ours' else '']
                 for line, row in zip(csv_lines, table.rows)]
  return tables.Table(table.name, table.title + (f' {campaign}' if campaign else ''),
                      header + (['Training'] if per_row else []), rows,
                      align='lll' + 'r' * len(table.columns) + ('l' if per_row else ''),
                      groups=[row.group for row in table.rows], notes=list(table.notes),
                      csv_header=csv_header, csv_rows=csv_lines)
