"""`python -m lra_luna.report`: reads a sweep folder (or a record), writes its tables and figures."""

import json
import pathlib
import sys

from lra_luna import cli
from lra_luna import published
from lra_luna import tables
from lra_luna.report import figures
from lra_luna.report import orderings
from lra_luna.report import recall
from lra_luna.report import record
from lra_luna.report import runs
from lra_luna.report import sources
from lra_luna.report import tables as accuracy_tables
from lra_luna.training import run_folder


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


def select_size(rows: list[dict], size: str | None, where) -> list[dict]:
  """The record rows of `size`, all without one; ValueError in one line naming the sizes there
  when none is of that size."""
  chosen = [row for row in rows if not size or row['size'] == size]
  if not chosen:
    raise ValueError(f'{where} holds no finished run of size {size!r}; its sizes: '
                     f'{", ".join(sorted({row["size"] for row in rows}))} (--size).')
  return chosen


def write_evidence(rows: list[dict], checkpoint: str, out_dir, where) -> list:
  """groups.{md,tex,csv}, orderings.{md,tex,csv} and groups.png of record rows."""
  record.check_checkpoint(rows, where, checkpoint)
  groups = orderings.groups_of(rows, checkpoint)
  paths = tables.write(orderings.groups_table(groups, checkpoint), out_dir)
  paths += tables.write(orderings.orderings_table(groups, checkpoint), out_dir)
  figure = pathlib.Path(out_dir) / orderings.FIGURE
  orderings.write_figure(groups, checkpoint, figure)
  return paths + [figure]


def report_record(path, checkpoint: str, out_dir=None, size: str | None = None) -> list:
  """The group and ordering tables and the group figure of a record CSV's LRA rows
  (report/record.py), the MQAR table and figures of its MQAR rows (report/recall.py)."""
  if not pathlib.Path(path).is_file():
    raise FileNotFoundError(f'{path}: no such record; write one with `python -m lra_luna.report '
                            'SWEEP_DIR --record FILE`.')
  rows, recall_rows = recall.split(select_size(record.read(path), size, path))
  out_dir = pathlib.Path(out_dir or pathlib.Path('runs') / f'report_{pathlib.Path(path).stem}')
  paths = write_evidence(rows, checkpoint, out_dir, path) if rows else []
  if recall_rows:
    paths += recall.write_report(recall_rows, checkpoint, out_dir, path,
                                 notes=recall.record_notes(recall_rows, path))
  return paths


def make_report(sweep_dir, checkpoint: str = 'last', profile=None, out_dir=None,
                size: str | None = None, record_path=None) -> list:
  """Writes the tables and the figures of a sweep folder (or, given a record CSV, its group and
  ordering tables and group figure, and its MQAR table and figures); returns the paths written.
  `record_path`: merge the folder's runs into that record first. MQAR runs have their own table
  and figures (report/recall.py); the LRA tables, groups and Figure 1 are those of the other
  runs."""
  if checkpoint not in runs.CHECKPOINTS:
    raise ValueError(f'checkpoint = {checkpoint!r}; valid choices: {list(runs.CHECKPOINTS)}.')
  if pathlib.Path(sweep_dir).suffix == '.csv':
    if record_path:
      raise ValueError(f'{sweep_dir} is a record already; --record takes a sweep folder.')
    return report_record(sweep_dir, checkpoint, out_dir, size)
  profile = load_profile(profile) if profile else None  # Before any work: a typo fails fast.
  results = runs.load_results(sweep_dir, size)
  if not results:
    raise FileNotFoundError(f'No {run_folder.RESULTS_FILE} under {sweep_dir}; train a sweep '
                            'first (python -m lra_luna.sweep, README).')
  results, recall_results = recall.split(results)
  rows = record.rows_of(results, orderings.group_name)
  recall_rows = recall.record_rows(recall_results)
  if record_path:
    count = record.write(record_path, rows + recall_rows)
    print(f'record: {len(rows) + len(recall_rows)} runs merged into {record_path} ({count} runs '
          'in it).')
  out_dir = pathlib.Path(out_dir or run_folder.report_dir(sweep_dir))
  data = sources.data_sources(results)
  paths = []
  if results:
    paths += report_lra(results, rows, data, checkpoint, profile, sweep_dir, out_dir)
  if recall_results:
    note = sources.campaign_note(sweep_dir, {**data,
                                             recall.TASK: recall.data_words(recall_results)})
    paths += recall.write_report(recall_rows, checkpoint, out_dir, sweep_dir, note,
                                 recall.folder_notes(recall_results))
  return paths


def report_lra(results: list[dict], rows: list[dict], data: dict, checkpoint: str, profile,
               sweep_dir, out_dir) -> list:
  """Tables 1 and 3, positions, SPT, groups and orderings, Figure 1 and the probe figures of
  the (non-MQAR) runs; `rows` their record rows, `data` their data sources."""
  summary = runs.summarize(results, checkpoint)
  note = sources.campaign_note(sweep_dir, data)
  paths = []
  records = runs.run_records(results, runs.TASK_NAMES)
  built = [accuracy_tables.table1(summary, checkpoint, records),
           accuracy_tables.table3(summary, checkpoint,
                                  runs.run_records(results, published.CLS_VS_P_TASKS)),
           accuracy_tables.positions_table(summary, checkpoint, records),
           accuracy_tables.table_spt(summary, checkpoint, records,
                                     runs.pretraining_summary(results))]
  for table in built:
    if table is None:  # no row of its kind: no run from scratch, with a P, rotary or SPT
      continue
    table.notes.insert(0, sources.data_note(data, [key for key, _ in table.columns]))
    if table.name == 'table1':  # what one cue of the same data gives, where it is here
      from lra_luna import cues  # pylint: disable=import-outside-toplevel  (numpy: only with data)
      table.notes += cues.cue_notes(cues.sweep_cues(
          {r['task']: r.get('data') for r in results}))
    paths += tables.write(accuracy_tables.as_table(table, checkpoint, note), out_dir)
  paths += write_evidence(rows, checkpoint, out_dir, sweep_dir)
  paths += figures.write_figure(summary, results, profile, checkpoint, out_dir, caption=note)
  probes = [json.loads(path.read_text()) for path in
            (pathlib.Path(r['workdir']) / figures.PROBE_FILE for r in results) if path.is_file()]
  if probes:  # runs probed by python -m lra_luna.probe
    paths += figures.write_probe_figures(probes, out_dir)
  return paths


def main(argv=None) -> int:
  from lra_luna import report  # pylint: disable=g-import-not-at-top  (its docstring is the help)
  parser = cli.ArgumentParser(
      prog='python -m lra_luna.report', description=report.__doc__,
      epilog='Example: python -m lra_luna.report runs/sweep_listops_quick prints Tables 1 and 3 '
      'and the published orderings, and writes them with Figure 1 to '
      'runs/sweep_listops_quick/report/ (README, "Five seeds and the paper\'s tables").')
  parser.add_argument('sweep_dir', metavar='SWEEP_DIR_OR_RECORD',
                      help='folder searched for results.json files, or a record CSV (--record)')
  parser.add_argument('--size', help="only the runs of this size (their presets' size words: "
                      'quick, mid, mid,long, full)')
  parser.add_argument('--record', help="merge each finished run's row into this record CSV "
                      '(your own file; it can stand in for the folder later)')
  parser.add_argument('--checkpoint', choices=list(runs.CHECKPOINTS), default='last',
                      help='which test numbers: of the last or the best-on-validation checkpoint')
  parser.add_argument('--profile', help=f'optional: {run_folder.PROFILE_FILE} of python -m '
                      "lra_luna.profile, for Figure 1's speed and memory (without it: the runs' "
                      'logged speed)')
  parser.add_argument('--out_dir', help='output folder (default: SWEEP_DIR/report; for a record '
                      'runs/report_<its name>)')
  args = parser.parse_args(argv)
  try:
    paths = make_report(args.sweep_dir, args.checkpoint, args.profile, args.out_dir, args.size,
                        args.record)
  except (ValueError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  for path in paths:
    if path.suffix == '.md':
      print(path.read_text())
  print('Wrote ' + ', '.join(str(p) for p in paths))
  return 0
