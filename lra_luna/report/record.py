"""The record: one CSV row per finished run (its size, task, group, seed, steps, test accuracy at
both checkpoints, the commit and machine that computed it, its preset and overrides), so that the
group and ordering tables outlive the run folders, which do not outlive their machine.

`report SWEEP_DIR --record FILE` merges each run's row into FILE (a rerun replaces its row);
`report FILE` draws the group and ordering tables and the group figure from it. A row whose
`commit` is empty was copied in by hand (its run folder was gone): the tables mark it.
An MQAR run (task 'mqar') is a row too, its group the text of its setting (model, causal or
bidirectional, L, N, V, D, Luna's P, learning rate: recall_setting.Setting.group), from which
`report FILE` draws the MQAR table and figures (report/recall.py).
"""

import csv
import os
import pathlib

from lra_luna.report import recall_setting
from lra_luna.report import runs as runs_lib

COLUMNS = ('size', 'task', 'group', 'seed', 'steps', 'best', 'last', 'commit', 'machine',
           'config')
KEY = ('size', 'task', 'group', 'seed')  # one row per run; a rerun replaces its row
ACCURACY_FORMAT = '.2f'  # test accuracy (%) as the record keeps it


def as_recorded(accuracy: float) -> float:
  """A test accuracy (%) as the record keeps it (ACCURACY_FORMAT), so that a table drawn from
  the runs and one drawn from their record agree to the last digit."""
  return float(format(accuracy, ACCURACY_FORMAT))


def commit_of(result: dict) -> str:
  """The commit of results.json's environment, '+dirty' when the checkout differed from it; ''
  where not recorded."""
  env = result.get('environment') or {}
  return (env.get('commit') or '') + ('+dirty' if env.get('commit') and env.get('dirty') else '')


def rows_of(results: list[dict], group_name) -> list[dict]:
  """The record's row of each run (test accuracy in %, two decimals), `group_name(result)` its
  group."""
  rows = []
  for result in results:
    env = result.get('environment') or {}
    machine = env.get('cpu', '') if env.get('platform', 'cpu') == 'cpu' else env.get(
        'device_kind', '')
    run = result.get('run') or {}
    rows.append({
        'size': runs_lib.run_size(result), 'task': result['task'], 'group': group_name(result),
        'seed': result['seed'], 'steps': result.get('steps', ''),
        **{checkpoint: (runs_lib.accuracy_of(result, checkpoint) if checkpoint in result else None)
           for checkpoint in runs_lib.CHECKPOINTS},
        'commit': commit_of(result), 'machine': machine,
        'config': ' '.join([run.get('preset', ''), *(run.get('overrides') or [])]).strip()})
  return rows


def read(path) -> list[dict]:
  """The rows of a record CSV (seed an int, accuracies floats or None where not recorded);
  ValueError in one line naming the file and line of what is wrong."""
  path = pathlib.Path(path)
  with path.open(newline='') as f:
    reader = csv.DictReader(f)
    if tuple(reader.fieldnames or ()) != COLUMNS:
      raise ValueError(f'{path}: the columns are {", ".join(reader.fieldnames or ())}, not '
                       f'{", ".join(COLUMNS)}; write it with `python -m lra_luna.report '
                       'SWEEP_DIR --record FILE`.')
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
      if row['task'] == recall_setting.TASK:  # an MQAR row's group is its setting
        try:
          recall_setting.Setting.from_group(row['group'])
        except ValueError as e:
          raise ValueError(f'{path}, line {line}: {e}') from None
      key = tuple(row[k] for k in KEY)
      if key in seen:
        raise ValueError(f'{path}, line {line}: the same run ({", ".join(map(str, key))}) as '
                         f'line {seen[key]}; keep one of them.')
      seen[key] = line
      rows.append(row)
  if not rows:
    raise ValueError(f'{path} holds no run; write it with `python -m lra_luna.report SWEEP_DIR '
                     '--record FILE`.')
  return rows


def cell_text(value):
  """A record cell: empty for None, an accuracy (a float) in ACCURACY_FORMAT, else the value."""
  if value is None:
    return ''
  return format(value, ACCURACY_FORMAT) if isinstance(value, float) else value


def write(path, rows: list[dict]) -> int:
  """Merges rows into the record at `path` (a row of the same run replaces the old one), sorted;
  written whole to a temporary file first, so that an interrupted write keeps the old record.
  Returns the number of rows in it."""
  path = pathlib.Path(path)
  merged = {tuple(row[k] for k in KEY): row for row in (read(path) if path.exists() else [])}
  merged.update({tuple(row[k] for k in KEY): row for row in rows})
  temporary = path.with_name(path.name + '.tmp')
  with temporary.open('w', newline='') as f:
    writer = csv.DictWriter(f, COLUMNS, lineterminator='\n')
    writer.writeheader()
    for key in sorted(merged):
      writer.writerow({k: cell_text(v) for k, v in merged[key].items()})
  os.replace(temporary, path)
  return len(merged)


def check_checkpoint(rows: list[dict], path, checkpoint: str) -> None:
  """ValueError in one line when a row lacks the checkpoint's accuracy."""
  missing = [row for row in rows if row[checkpoint] is None]
  if missing:
    raise ValueError(f'{path}: {len(missing)} runs have no {checkpoint} accuracy (e.g. '
                     f'{missing[0]["size"]} {missing[0]["task"]} {missing[0]["group"]} seed '
                     f'{missing[0]["seed"]}); use the other --checkpoint.')
