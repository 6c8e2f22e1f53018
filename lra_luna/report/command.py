"""`python -m lra_luna.report`: reads a sweep folder, writes Tables 1 and 3 and Figure 1."""

import json
import pathlib
import sys

from lra_luna import cli
from lra_luna import published
from lra_luna import tables
from lra_luna.report import figures
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


def make_report(sweep_dir, checkpoint: str = 'last', profile=None, out_dir=None) -> list:
  """Writes the tables and the figure; returns the paths written."""
  if checkpoint not in runs.CHECKPOINTS:
    raise ValueError(f'checkpoint = {checkpoint!r}; valid choices: {list(runs.CHECKPOINTS)}.')
  profile = load_profile(profile) if profile else None  # Before any work: a typo fails fast.
  results = runs.load_results(sweep_dir)
  if not results:
    raise FileNotFoundError(f'No {run_folder.RESULTS_FILE} under {sweep_dir}.')
  out_dir = pathlib.Path(out_dir or run_folder.report_dir(sweep_dir))
  summary = runs.summarize(results, checkpoint)
  data = sources.data_sources(results)
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
    paths += tables.write(accuracy_tables.as_table(table, checkpoint, note), out_dir)
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
      'and writes them with Figure 1 to runs/sweep_listops_quick/report/ (README, "Five seeds '
      'and the paper\'s tables").')
  parser.add_argument('sweep_dir', help='folder searched for results.json files')
  parser.add_argument('--checkpoint', choices=list(runs.CHECKPOINTS), default='last',
                      help='which test numbers: of the last or the best-on-validation checkpoint')
  parser.add_argument('--profile', help=f'optional: {run_folder.PROFILE_FILE} of python -m '
                      "lra_luna.profile, for Figure 1's speed and memory (without it: the runs' "
                      'logged speed)')
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
