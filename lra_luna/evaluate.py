"""Validation and test metrics of a trained run's checkpoints, without training (LRA's --test_only).

  python -m lra_luna.evaluate runs/listops_luna16_quick [--checkpoint best|last]

Rebuilds the model from WORKDIR/config.json, restores the best checkpoint (highest validation
accuracy) and the last one (the latest saved: the end of training for a finished run), and
evaluates each on every validation and test example with the training's own evaluation
(`steps.make_evaluator`), so a finished run gets exactly its results.json `best` and `last`
sections back. Data is read as training read it (config.json's data_dir, else $LRA_DATA_DIR,
else data/store/); a plug-in attention given by a relative path is found from the current
directory. Prints JSON; a workdir without config.json or checkpoints is refused in one line.
"""

import contextlib
import json
import pathlib
import sys

import jax
import ml_collections
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna import cli
from lra_luna import console
from lra_luna import config_lib
from lra_luna import datasets
from lra_luna.training import checkpoints
from lra_luna.training import run_folder
from lra_luna.training import steps as steps_lib


def load_run_config(workdir) -> ml_collections.ConfigDict:
  """The validated config of the run in `workdir`; FileNotFoundError if it holds none."""
  workdir = pathlib.Path(workdir)
  path = workdir / run_folder.CONFIG_FILE
  if not workdir.is_dir():
    raise FileNotFoundError(f'{workdir}: no such folder; give the --workdir of a run_lra.py run.')
  if not path.is_file():
    runs = sorted(str(p.parent) for p in workdir.rglob(run_folder.CONFIG_FILE))
    if runs:  # A sweep's root: name the runs below it.
      more = f' (and {len(runs) - 5} more)' if len(runs) > 5 else ''
      raise FileNotFoundError(f'{workdir} holds no run itself but {len(runs)} run folder(s) below '
                              f'it: {", ".join(runs[:5])}{more}; give one of them.')
    raise FileNotFoundError(f'{workdir} has no {run_folder.CONFIG_FILE}: not a run_lra.py workdir.')
  config = config_lib.saved_config(json.loads(path.read_text()))
  config_lib.validate(config)
  return config


def saved_checkpoints(workdir, wanted=None) -> dict:
  """{'best' | 'last': step} of the wanted checkpoints (default: those of both that exist).
  FileNotFoundError when a wanted one, or both, are missing."""
  names = wanted or list(run_folder.CHECKPOINT_FOLDERS)
  steps = {name: run_folder.saved_step(workdir, run_folder.CHECKPOINT_FOLDERS[name]) for name in names}
  missing = [name for name, step in steps.items() if step is None]
  if missing and (wanted or len(missing) == len(names)):
    folders = ', '.join(f'checkpoints/{run_folder.CHECKPOINT_FOLDERS[name]}/' for name in missing)
    raise FileNotFoundError(f'{workdir} has no {" and no ".join(missing)} checkpoint (nothing in '
                            f'{folders}); train it first with run_lra.py.')
  return {name: step for name, step in steps.items() if step is not None}


def restore_model(workdir, config, sizes, checkpoint: str):
  """(graphdef, train state, step) of the run's model at its 'best' or 'last' checkpoint.
  sizes: anything with the task's vocab_size and num_classes (the data, or a namespace)."""
  model_cfg = steps_lib.model_config(config, sizes)
  graphdef, state, _ = steps_lib.init_state(model_cfg, config.seed,
                                        steps_lib.make_optimizer(config))
  ckpt = checkpoints.Checkpoints(workdir)
  try:
    step, state = ckpt.restore_state(run_folder.CHECKPOINT_FOLDERS[checkpoint], state)
  finally:
    ckpt.close()
  return graphdef, state, step


def evaluate_workdir(workdir, wanted=None) -> dict:
  """{'task', 'model', 'head', 'seed', and per checkpoint ('best', 'last') the results.json
  section: step, val_/test_accuracy and loss, test_examples}."""
  workdir = pathlib.Path(workdir)
  config = load_run_config(workdir)
  steps = saved_checkpoints(workdir, wanted)
  data = datasets.load_task(config)
  mesh = steps_lib.make_mesh()
  results = {'task': config.task, 'model': config_lib.model_label(config),
             'head': config.model.head, 'seed': config.seed}
  evaluate = None
  for name in steps:
    graphdef, state, step = restore_model(workdir, config, data, name)
    evaluate = evaluate or steps_lib.make_evaluator(config, graphdef, mesh)  # One compile for both.
    # A stack of one seed, replicated over the devices, as training evaluates.
    state = jax.device_put(steps_lib.stack_trees([state]), NamedSharding(mesh, PartitionSpec()))
    results[name] = steps_lib.checkpoint_metrics(
        step, evaluate(state, data.splits['validation'], shown_progress(f'{name} validation')),
        evaluate(state, data.splits['test'], shown_progress(f'{name} test')), 0)
  return results


def shown_progress(desc: str):
  """An evaluator's on_batch that shows the pass's progress as training does (console)."""
  progress = None

  def on_batch(done: int, total: int) -> None:
    nonlocal progress
    progress = progress or console.Progress(total, desc, 'batch', leave=False)
    progress.update(1)
    if done == total:
      progress.close()
  return on_batch


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.evaluate', description=__doc__)
  parser.add_argument('workdir', help='a run_lra.py workdir')
  parser.add_argument('--checkpoint', choices=list(run_folder.CHECKPOINT_FOLDERS), default=None,
                      help='evaluate only this checkpoint (default: best and last)')
  args = parser.parse_args(argv)
  logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every restore at INFO.
  try:
    # stdout carries only the JSON; the readers' progress lines go to stderr.
    with contextlib.redirect_stdout(sys.stderr):
      results = evaluate_workdir(args.workdir, args.checkpoint and [args.checkpoint])
  except (ValueError, FileNotFoundError) as e:  # Bad input: one line, no traceback.
    print(f'error: {e}', file=sys.stderr)
    return 1
  print(json.dumps(results, indent=2, sort_keys=True))
  return 0


if __name__ == '__main__':
  sys.exit(main())
