"""The training loop: `train_and_evaluate(config, workdir)` and its multi-seed form `train_seeds`.

Read top to bottom: one record per seed, the phases of a run (a self-pretrained run's
pretraining first), the loop of one phase (data, model, restore, train with periodic evaluation
and checkpoints, then its results), then its helpers. Beside it in lra_luna/training/: what the
loop builds a run from (state, steps, optimizer, evaluator, mesh) in `steps`; the phases of a
self-pretrained run in `pretraining` and `fine_tuning`; stopping by a signal in `signals`; what a
phase writes at its end in `results`; the run folder's layout in `run_folder`; metrics and
progress in `metrics`. Every line for the user goes through `console`.
"""

import dataclasses
import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import ml_collections

from lra_luna import config_lib
from lra_luna import console
from lra_luna import datasets
from lra_luna import spt
from lra_luna.datasets import input_pipeline
from lra_luna.training import checkpoints as checkpoints_lib
from lra_luna.training import environment
from lra_luna.training import fine_tuning
from lra_luna.training import metrics as metrics_lib
from lra_luna.training import pretraining
from lra_luna.training import results as results_lib
from lra_luna.training import run_folder
from lra_luna.training import steps
from lra_luna.training.signals import (Interrupted, StopRequested, StopSignals, evaluation,
                                       saved_on_disk, stopped_in)


@dataclasses.dataclass
class SeedRun:
  """One seed of a (multi-seed) run: its config, folder, data order, checkpoints and best so far."""
  config: ml_collections.ConfigDict  # the run's config with config.seed = this seed
  workdir: pathlib.Path
  train_iter: object = None          # this seed's shuffled training batches
  checkpoints: checkpoints_lib.Checkpoints | None = None
  best: dict = dataclasses.field(default_factory=lambda: {'step': -1, 'val_accuracy': -1.0})
  validation_pending: bool = False   # its latest checkpoint was saved before that step's validation
  pretrained_from: pathlib.Path | None = None  # the folder of the pretraining it fine-tunes

  @property
  def seed(self) -> int:
    return self.config.seed


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       overwrite: bool = False) -> dict:
  """Trains config's model on config's task in `workdir` (resuming what is there); returns results."""
  return train_seeds(config, [config.seed], [workdir], overwrite=overwrite)[0]


def train_seeds(config: ml_collections.ConfigDict, seeds, workdirs, *,
                overwrite: bool = False) -> list[dict]:
  """Trains one model per seed, all in one program (the step vmapped over seeds).

  Each seed gets its own parameters, dropout keys, data order, workdir, checkpoints, metrics and
  results.json, exactly as if it ran alone with config.seed = seed. Returns the results per seed;
  a finished run (results.json of config's steps) is not trained or evaluated again.
  """
  runs = seed_runs(config, seeds, workdirs, overwrite)
  environment.environment_record()  # cached now: the commit of the code this run loaded
  with StopSignals() as stop:
    try:
      done = None if overwrite else results_lib.finished_results(runs)
      if done is not None:
        return done
      with steps.matmul_precision(config.matmul_precision):  # Read when the steps are traced.
        if not (config.pretraining.objective or config.pretrained):
          return run_phases(config, runs, overwrite, stop)
        todo = pretraining.assign(config, runs, overwrite)  # clears the workdirs it pretrains in
        if todo:  # the pretraining phase, a run of its own in <workdir>/pretraining/
          phase = spt.phase_config(config)
          phase_runs = seed_runs(phase, list(todo), [run_folder.pretraining_dir(folder)
                                                     for folder in todo.values()], False)
          stopped_in('pretraining', phase, phase_runs, stop,
                     lambda: run_phases(phase, phase_runs, False, stop))
        return stopped_in('fine-tuning', config, runs, stop, lambda: run_phases(
            config, runs, overwrite and bool(config.pretrained), stop))
    except StopRequested as e:  # Stopped at once: say what ran and what the folder holds.
      raise Interrupted(e.signal_name, stop.doing(config), saved_on_disk(runs),
                        saved_step=run_folder.saved_step(runs[0].workdir, 'latest')) from None


def run_phases(config, runs, overwrite: bool, stop) -> list[dict]:
  """The run, phase by phase (data, model, training with validation and checkpoints, final);
  a pretraining phase (steps.pretraining_objective) reads the training split's inputs only."""
  seeds = [run.seed for run in runs]
  steps.reuse_freed_host_memory()  # The step's buffers, reused instead of faulted in anew.
  mesh = steps.make_mesh()
  stop.enter('data', immediate=True)
  data = datasets.load_task(config)  # One copy for every seed; each seed its own data order.
  objective = steps.pretraining_objective(config, data)
  if objective is not None:
    data = pretraining.training_inputs_only(data)
  for run in runs:
    run.train_iter = input_pipeline.train_iterator(data.splits['train'], config.batch_size,
                                                   run.seed)
  stop.enter('model', immediate=True)
  tx = steps.make_optimizer(config)
  graphdef, states, num_params = init_states(steps.model_config(config, data), seeds, tx,
                                             objective)
  if runs[0].pretrained_from is not None:
    states = fine_tuning.with_pretrained_encoders(config, data, runs, states)
  is_writer = jax.process_index() == 0
  for run in runs:
    if is_writer:
      run_folder.start_workdir(run.config, run.workdir, overwrite)
    run.checkpoints = checkpoints_lib.Checkpoints(run.workdir)
  state, start_step = checkpoints_lib.restore_latest_of(runs, states, mesh)
  monitor = metrics_lib.TrainingMonitor(
      config, seeds, [run.workdir for run in runs], open_writers(runs, start_step, num_params,
                                                                is_writer),
      schedule=steps.make_schedule(config), enabled=is_writer)
  label = config_lib.model_label(config)  # The preset name, or a plug-in's class name.
  phase = '' if objective is None else f', {objective.name} pretraining'
  say(is_writer, f'{config.task} / {label}{phase}, seeds {seeds}: {num_params} parameters; '
      f'starting at step {start_step} of {config.num_train_steps}.')
  evaluate = steps.make_evaluator(config, graphdef, mesh, objective)
  state, last_val = train_loop(config, runs, state, start_step, data, evaluate, graphdef, tx,
                               mesh, monitor, stop, objective)
  stop.enter('final', immediate=True)
  final = results_lib.final_results if objective is None else results_lib.pretraining_results
  results = final(config, runs, state, data, evaluate, label, num_params, monitor, is_writer,
                  last_val, stop)
  stop.enter('done', immediate=True)
  monitor.close()
  return results


def train_loop(config, runs, state, start_step: int, data, evaluate, graphdef, tx, mesh,
               monitor, stop, objective=None):
  """Steps start_step + 1 .. num_train_steps with periodic logs, validation and checkpoints;
  (the final state, the validation of the last step when this start ran it, else None)."""
  step_fn = jax.jit(jax.vmap(functools.partial(steps.train_step, graphdef=graphdef, tx=tx,
                                            accumulation_steps=config.grad_accumulation_steps,
                                            objective=objective)),
                    donate_argnums=0)
  dropout_keys = jnp.stack([jax.random.fold_in(jax.random.key(run.seed), 1) for run in runs])
  val_split, last_val = data.splits['validation'], None
  if any(run.validation_pending for run in runs):  # stopped during this validation before
    validation_at(start_step, runs, state, start_step, evaluate, val_split, monitor, stop)
  stop.enter('compile' if start_step < config.num_train_steps else 'train', immediate=False)
  for step in range(start_step + 1, config.num_train_steps + 1):
    if stop.signal_name:
      raise interrupt(runs, state, step - 1, start_step, monitor, stop.signal_name)
    batch = steps.global_batch(mesh, input_pipeline.stack_examples(
        [next(run.train_iter) for run in runs]), seed_axis=True)
    state, step_metrics = step_fn(state, batch, dropout_keys)
    monitor.step_done(step, step_metrics)
    if step == start_step + 1:  # The first step has compiled: training from here on.
      stop.enter('train', immediate=False)
    if itstime(step, config.log_every, config.num_train_steps):
      monitor.flush(step)
    if itstime(step, config.eval_every, config.num_train_steps):
      monitor.flush(step)
      val = validation_at(step, runs, state, start_step, evaluate, val_split, monitor, stop)
      last_val = val if step == config.num_train_steps else None
    if itstime(step, config.checkpoint_every, config.num_train_steps):
      monitor.flush(step)
      stop.enter('checkpoint', immediate=False)
      checkpoints_lib.save_latest_of(runs, state, step)
      stop.enter('train', immediate=False)
  if stop.signal_name:  # during the last step's validation or checkpoint: all of it is saved
    raise interrupt(runs, state, config.num_train_steps, start_step, monitor, stop.signal_name)
  return state, last_val


# The loop's helpers, in the order it calls them.
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
    check_workdir(run.config, run.workdir, overwrite)
  # The eval batch is rounded up to the devices instead (steps.eval_batch_size).
  if config.batch_size % jax.device_count():
    raise ValueError(f'config.batch_size = {config.batch_size} does not divide over '
                     f'{jax.device_count()} devices; use a multiple of {jax.device_count()}.')
  config_lib.check_accumulation(config.grad_accumulation_steps,
                                config.batch_size // jax.device_count(), jax.device_count())
  return runs


def check_workdir(config, workdir: pathlib.Path, overwrite: bool) -> None:
  """Refuses a workdir that holds a run with another config, unless `overwrite`; writes nothing."""
  if workdir.exists() and not workdir.is_dir():
    raise run_folder.TrainingError(f'--workdir {workdir} is a file, not a folder; choose a folder '
                                   'for the run (checkpoints, metrics, results.json).')
  config_path = workdir / run_folder.CONFIG_FILE
  if config_path.exists() and not overwrite:
    differing = config_lib.config_differences(json.loads(config_path.read_text()), config)
    if differing:
      raise run_folder.TrainingError(
          f'{workdir} holds a run with a different config (fields {differing} differ). To '
          f'resume it, give those fields its values ({config_path}); else use another '
          '--workdir, or pass --overwrite to delete that run and start anew.')


def init_states(model_cfg, seeds, tx, objective=None):
  """(graphdef, one fresh state per seed, number of parameters)."""
  states = []
  for seed in seeds:
    graphdef, state, num_params = steps.init_state(model_cfg, seed, tx, objective)
    states.append(state)
  return graphdef, states, num_params


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


def validation_at(step: int, runs, state, start_step: int, evaluate, val_split, monitor,
                  stop) -> dict:
  """The validation at `step`, its metrics written and the best checkpoint kept; stopped by a
  signal after its current batch, with the checkpoint at `step` saved and this validation
  pending (a resumed run runs it first)."""
  stop.enter('validate', immediate=False)
  try:
    val = evaluation(evaluate, state, val_split, monitor, stop, f'validation at step {step}')
  except StopRequested as e:
    raise interrupt(runs, state, step, start_step, monitor, e.signal_name,
                    validation_pending=True) from None
  validate(runs, state, step, val, monitor, jax.process_index() == 0)
  stop.enter('train', immediate=False)
  return val


def validate(runs, state, step: int, val: dict, monitor, is_writer: bool) -> None:
  """Writes each seed's validation metrics (a pretraining phase's: its token check on training
  inputs) and keeps its best checkpoint."""
  what = ('token check accuracy' if runs[0].config.get('pretraining', {}).get('is_phase')
          else 'val accuracy')
  for i, run in enumerate(runs):
    monitor.write(step, i, {'val_loss': val['loss'][i], 'val_accuracy': val['accuracy'][i]})
    say(is_writer, f'seed {run.seed} step {step}: {what} {val["accuracy"][i]:.4f}, '
        f'loss {val["loss"][i]:.4f}')
    if val['accuracy'][i] > run.best['val_accuracy']:
      run.best = {'step': step, 'val_accuracy': float(val['accuracy'][i]),
                  'val_loss': float(val['loss'][i])}
      run.checkpoints.save_best(step, steps.unstack_tree(state, i))


def interrupt(runs, state, step: int, start_step: int, monitor, signal_name: str, *,
              validation_pending: bool = False) -> Interrupted:
  """Saves every seed's latest checkpoint at `step` (the last finished one) and closes the run;
  the Interrupted to raise. Nothing is saved before the first step of this start."""
  if step > start_step:
    monitor.flush(step)
    checkpoints_lib.save_latest_of(runs, state, step, validation_pending)
  monitor.close()
  for run in runs:
    run.checkpoints.close()
  saved_step = run_folder.saved_step(runs[0].workdir, 'latest')
  total = runs[0].config.num_train_steps
  doing = (f'during the validation at step {step} of {total}' if validation_pending
           else f'at step {step} of {total}')
  saved = ('no checkpoint (no step finished)' if saved_step is None
           else f'checkpoint saved at step {saved_step}')
  if validation_pending and saved_step == step:
    saved += ' (its validation runs again on resume)'
  return Interrupted(signal_name, doing, saved, step, saved_step)


def say(enabled: bool, message: str) -> None:
  """A line for the user, through the one writer (absl's INFO log is left to the libraries)."""
  if enabled:
    console.say(message)

