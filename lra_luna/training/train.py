"""The training loop: `train_and_evaluate(config, workdir)` and its multi-seed form `train_seeds`.

Read top to bottom: one record per seed, the loop (data, model, restore, train with periodic
evaluation and checkpoints, the final test of the best and the last checkpoint into
results.json), then its helpers. What the loop builds a run from (state, steps, optimizer,
evaluator, mesh) is in `steps`; the run folder's layout in `run_folder`; metrics and progress in
`metrics`. SIGINT or SIGTERM saves a checkpoint at the current step and stops (`Interrupted`).
"""

import dataclasses
import functools
import os
import pathlib
import signal
import sys
import threading

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna import config_lib
from lra_luna import datasets
from lra_luna.datasets import input_pipeline
from lra_luna.training import checkpoints as checkpoints_lib
from lra_luna.training import metrics as metrics_lib
from lra_luna.training import run_folder
from lra_luna.training import steps


@dataclasses.dataclass
class SeedRun:
  """One seed of a (multi-seed) run: its config, folder, data order, checkpoints and best so far."""
  config: ml_collections.ConfigDict  # the run's config with config.seed = this seed
  workdir: pathlib.Path
  train_iter: object = None          # this seed's shuffled training batches
  checkpoints: checkpoints_lib.Checkpoints | None = None
  best: dict = dataclasses.field(default_factory=lambda: {'step': -1, 'val_accuracy': -1.0})

  @property
  def seed(self) -> int:
    return self.config.seed


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM stopped training after `step`; the latest checkpoint is at `saved_step`.
  A KeyboardInterrupt, so that callers that go on after an error (sweep) stop too."""

  def __init__(self, signal_name: str, step: int, saved_step: int | None):
    super().__init__(f'{signal_name}: stopped at step {step}, latest checkpoint at step '
                     f'{saved_step}')
    self.signal_name, self.step, self.saved_step = signal_name, step, saved_step


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       overwrite: bool = False) -> dict:
  """Trains config's model on config's task in `workdir` (resuming what is there); returns results."""
  return train_seeds(config, [config.seed], [workdir], overwrite=overwrite)[0]


def train_seeds(config: ml_collections.ConfigDict, seeds, workdirs, *,
                overwrite: bool = False) -> list[dict]:
  """Trains one model per seed, all in one program (the step vmapped over seeds).

  Each seed gets its own parameters, dropout keys, data order, workdir, checkpoints, metrics and
  results.json, exactly as if it ran alone with config.seed = seed. Returns the results per seed.
  """
  steps.reuse_freed_host_memory()  # The step's buffers, reused instead of faulted in anew.
  runs = seed_runs(config, seeds, workdirs, overwrite)
  mesh = steps.make_mesh()
  data = datasets.load_task(config)  # One copy for every seed; each seed its own data order.
  for run in runs:
    run.train_iter = input_pipeline.train_iterator(data.splits['train'], config.batch_size,
                                                   run.seed)
  tx = steps.make_optimizer(config)
  graphdef, states, num_params = init_states(steps.model_config(config, data), seeds, tx)
  is_writer = jax.process_index() == 0
  for run in runs:
    if is_writer:
      run_folder.start_workdir(run.config, run.workdir, overwrite)
    run.checkpoints = checkpoints_lib.Checkpoints(run.workdir)
  state, start_step = restore(runs, states, mesh)
  monitor = metrics_lib.TrainingMonitor(
      config, seeds, [run.workdir for run in runs], open_writers(runs, start_step, num_params,
                                                                is_writer),
      schedule=steps.make_schedule(config), enabled=is_writer)
  label = config_lib.model_label(config)  # The preset name, or a plug-in's class name.
  say(is_writer, f'{config.task} / {label}, seeds {list(seeds)}: {num_params} parameters; '
      f'starting at step {start_step} of {config.num_train_steps}.')

  step_fn = jax.jit(jax.vmap(functools.partial(steps.train_step, graphdef=graphdef, tx=tx)),
                    donate_argnums=0)
  evaluate = steps.make_evaluator(config, graphdef, mesh)
  dropout_keys = jnp.stack([jax.random.fold_in(jax.random.key(s), 1) for s in seeds])
  with StopSignals() as stop:
    for step in range(start_step + 1, config.num_train_steps + 1):
      if stop.signal_name:
        raise interrupt(runs, state, step - 1, start_step, monitor, stop.signal_name)
      batch = steps.global_batch(mesh, input_pipeline.stack_examples(
          [next(run.train_iter) for run in runs]), seed_axis=True)
      state, step_metrics = step_fn(state, batch, dropout_keys)
      monitor.step_done(step, step_metrics)
      if itstime(step, config.log_every, config.num_train_steps):
        monitor.flush(step)
      if itstime(step, config.eval_every, config.num_train_steps):
        monitor.flush(step)
        validate(runs, state, step, evaluate(state, data.splits['validation']), monitor,
                 is_writer)
      if itstime(step, config.checkpoint_every, config.num_train_steps):
        monitor.flush(step)
        save_latest(runs, state, step)
  results = final_results(config, runs, state, data, evaluate, label, num_params, monitor,
                          is_writer)
  monitor.close()
  return results


# ----------------------------------------------------------------------------------------------
# The loop's helpers, in the order it calls them.
# ----------------------------------------------------------------------------------------------
def seed_runs(config, seeds, workdirs, overwrite: bool) -> list[SeedRun]:
  """One validated SeedRun per seed, its workdir checked; ValueError for what cannot run here."""
  if len(seeds) != len(workdirs) or not seeds:
    raise ValueError(f'Need one workdir per seed, got seeds {seeds} and workdirs {workdirs}.')
  runs = []
  for seed, workdir in zip(seeds, workdirs):
    seed_config = ml_collections.ConfigDict(config.to_dict())
    seed_config.seed = int(seed)
    config_lib.validate(seed_config)
    runs.append(SeedRun(seed_config, pathlib.Path(workdir)))
  for run in runs:
    run_folder.check_workdir(run.config, run.workdir, overwrite)
  for field in ('batch_size', 'eval_batch_size'):
    if config[field] % jax.device_count():
      raise ValueError(f'config.{field} = {config[field]} does not divide over '
                       f'{jax.device_count()} devices; use a multiple of {jax.device_count()}.')
  return runs


def init_states(model_cfg, seeds, tx):
  """(graphdef, one fresh state per seed, number of parameters)."""
  states = []
  for seed in seeds:
    graphdef, state, num_params = steps.init_state(model_cfg, seed, tx)
    states.append(state)
  return graphdef, states, num_params


def restore(runs, states, mesh):
  """(stacked state replicated over the mesh, start step) from each seed's latest checkpoint:
  parameters, optimizer, step, data order and best so far; the fresh states where none."""
  restored = [run.checkpoints.restore_latest(state, run.train_iter)
              for run, state in zip(runs, states)]
  for run, (_, info) in zip(runs, restored):
    run.best = info.get('best', run.best)
  start_steps = {int(state['step']) for state, _ in restored}
  if len(start_steps) > 1:
    raise run_folder.TrainingError(
        f'The workdirs {[str(run.workdir) for run in runs]} hold checkpoints of different '
        f'steps {sorted(start_steps)}; resume them one seed at a time.')
  stacked = steps.stack_trees([state for state, _ in restored])
  return jax.device_put(stacked, NamedSharding(mesh, PartitionSpec())), start_steps.pop()


def open_writers(runs, start_step: int, num_params: int, is_writer: bool) -> list:
  """A MetricWriter per seed (rows past a resumed step dropped); hparams on a fresh start."""
  writers = [metrics_lib.MetricWriter(run.workdir, enabled=is_writer,
                                      resume_step=start_step if start_step else None)
             for run in runs]
  if start_step == 0:
    for run, writer in zip(runs, writers):
      writer.write_hparams({**config_lib.flatten(run.config), 'num_params': num_params})
  return writers


def itstime(step: int, every: int, last_step: int) -> bool:
  """Whether periodic work (log, eval, checkpoint) is due: every `every` steps and at the end."""
  return step % every == 0 or step == last_step


def validate(runs, state, step: int, val: dict, monitor, is_writer: bool) -> None:
  """Writes each seed's validation metrics and keeps its best checkpoint."""
  for i, run in enumerate(runs):
    monitor.write(step, i, {'val_loss': val['loss'][i], 'val_accuracy': val['accuracy'][i]})
    say(is_writer, f'seed {run.seed} step {step}: val accuracy {val["accuracy"][i]:.4f}, '
        f'loss {val["loss"][i]:.4f}')
    if val['accuracy'][i] > run.best['val_accuracy']:
      run.best = {'step': step, 'val_accuracy': float(val['accuracy'][i]),
                  'val_loss': float(val['loss'][i])}
      run.checkpoints.save_best(step, steps.unstack_tree(state, i))


def save_latest(runs, state, step: int) -> None:
  for i, run in enumerate(runs):
    run.checkpoints.save_latest(step, steps.unstack_tree(state, i), run.train_iter,
                                {'best': run.best})


def interrupt(runs, state, step: int, start_step: int, monitor, signal_name: str) -> Interrupted:
  """Saves every seed's latest checkpoint at `step` (the last finished one) and closes the run;
  the Interrupted to raise. Nothing is saved before the first step of this start."""
  if step > start_step:
    monitor.flush(step)
    save_latest(runs, state, step)
  monitor.close()
  for run in runs:
    run.checkpoints.close()
  return Interrupted(signal_name, step, run_folder.saved_step(runs[0].workdir, 'latest'))


def final_results(config, runs, state, data, evaluate, label, num_params, monitor,
                  is_writer) -> list:
  """Tests the last and the best-on-validation checkpoint of every seed; writes results.json."""
  best_state = steps.stack_trees([run.checkpoints.restore_best(steps.unstack_tree(state, i))
                                  for i, run in enumerate(runs)])
  sections = {name: (evaluate(section_state, data.splits['validation']),
                     evaluate(section_state, data.splits['test']))
              for name, section_state in (('last', state), ('best', best_state))}
  all_results = []
  for i, run in enumerate(runs):
    results = {'task': config.task, 'model': label, 'head': config.model.head,
               'protocol': config.protocol,
               'seed': int(run.seed), 'num_params': num_params, 'steps': config.num_train_steps,
               'test_majority_rate': steps.majority_rate(data.splits['test']['targets']),
               'data': data.source, 'run': config_lib.run_record(config)}
    for name, (val, test) in sections.items():
      results[name] = steps.checkpoint_metrics(
          config.num_train_steps if name == 'last' else run.best['step'], val, test, i)
    # The flat keys report the last checkpoint, as LRA did; `best` is beside it.
    results.update({k: results['last'][k]
                    for k in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss')})
    if is_writer:
      run_folder.write_json_atomically(run.workdir / run_folder.RESULTS_FILE, results)
    monitor.write(config.num_train_steps, i, {'test_accuracy': results['test_accuracy'],
                                              'test_loss': results['test_loss']})
    run.checkpoints.close()
    all_results.append(results)
  return all_results


def say(enabled: bool, message: str) -> None:
  """A line for the user (absl's INFO log is left to the libraries' chatter)."""
  if enabled:
    print(message, flush=True)


class StopSignals:
  """While active, the first SIGINT or SIGTERM only records its name (the loop then saves and
  stops after the current step); a second one stops the process at once, without saving."""

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self):
    self.signal_name = None
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():  # Handlers live on the main thread.
      self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
    return self

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    if self.signal_name is not None:
      sys.stderr.write(f'error: second {name}: stopped at once, without saving.\n')
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.signal_name = name
