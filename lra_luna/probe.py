"""The context probe: how much of its input a trained model uses.

  python -m lra_luna.probe WORKDIR [--windows 16,64,256,1024] [--checkpoint best|last] [--seed 0]
  python -m lra_luna.probe SWEEP_DIR [...]

Evaluates a finished run's checkpoint on the whole test split while the model sees only a window
of w real tokens, the rest masked out as padding (batch['visible'], models/classifier.py: masked
keys, zeroed embeddings, as padding is), for each w and three window placements: the `start` of
the input, its `end`, and a `random` place (per example, seeded by --seed). Tokens keep their
positions; [CLS] is always seen. An input shorter than w is seen whole. Retrieval windows each
document alike; the pixel tasks (every row full) window whole rows of the image in raster order,
w rounded up to whole rows. Writes WORKDIR/probe.json (windows, accuracy per placement, the
full-input accuracy and the majority-class rate) and WORKDIR/probe.png. Given a folder of runs
(a sweep), it probes every finished run below it and writes SWEEP_DIR/report/probe_<task>.png,
a line per model (mean over seeds); `python -m lra_luna.report` draws the same from the
probe.json files it finds. Default windows: 16, 64, 256, ... below max_length, then max_length.
A window of 0, one beyond max_length, or a folder with no finished run is refused in one line.
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
def default_windows(max_length: int) -> list[int]:
  """16, 64, 256, ... below max_length, then max_length."""
  windows, w = [], 16
  while w < max_length:
    windows.append(w)
    w *= 4
  return windows + [max_length]


def check_windows(windows, max_length: int) -> list[int]:
  """The sorted distinct windows; ValueError in one line for one < 1 or beyond max_length."""
  for w in windows:
    if w < 1:
      raise ValueError(f'--windows: a window of {w} tokens shows the model nothing; give '
                       'windows of 1 token or more.')
    if w > max_length:
      raise ValueError(f'--windows: {w} is beyond this run\'s max_length {max_length}; give '
                       f'windows up to {max_length}.')
  return sorted(set(windows))


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


def visible_tokens(inputs, width: int, placement: str, rng, *, full_length: bool, unit: int = 1):
  """bool [N, n]: the tokens of each row inside its window of `width` tokens. Real tokens: the
  non-zero prefix (every token with `full_length`). With `unit` > 1 (an image row) the window is
  ceil(width / unit) whole units."""
  inputs = np.asarray(inputs)
  n = inputs.shape[1]
  lengths = np.full(len(inputs), n) if full_length else np.sum(inputs != 0, axis=1)
  unit_lengths, units = -(-lengths // unit), -(-width // unit)
  starts = window_starts(unit_lengths, units, placement, rng)[:, None]
  position = np.arange(n)[None, :] // unit
  return (position >= starts) & (position < starts + units) & (np.arange(n) < lengths[:, None])


def row_unit(config) -> int:
  """Tokens per window unit: an image row for the pixel tasks (every row full), else 1."""
  return math.isqrt(config.max_length) if tasks.get(config.task).full_length else 1


def windowed_split(split: dict, config, width: int, placement: str, seed: int) -> dict:
  """The split's arrays with 'visible' (Retrieval: 'visible1', 'visible2') for one window."""
  full_length = tasks.get(config.task).full_length
  arrays = dict(split)
  for index, key in enumerate(k for k in ('inputs', 'inputs1', 'inputs2') if k in split):
    rng = np.random.default_rng([seed, width, index])
    arrays[key.replace('inputs', 'visible')] = visible_tokens(
        split[key], width, placement, rng, full_length=full_length, unit=row_unit(config))
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


def probe_run(workdir, windows=None, checkpoint: str = 'best', seed: int = 0) -> dict:
  """Probes one finished run; writes probe.json and probe.png there and returns the probe."""
  workdir = pathlib.Path(workdir)
  config = evaluate.load_run_config(workdir)
  windows = check_windows(windows or default_windows(config.max_length), config.max_length)
  evaluate.saved_checkpoints(workdir, [checkpoint])
  data = datasets.load_task(config)
  graphdef, state, step = evaluate.restore_model(workdir, config, data, checkpoint)
  mesh = steps_lib.make_mesh()
  evaluator = steps_lib.make_evaluator(config, graphdef, mesh)
  state = jax.device_put(steps_lib.stack_trees([state]), NamedSharding(mesh, PartitionSpec()))
  accuracy = lambda arrays: float(evaluator(state, arrays)['accuracy'][0])
  test = data.splits['test']
  results = json.loads((workdir / run_folder.RESULTS_FILE).read_text())
  probe = {'task': config.task, 'model': results['model'], 'head': config.model.head,
           'seed': config.seed, 'checkpoint': checkpoint, 'step': int(step),
           'window_seed': seed, 'window_unit': row_unit(config), 'windows': windows,
           'test_examples': len(test['targets']), 'full_accuracy': accuracy(test),
           'majority_rate': steps_lib.majority_rate(test['targets']),
           'accuracy': {p: [accuracy(windowed_split(test, config, w, p, seed)) for w in windows]
                        for p in PLACEMENTS}}
  run_folder.write_json_atomically(workdir / figures.PROBE_FILE, probe)
  figures.run_probe_figure(probe, workdir / figures.PROBE_FIGURE)
  return probe


def probe_folder(folder, windows=None, checkpoint: str = 'best', seed: int = 0) -> list:
  """Probes every finished run of `folder`; for a folder of runs (a sweep), also one figure per
  task in its report/. Returns the paths written."""
  runs = finished_runs(folder)
  probes, paths = [], []
  for workdir in runs:
    print(f'probing {workdir}', file=sys.stderr)
    probes.append(probe_run(workdir, windows, checkpoint, seed))
    paths += [workdir / figures.PROBE_FILE, workdir / figures.PROBE_FIGURE]
  if runs != [pathlib.Path(folder)]:
    out_dir = run_folder.report_dir(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths += figures.write_probe_figures(probes, out_dir)
  return paths


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.probe', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('workdir', help='a finished run_lra.py workdir, or a folder of runs')
  parser.add_argument('--windows', type=cli.int_list, default=None,
                      help='window widths in tokens, e.g. 16,64,256,1024 (default: 16, 64, ... '
                      'below max_length, then max_length)')
  parser.add_argument('--checkpoint', choices=list(run_folder.CHECKPOINT_FOLDERS), default='best')
  parser.add_argument('--seed', type=int, default=0, help='seed of the random placements')
  args = parser.parse_args(argv)
  logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every restore at INFO.
  try:
    with contextlib.redirect_stdout(sys.stderr):  # stdout: only the paths written
      paths = probe_folder(args.workdir, args.windows, args.checkpoint, args.seed)
  except (ValueError, FileNotFoundError) as e:  # Bad input: one line, no traceback.
    print(f'error: {e}', file=sys.stderr)
    return 1
  print('Wrote ' + ', '.join(str(p) for p in paths))
  return 0


if __name__ == '__main__':
  sys.exit(main())
