"""The context probe: how much of its input a trained model uses.

  python -m lra_luna.probe WORKDIR [--windows 2,4,8,16] [--relative] [--checkpoint best|last]
  python -m lra_luna.probe SWEEP_DIR [...]

Evaluates a finished run's checkpoint on the whole test split while the model sees only a window
of w real tokens, the rest masked out as padding (batch['visible'], models/classifier.py: masked
keys, zeroed embeddings, as padding is), for each w and three window placements: the `start` of
the input, its `end`, and a `random` place (per example, seeded by --seed). Tokens keep their
positions; [CLS] is always seen. An input shorter than w is seen whole. Retrieval windows each
document alike; the pixel tasks (every row full) window whole rows of the image in raster order,
w rounded up to whole rows. With --relative a window is a fraction f of each input: ceil(f x its
real length) tokens, so inputs of different lengths compare.

Default windows come from the test inputs' own lengths (real tokens): 1/16, 1/8, 1/4 and 1/2
of the median length, the median, the 90th percentile and the longest input (which shows every
input whole); with --relative 1/16, 1/8, 1/4, 1/2 and 1. Windows that all reach the median
length (most inputs then seen whole at every window: flat lines) get a warning.

Writes WORKDIR/probe.json (windows, accuracy per placement, the full-input accuracy, the
majority-class rate and the test inputs' length distribution: median, 90th percentile, max)
and WORKDIR/probe.png (the median length marked), and prints the length distribution and the
accuracy table. Given a folder of runs (a sweep), it probes every finished run below it and
writes SWEEP_DIR/report/probe_<task>.png (probe_<task>_relative.png), a line per model (mean
over seeds); `python -m lra_luna.report` draws the same from the probe.json files it finds.
A window of 0, a repeated one, one beyond max_length (a fraction above 1), or a folder with no
finished run is refused in one line.
"""

import argparse
import contextlib
import json
import math
import pathlib
import sys

import jax
import numpy as np
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna import cli
from lra_luna import datasets
from lra_luna import evaluate
from lra_luna import tasks
from lra_luna.report import figures
from lra_luna.training import run_folder
from lra_luna.training import steps as steps_lib

PLACEMENTS = figures.PLACEMENTS


# ----------------------------------------------------------------------------------------------
# Windows: pure numpy.
# ----------------------------------------------------------------------------------------------
RELATIVE_WINDOWS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)


def real_lengths(split: dict, config) -> np.ndarray:
  """Real tokens of each test input, [N] (Retrieval: [2N], each document; the pixel tasks:
  every token is real)."""
  full_length = tasks.get(config.task).full_length
  arrays = [np.asarray(split[k]) for k in ('inputs', 'inputs1', 'inputs2') if k in split]
  return np.concatenate([np.full(len(a), a.shape[1]) if full_length else np.sum(a != 0, axis=1)
                         for a in arrays])


def length_summary(lengths) -> dict:
  """{'median', 'p90', 'max', 'inputs'} of real lengths (tokens)."""
  lengths = np.asarray(lengths)
  return {'median': float(np.median(lengths)), 'p90': float(np.percentile(lengths, 90)),
          'max': int(lengths.max()), 'inputs': int(lengths.size)}


def default_windows(lengths: dict, relative: bool = False) -> list:
  """Windows from the inputs' own lengths (length_summary): fractions 1/16 .. 1/2 of the median,
  the median, the 90th percentile and the longest input (every input whole); relative:
  RELATIVE_WINDOWS."""
  if relative:
    return list(RELATIVE_WINDOWS)
  median = lengths['median']
  windows = [max(1, round(median * f)) for f in RELATIVE_WINDOWS]
  return sorted({*windows, max(1, round(lengths['p90'])), lengths['max']})


def check_windows(windows, max_length: int, relative: bool = False) -> list:
  """The sorted distinct windows; ValueError in one line for one < 1 token (or fraction <= 0)
  or beyond max_length (a fraction above 1), or a fraction of tokens without --relative."""
  for w in windows:
    if relative:
      if not 0 < w <= 1:
        raise ValueError(f'--windows: {w:g} is no fraction of an input; with --relative give '
                         'fractions above 0 and up to 1, e.g. 0.125,0.25,0.5,1.')
      continue
    if w != int(w):
      raise ValueError(f'--windows: {w:g} is no whole number of tokens; give token counts, or '
                       'add --relative for fractions of each input.')
    if w < 1:
      raise ValueError(f'--windows: a window of {w:g} tokens shows the model nothing; give '
                       'windows of 1 token or more.')
    if w > max_length:
      raise ValueError(f'--windows: {w:g} is beyond this run\'s max_length {max_length}; give '
                       f'windows up to {max_length}.')
  return sorted({w if relative else int(w) for w in windows})


def window_warning(windows, lengths: dict, relative: bool = False) -> str | None:
  """A warning when every window reaches the median input: most inputs are then seen whole at
  every window and the probe's lines are flat."""
  if relative or min(windows) < lengths['median']:
    return None
  suggested = ','.join(map(str, default_windows(lengths)))
  return (f'every window (the smallest {min(windows)}) is at least the median test input '
          f'({lengths["median"]:g} real tokens): most inputs are seen whole at every window, so '
          f'the lines are flat; give smaller windows (e.g. --windows {suggested}, the default) '
          'or --relative.')


def window_starts(lengths, width, placement: str, rng: np.random.Generator) -> np.ndarray:
  """First unit of each example's window of `width` units, lengths [N] in units (a window
  wider than the input starts at 0): 'start' 0, 'end' length - width, 'random' uniform."""
  room = np.maximum(np.asarray(lengths) - width, 0)
  if placement == 'start':
    return np.zeros_like(room)
  if placement == 'end':
    return room
  if placement == 'random':
    return rng.integers(0, room + 1)
  raise ValueError(f'Unknown window placement {placement!r}; valid: {PLACEMENTS}.')


def visible_tokens(inputs, width, placement: str, rng, *, full_length: bool, unit: int = 1,
                   relative: bool = False):
  """bool [N, n]: the tokens of each row inside its window of `width` tokens (`relative`: of
  ceil(width x the row's real length) tokens). Real tokens: the non-zero prefix (every token
  with `full_length`). With `unit` > 1 (an image row) the window is ceil(tokens / unit) whole
  units."""
  inputs = np.asarray(inputs)
  n = inputs.shape[1]
  lengths = np.full(len(inputs), n) if full_length else np.sum(inputs != 0, axis=1)
  if relative:
    width = np.maximum(np.ceil(width * lengths - 1e-9).astype(int), 1)
  unit_lengths, units = -(-lengths // unit), -(-np.asarray(width) // unit)
  starts = window_starts(unit_lengths, units, placement, rng)
  units = np.broadcast_to(units, starts.shape)[:, None]
  position = np.arange(n)[None, :] // unit
  return ((position >= starts[:, None]) & (position < starts[:, None] + units)
          & (np.arange(n) < lengths[:, None]))


def row_unit(config) -> int:
  """Tokens per window unit: an image row for the pixel tasks (every row full), else 1."""
  return math.isqrt(config.max_length) if tasks.get(config.task).full_length else 1


def windowed_split(split: dict, config, width, placement: str, seed: int,
                   relative: bool = False) -> dict:
  """The split's arrays with 'visible' (Retrieval: 'visible1', 'visible2') for one window."""
  full_length = tasks.get(config.task).full_length
  arrays = dict(split)
  for index, key in enumerate(k for k in ('inputs', 'inputs1', 'inputs2') if k in split):
    rng = np.random.default_rng([seed, round(width * 2**20) if relative else width, index])
    arrays[key.replace('inputs', 'visible')] = visible_tokens(
        split[key], width, placement, rng, full_length=full_length, unit=row_unit(config),
        relative=relative)
  return arrays


# ----------------------------------------------------------------------------------------------
# Probing runs.
# ----------------------------------------------------------------------------------------------
def finished_runs(folder) -> list[pathlib.Path]:
  """The run folder itself if it finished (results.json), else every finished run below it.
  FileNotFoundError in one line when there is none."""
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise FileNotFoundError(f'{folder}: no such folder; give a run_lra.py workdir or a sweep.')
  if (folder / run_folder.RESULTS_FILE).is_file():
    return [folder]
  runs = [p.parent for p in run_folder.result_files(folder)]
  if not runs:
    raise FileNotFoundError(f'{folder} holds no finished run (no {run_folder.RESULTS_FILE} in it '
                            'or below it); train one with run_lra.py or the sweep first.')
  return runs


def probe_run(workdir, windows=None, checkpoint: str = 'best', seed: int = 0,
              relative: bool = False) -> dict:
  """Probes one finished run; writes probe.json and probe.png there and returns the probe. A
  warning (window_warning) goes to stderr and into probe.json."""
  workdir = pathlib.Path(workdir)
  config = evaluate.load_run_config(workdir)
  if windows is not None:  # a bad window: refused before any data is read
    windows = check_windows(windows, config.max_length, relative)
  evaluate.saved_checkpoints(workdir, [checkpoint])
  data = datasets.load_task(config)
  test = data.splits['test']
  lengths = length_summary(real_lengths(test, config))
  windows = check_windows(windows or default_windows(lengths, relative), config.max_length,
                          relative)
  warning = window_warning(windows, lengths, relative)
  if warning:
    print(f'warning: {workdir}: {warning}', file=sys.stderr)
  graphdef, state, step = evaluate.restore_model(workdir, config, data, checkpoint)
  mesh = steps_lib.make_mesh()
  evaluator = steps_lib.make_evaluator(config, graphdef, mesh)
  state = jax.device_put(steps_lib.stack_trees([state]), NamedSharding(mesh, PartitionSpec()))
  accuracy = lambda arrays: float(evaluator(state, arrays)['accuracy'][0])
  results = json.loads((workdir / run_folder.RESULTS_FILE).read_text())
  probe = {'task': config.task, 'model': results['model'], 'head': config.model.head,
           'seed': config.seed, 'checkpoint': checkpoint, 'step': int(step),
           'window_seed': seed, 'window_unit': row_unit(config), 'relative': relative,
           'windows': windows, 'input_lengths': {'test': lengths},
           'warnings': [warning] if warning else [],
           'test_examples': len(test['targets']), 'full_accuracy': accuracy(test),
           'majority_rate': steps_lib.majority_rate(data.splits['train']['targets'],
                                                   test['targets']),
           'accuracy': {p: [accuracy(windowed_split(test, config, w, p, seed, relative))
                            for w in windows] for p in PLACEMENTS}}
  run_folder.write_json_atomically(workdir / figures.PROBE_FILE, probe)
  figures.run_probe_figure(probe, workdir / figures.PROBE_FIGURE)
  return probe


def describe_lengths(lengths: dict) -> str:
  """'median 10, 90th percentile 21, max 60 real tokens (500 inputs)'."""
  return (f"median {lengths['median']:g}, 90th percentile {lengths['p90']:g}, max "
          f"{lengths['max']} real tokens ({lengths['inputs']} inputs)")


def probe_table(probe: dict) -> str:
  """The probe as printed: what was probed, the test inputs' lengths, then a row per window
  (its width in tokens, or a fraction of each input; the test accuracy in % per placement),
  the full input and the majority class."""
  relative = probe.get('relative', False)
  column = 'window (fraction of each input)' if relative else 'window (tokens)'
  lines = [f"{probe['task']} / {probe['model']}, seed {probe['seed']}, {probe['checkpoint']} "
           f"checkpoint (step {probe['step']}), {probe['test_examples']} test examples",
           f"test inputs: {describe_lengths(probe['input_lengths']['test'])}",
           f"| {column} | " + ' | '.join(f'{p}: accuracy (%)' for p in PLACEMENTS) + ' |',
           '|---:|' + '---:|' * len(PLACEMENTS)]
  for i, w in enumerate(probe['windows']):
    lines.append(f'| {w:g} | ' + ' | '.join(f"{100 * probe['accuracy'][p][i]:.1f}"
                                           for p in PLACEMENTS) + ' |')
  lines.append(f"full input {100 * probe['full_accuracy']:.1f}%, majority class "
               f"{100 * probe['majority_rate']:.1f}%")
  return '\n'.join(lines)


def probe_folder(folder, windows=None, checkpoint: str = 'best', seed: int = 0,
                 relative: bool = False) -> tuple[list, list]:
  """Probes every finished run of `folder`; for a folder of runs (a sweep), also one figure per
  task in its report/. Returns (the probes, the paths written)."""
  runs = finished_runs(folder)
  probes, paths = [], []
  for workdir in runs:
    print(f'probing {workdir}', file=sys.stderr)
    probes.append(probe_run(workdir, windows, checkpoint, seed, relative))
    paths += [workdir / figures.PROBE_FILE, workdir / figures.PROBE_FIGURE]
  if runs != [pathlib.Path(folder)]:
    out_dir = run_folder.report_dir(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths += figures.write_probe_figures(probes, out_dir)
  return probes, paths


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.probe', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('workdir', help='a finished run_lra.py workdir, or a folder of runs')
  parser.add_argument('--windows', type=cli.number_list('2,4,8,16 (fractions such as '
                                                        '0.25,0.5,1 with --relative)'), default=None,
                      help='window widths in tokens, e.g. 2,4,8,16; with --relative fractions '
                      'of each input, e.g. 0.25,0.5,1 (default: from the test inputs\' lengths)')
  parser.add_argument('--relative', action='store_true',
                      help='windows as fractions of each input\'s real length')
  parser.add_argument('--checkpoint', choices=list(run_folder.CHECKPOINT_FOLDERS), default='best')
  parser.add_argument('--seed', type=int, default=0, help='seed of the random placements')
  args = parser.parse_args(argv)
  logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every restore at INFO.
  try:
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the tables and the paths written
      probes, paths = probe_folder(args.workdir, args.windows, args.checkpoint, args.seed,
                                   args.relative)
  except (ValueError, FileNotFoundError) as e:  # Bad input: one line, no traceback.
    print(f'error: {e}', file=sys.stderr)
    return 1
  for probe in probes:
    print(probe_table(probe) + '\n')
  print('Wrote ' + ', '.join(str(p) for p in paths))
  return 0


if __name__ == '__main__':
  sys.exit(main())
