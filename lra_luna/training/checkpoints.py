"""Orbax checkpoints of a run: the latest (for resuming) and the best on validation.

`<workdir>/checkpoints/latest/<step>/` holds the train state, the grain iterator state (so a
resumed run sees exactly the batches it would have seen) and the run's bookkeeping (best so far);
`<workdir>/checkpoints/best/<step>/` holds the state with the best validation accuracy.
Saves are synchronous and atomic (orbax writes a temporary folder, then renames it), so a run
killed at any point resumes from the last complete checkpoint.
"""

import pathlib

import jax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna.training import run_folder
from lra_luna.training import steps


def _manager(directory: pathlib.Path, item_names):
  options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True,
                                         enable_async_checkpointing=False)
  return ocp.CheckpointManager(directory.absolute(), options=options, item_names=item_names)


class Checkpoints:
  """The latest and the best checkpoint of one workdir."""

  def __init__(self, workdir):
    folders = run_folder.CHECKPOINT_FOLDERS
    self.latest = _manager(run_folder.checkpoint_dir(workdir, folders['last']),
                           ('state', 'data', 'info'))
    self.best = _manager(run_folder.checkpoint_dir(workdir, folders['best']), ('state',))

  def save_latest(self, step: int, state, train_iter, info: dict) -> None:
    if step in self.latest.all_steps():
      return
    self.latest.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        # Every process advances its shard in lockstep, so process 0's iterator state is everyone's.
        data=ocp.args.JsonSave(train_iter.get_state()),
        info=ocp.args.JsonSave(info)))

  def restore_latest(self, state, train_iter):
    """(state, info) from the latest checkpoint, with train_iter moved to its position; or the
    given state and {} when there is none."""
    step = self.latest.latest_step()
    if step is None:
      return state, {}
    restored = self.latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(state), data=ocp.args.JsonRestore(),
        info=ocp.args.JsonRestore()))
    train_iter.set_state(restored['data'])
    return restored['state'], restored['info']

  def save_best(self, step: int, state) -> None:
    if step in self.best.all_steps():
      return
    self.best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))

  def restore_best(self, state):
    return self.restore_state('best', state)[1]

  def restore_state(self, which: str, state) -> tuple[int, dict]:
    """(step, train state) of the 'latest' or the 'best' checkpoint; `state` gives the structure.
    Raises FileNotFoundError when there is none."""
    manager = {'latest': self.latest, 'best': self.best}[which]
    step = manager.latest_step()
    if step is None:
      raise FileNotFoundError(f'No {which} checkpoint under {manager.directory}.')
    return step, manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(state)))['state']

  def close(self) -> None:
    self.latest.close()
    self.best.close()


# The checkpoints of every seed of a (multi-seed) run (train.SeedRun: its checkpoints, data
# order and best so far), stacked along the seed axis as the loop trains them.
def restore_latest_of(runs, states, mesh):
  """(stacked state replicated over the mesh, start step) from each seed's latest checkpoint:
  parameters, optimizer, step, data order and best so far; the fresh states where none."""
  restored = [run.checkpoints.restore_latest(state, run.train_iter)
              for run, state in zip(runs, states)]
  for run, (state, info) in zip(runs, restored):
    run.best = info.get('best', run.best)
    run.validation_pending = info.get('validation_pending') == int(state['step'])
  start_steps = {int(state['step']) for state, _ in restored}
  if len(start_steps) > 1:
    raise run_folder.TrainingError(
        f'The workdirs {[str(run.workdir) for run in runs]} hold checkpoints of different '
        f'steps {sorted(start_steps)}; resume them one seed at a time.')
  stacked = steps.stack_trees([state for state, _ in restored])
  return jax.device_put(stacked, NamedSharding(mesh, PartitionSpec())), start_steps.pop()


def save_latest_of(runs, state, step: int, validation_pending: bool = False) -> None:
  """Every seed's latest checkpoint at `step`; validation_pending: saved before that step's
  validation finished, which a resumed run then runs first."""
  info = {'validation_pending': step} if validation_pending else {}
  for i, run in enumerate(runs):
    run.checkpoints.save_latest(step, steps.unstack_tree(state, i), run.train_iter,
                                {'best': run.best, **info})
