"""The training loop: `train_and_evaluate(config, workdir)` and its multi-seed form `train_seeds`.

Read top to bottom: one record per seed, the loop (data, model, restore, train with periodic
evaluation and checkpoints, the final test of the best and the last checkpoint into
results.json and learning_curves.png), then its helpers. What the loop builds a run from (state,
steps, optimizer, evaluator, mesh) is in `steps`; the run folder's layout in `run_folder`;
metrics and progress in `metrics`; every line for the user goes through `console`.

SIGINT and SIGTERM stop the run at any moment with one true line (`Interrupted`): while the data
is read, the model built or the final evaluation runs, at once (nothing of them is kept); in
training, after the current step, with a checkpoint at that step; during a checkpoint write,
after it; during a validation pass, after the current batch, with a checkpoint at that step
whose validation runs again on resume. A second signal stops the process at once.
"""

import dataclasses
import functools
import json
import os
import pathlib
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna import config_lib
from lra_luna import console
from lra_luna import datasets
from lra_luna import learning_curves
from lra_luna import spt
from lra_luna.datasets import input_pipeline
from lra_luna.models import pretraining
from lra_luna.models.objectives import masking
from lra_luna.training import checkpoints as checkpoints_lib
from lra_luna.training import metrics as metrics_lib
from lra_luna.training import run_folder
from lra_luna.training import steps

# Tests: a phase name (data, model, compile, validate, checkpoint, final); the run waits there
# (at most PAUSE_S) for a signal, so that a signal can be sent in that phase.
PAUSE_ENV = 'LRA_LUNA_PAUSE_IN'
PAUSE_S = 120


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


class StopRequested(KeyboardInterrupt):
  """A signal asked the run to stop where it is; train_seeds turns it into Interrupted."""

  def __init__(self, signal_name: str):
    super().__init__(signal_name)
    self.signal_name = signal_name


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM stopped the run: str() is `<SIGNAL>: stopped <what was running>, <what is
  saved>`. A KeyboardInterrupt, so that callers that go on after an error (sweep) stop too."""

  def __init__(self, signal_name: str, doing: str, saved: str, step: int | None = None,
               saved_step: int | None = None):
    super().__init__(f'{signal_name}: stopped {doing}, {saved}')
    self.signal_name, self.step, self.saved_step = signal_name, step, saved_step
    self.doing, self.saved = doing, saved

  def in_phase(self, phase: str) -> 'Interrupted':
    """The same stop, its line naming the phase of a self-pretrained run it stopped in."""
    return Interrupted(self.signal_name, f'in {phase} {self.doing}', self.saved, self.step,
                       self.saved_step)


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
  with StopSignals() as stop:
    try:
      done = None if overwrite else finished_results(runs)
      if done is not None:
        return done
      with steps.matmul_precision(config.matmul_precision):  # Read when the steps are traced.
        if not (config.pretraining.objective or config.pretrained):
          return run_phases(config, runs, overwrite, stop)
        pretrain(config, runs, overwrite, stop)  # clears the workdirs it pretrains in
        return stopped_in('fine-tuning', config, runs, stop, lambda: run_phases(
            config, runs, overwrite and bool(config.pretrained), stop))
    except StopRequested as e:  # Stopped at once: say what ran and what the folder holds.
      raise Interrupted(e.signal_name, stop.doing(config), saved_on_disk(runs),
                        saved_step=run_folder.saved_step(runs[0].workdir, 'latest')) from None


def pretrain(config, runs, overwrite: bool, stop) -> None:
  """The pretraining phase of a self-pretrained run (spt.py): sets each run's pretrained_from,
  the folder of the pretraining it fine-tunes (config.pretrained's, else the pretraining/ of the
  first run of its pretraining seed), and trains the pretrainings not finished yet (on the
  training inputs). A run given config.pretrained says which pretraining it loads."""
  if config.pretrained:
    folder = spt.pretraining_folder(config.pretrained)
    say(jax.process_index() == 0, f'fine-tuning from the pretraining in {folder}: '
        f'{describe_pretraining(spt.finished_pretraining(folder) or {})}.')
    for run in runs:
      run.pretrained_from = folder
    return
  if overwrite and jax.process_index() == 0:  # Cleared once, before the pretraining is written.
    for run in runs:
      run_folder.start_workdir(run.config, run.workdir, overwrite=True)
  owners = {}  # pretraining seed -> the run folder that holds it
  for run in runs:
    run.pretrained_from = run_folder.pretraining_dir(
        owners.setdefault(spt.pretraining_seed(config, run.seed), run.workdir))
  todo = {seed: folder for seed, folder in owners.items()
          if spt.finished_pretraining(run_folder.pretraining_dir(folder)) is None}
  for seed, folder in owners.items():
    if seed not in todo:
      say(jax.process_index() == 0, f'pretraining finished in '
          f'{run_folder.pretraining_dir(folder)}; fine-tuning.')
  if todo:
    phase = spt.phase_config(config)
    phase_runs = seed_runs(phase, list(todo), [run_folder.pretraining_dir(f)
                                               for f in todo.values()], False)
    stopped_in('pretraining', phase, phase_runs, stop,
               lambda: run_phases(phase, phase_runs, False, stop))


def stopped_in(phase: str, config, runs, stop, run):
  """run() of one phase of a self-pretrained run; a signal's line names the phase."""
  try:
    try:
      return run()
    except StopRequested as e:
      raise Interrupted(e.signal_name, stop.doing(config), saved_on_disk(runs),
                        saved_step=run_folder.saved_step(runs[0].workdir, 'latest')) from None
  except Interrupted as e:
    raise e.in_phase(phase) from None


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
    data = training_inputs_only(data)
  for run in runs:
    run.train_iter = input_pipeline.train_iterator(data.splits['train'], config.batch_size,
                                                   run.seed)
  stop.enter('model', immediate=True)
  tx = steps.make_optimizer(config)
  graphdef, states, num_params = init_states(steps.model_config(config, data), seeds, tx,
                                             objective)
  if runs[0].pretrained_from is not None:
    states = with_pretrained_encoders(config, data, runs, states)
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
  phase = '' if objective is None else f', {objective.name} pretraining'
  say(is_writer, f'{config.task} / {label}{phase}, seeds {seeds}: {num_params} parameters; '
      f'starting at step {start_step} of {config.num_train_steps}.')
  evaluate = steps.make_evaluator(config, graphdef, mesh, objective)
  state, last_val = train_loop(config, runs, state, start_step, data, evaluate, graphdef, tx,
                               mesh, monitor, stop, objective)
  stop.enter('final', immediate=True)
  final = final_results if objective is None else pretraining_results
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
      save_latest(runs, state, step)
      stop.enter('train', immediate=False)
  if stop.signal_name:  # during the last step's validation or checkpoint: all of it is saved
    raise interrupt(runs, state, config.num_train_steps, start_step, monitor, stop.signal_name)
  return state, last_val


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
  # The eval batch is rounded up to the devices instead (steps.eval_batch_size).
  if config.batch_size % jax.device_count():
    raise ValueError(f'config.batch_size = {config.batch_size} does not divide over '
                     f'{jax.device_count()} devices; use a multiple of {jax.device_count()}.')
  config_lib.check_accumulation(config.grad_accumulation_steps,
                                config.batch_size // jax.device_count(), jax.device_count())
  return runs


def finished_results(runs) -> list[dict] | None:
  """The results of every seed when each one's workdir already holds results.json of its
  config's steps (checked against config.json by seed_runs), saying so; else None. A finished
  run missing its learning curves gets them now."""
  results = []
  for run in runs:
    path = run.workdir / run_folder.RESULTS_FILE
    if not path.is_file():
      return None
    saved = json.loads(path.read_text())
    if saved.get('steps') != run.config.num_train_steps:
      return None
    results.append((run, path, saved))
  for run, path, _ in results:
    say(jax.process_index() == 0, f'nothing to do: {run.workdir} finished '
        f'{run.config.num_train_steps} steps; results in {path}')
    if not (run.workdir / run_folder.LEARNING_CURVES_FILE).exists():
      write_learning_curves(run)
  return [saved for _, _, saved in results]


def init_states(model_cfg, seeds, tx, objective=None):
  """(graphdef, one fresh state per seed, number of parameters)."""
  states = []
  for seed in seeds:
    graphdef, state, num_params = steps.init_state(model_cfg, seed, tx, objective)
    states.append(state)
  return graphdef, states, num_params


def training_inputs_only(data):
  """The pretraining phase's data: the training split (its inputs; the targets are never read)
  and, for the phase's validation, as many of its first examples as the validation split
  holds. No validation or test input is read."""
  train = data.splits['train']
  count = min(len(next(iter(train.values()))),
              len(next(iter(data.splits['validation'].values()))))
  held_in = {name: array[:count] for name, array in train.items()}
  return dataclasses.replace(data, splits={'train': train, 'validation': held_in})


def with_pretrained_encoders(config, data, runs, states) -> list:
  """Each seed's fresh classifier state with the encoder of the pretraining it fine-tunes (the
  latest checkpoint in run.pretrained_from): the same arrays; a fresh head."""
  phase = spt.phase_config(config)
  objective = steps.pretraining_objective(phase, data)
  _, template, _ = steps.init_state(steps.model_config(phase, data), 0,
                                    steps.make_optimizer(phase), objective)
  saved = {}
  for run in runs:
    if run.pretrained_from not in saved:
      folder = run.pretrained_from
      recorded = spt.finished_pretraining(folder) or {}
      if recorded.get('vocab_size') != data.vocab_size:
        raise run_folder.TrainingError(
            f'{folder} pretrained a vocabulary of {recorded.get("vocab_size")} ids, this task '
            f'has {data.vocab_size}; fine-tune from a pretraining of the same data.')
      checkpoints = checkpoints_lib.Checkpoints(folder)
      saved[run.pretrained_from] = checkpoints.restore_state('latest', template)[1]
      checkpoints.close()
  return [pretraining.transfer_encoder(state, saved[run.pretrained_from])
          for run, state in zip(runs, states)]


def restore(runs, states, mesh):
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


def evaluation(evaluate, state, arrays, monitor, stop, desc: str) -> dict:
  """evaluate(state, arrays) with its progress shown by the monitor; StopRequested after the
  current batch once a signal is recorded."""
  progress = None

  def on_batch(done: int, total: int) -> None:
    nonlocal progress
    if progress is None:
      progress = monitor.evaluation_progress(desc, total)
    progress.update(1)
    if done == total or stop.signal_name:
      progress.close()
    if stop.signal_name:
      raise StopRequested(stop.signal_name)

  try:
    return evaluate(state, arrays, on_batch)
  finally:
    if progress is not None:
      progress.close()


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


def save_latest(runs, state, step: int, validation_pending: bool = False) -> None:
  """Every seed's latest checkpoint at `step`; validation_pending: saved before that step's
  validation finished, which a resumed run then runs first."""
  info = {'validation_pending': step} if validation_pending else {}
  for i, run in enumerate(runs):
    run.checkpoints.save_latest(step, steps.unstack_tree(state, i), run.train_iter,
                                {'best': run.best, **info})


def interrupt(runs, state, step: int, start_step: int, monitor, signal_name: str, *,
              validation_pending: bool = False) -> Interrupted:
  """Saves every seed's latest checkpoint at `step` (the last finished one) and closes the run;
  the Interrupted to raise. Nothing is saved before the first step of this start."""
  if step > start_step:
    monitor.flush(step)
    save_latest(runs, state, step, validation_pending)
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


def saved_on_disk(runs) -> str:
  """What the run folder holds, for the line of a run stopped outside the training loop."""
  workdir = runs[0].workdir
  latest = run_folder.saved_step(workdir, 'latest')
  if latest is None:
    return 'no checkpoint saved yet'
  best = run_folder.saved_step(workdir, 'best')
  saved = f'latest checkpoint at step {latest}' + (f', best at step {best}' if best else '')
  if latest == runs[0].config.num_train_steps:
    written = all((run.workdir / run_folder.RESULTS_FILE).exists() for run in runs)
    saved += f'; results.json {"written" if written else "not written"}'
  return saved


def recorded_validation(runs, step: int | None = None) -> dict | None:
  """The validation metrics of every seed's best checkpoint as the loop measured them ({'loss',
  'accuracy'} per seed), when each has them (and, with `step`, each best is at that step)."""
  if not all('val_loss' in run.best and (step is None or run.best['step'] == step)
             for run in runs):
    return None
  return {'loss': [run.best['val_loss'] for run in runs],
          'accuracy': [run.best['val_accuracy'] for run in runs]}


def final_results(config, runs, state, data, evaluate, label, num_params, monitor, is_writer,
                  last_val, stop) -> list:
  """Tests the last and the best-on-validation checkpoint of every seed, each distinct checkpoint
  once (best = last: one evaluation for both sections; validation metrics the loop measured are
  reused); writes results.json and learning_curves.png."""
  total = config.num_train_steps
  val_split, test_split = data.splits['validation'], data.splits['test']

  def run_eval(section_state, arrays, desc):
    return evaluation(evaluate, section_state, arrays, monitor, stop, desc)

  last_val = (last_val or recorded_validation(runs, total)
              or run_eval(state, val_split, f'validation of step {total}'))
  sections = {'last': (last_val, run_eval(state, test_split, f'test of step {total}'))}
  if all(run.best['step'] == total for run in runs):
    sections['best'] = sections['last']  # the same checkpoint
  else:
    best_state = steps.stack_trees([run.checkpoints.restore_best(steps.unstack_tree(state, i))
                                    for i, run in enumerate(runs)])
    sections['best'] = (recorded_validation(runs)
                        or run_eval(best_state, val_split, 'validation of the best checkpoint'),
                        run_eval(best_state, test_split, 'test of the best checkpoint'))
  all_results = []
  for i, run in enumerate(runs):
    results = {'task': config.task, 'model': label, 'head': config.model.head,
               'protocol': config.protocol,
               'seed': int(run.seed), 'num_params': num_params, 'steps': total,
               'test_majority_rate': steps.majority_rate(data.splits['test']['targets']),
               'data': data_record(config, data), 'run': config_lib.run_record(config),
               'precision': steps.precision_record(config)}
    for name, (val, test) in sections.items():
      results[name] = steps.checkpoint_metrics(
          total if name == 'last' else run.best['step'], val, test, i)
    # The flat keys report the last checkpoint, as LRA did; `best` is beside it.
    results.update({k: results['last'][k]
                    for k in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss')})
    if run.pretrained_from is not None:
      results['pretraining'] = pretraining_record(run.pretrained_from)
    monitor.write(total, i, {'test_accuracy': results['test_accuracy'],
                             'test_loss': results['test_loss']})
    close_run(run, results, is_writer)
    all_results.append(results)
  return all_results


def pretraining_results(config, runs, state, data, evaluate, label, num_params, monitor,
                        is_writer, last_val, stop) -> list:
  """The end of a pretraining phase: each seed's token loss and accuracy of its last step on the
  held-in training inputs (training_inputs_only), beside the accuracy of always predicting the
  most frequent token there (masking.most_frequent_token), written to its
  pretraining/results.json."""
  total = config.num_train_steps
  val = (last_val or recorded_validation(runs, total)
         or evaluation(evaluate, state, data.splits['validation'], monitor, stop,
                       f'token check of step {total}'))
  objective = steps.pretraining_objective(config, data)
  held_in = data.splits['validation']
  majority_token, majority_accuracy = masking.most_frequent_token(
      [held_in[key] for key in ('inputs', 'inputs1', 'inputs2') if key in held_in],
      objective.mask_padding, objective.eos_id)
  all_results = []
  for i, run in enumerate(runs):
    results = {'task': config.task, 'model': label, 'phase': 'pretraining',
               'objective': config.pretraining.objective,
               'mask_rate': (config.pretraining.mask_rate
                             if config.pretraining.objective == 'masked' else None),
               'loss_function': config.pretraining.get('loss', 'ce'),
               'seed': int(run.seed), 'num_params': num_params, 'steps': total,
               'vocab_size': data.vocab_size, 'loss': float(val['loss'][i]),
               'accuracy': float(val['accuracy'][i]), 'predicted_tokens': val['count'],
               # The reference point of `accuracy`: always predicting the most frequent token.
               'majority_token': majority_token, 'majority_accuracy': majority_accuracy,
               'inputs': f'training split only: {len(data.splits["train"]["targets"])} '
                         f'examples, the first {len(data.splits["validation"]["targets"])} '
                         'for the token loss and accuracy',
               'data': data_record(config, data), 'run': config_lib.run_record(config)}
    monitor.write(total, i, {'token_loss': results['loss'], 'token_accuracy': results['accuracy']})
    say(is_writer, f'seed {run.seed} pretraining: token accuracy {results["accuracy"]:.4f}; '
        f'always predicting the most frequent token ({majority_token}): '
        f'{majority_accuracy:.4f}.')
    close_run(run, results, is_writer)
    all_results.append(results)
  return all_results


def close_run(run, results: dict, is_writer: bool) -> None:
  """A seed's phase is over: its results.json and learning curves written (by the writing
  process), its checkpoint manager closed."""
  if is_writer:
    run_folder.write_json_atomically(run.workdir / run_folder.RESULTS_FILE, results)
    write_learning_curves(run)
  run.checkpoints.close()


def pretraining_record(folder) -> dict:
  """results.json's `pretraining` of a fine-tuned run: what its pretraining (in `folder`, the
  pretraining's own folder) recorded."""
  recorded = spt.finished_pretraining(folder) or {}
  keys = ('objective', 'mask_rate', 'loss_function', 'seed', 'steps', 'loss', 'accuracy',
          'majority_token', 'majority_accuracy', 'predicted_tokens', 'inputs', 'data')
  return {'folder': str(folder), **{key: recorded.get(key) for key in keys}}


def describe_pretraining(recorded: dict) -> str:
  """A pretraining's results.json in words: objective, rate, steps, its token accuracy beside
  that of always predicting the most frequent token."""
  rate = f" at rate {recorded['mask_rate']}" if recorded.get('mask_rate') else ''
  text = (f"{recorded.get('objective')}{rate}, {recorded.get('steps')} steps, seed "
          f"{recorded.get('seed')}")
  if recorded.get('accuracy') is not None:
    text += f", token accuracy {recorded['accuracy']:.4f}"
  if recorded.get('majority_accuracy') is not None:
    text += (f" (always the most frequent token: {recorded['majority_accuracy']:.4f})")
  return text


def data_record(config, data) -> dict:
  """results.json's `data`: where the arrays came from; a smoke test's data is marked as such
  (a generated smoke set holds only the examples the test reads)."""
  if not config.get('smoke'):
    return data.source
  return {**data.source, 'smoke': f'a smoke test ({config.num_train_steps} steps, '
          f'{config.max_eval_batches} batches per evaluation): not the full set'}


def write_learning_curves(run) -> None:
  """<workdir>/learning_curves.png from its metrics.jsonl; a failure to plot is a warning."""
  title = f'{run.config.task} / {config_lib.model_label(run.config)}, seed {run.seed}'
  try:
    learning_curves.plot([run.workdir], run.workdir / run_folder.LEARNING_CURVES_FILE, title)
  except Exception as e:  # pylint: disable=broad-except  (a plot never costs the results)
    console.say(f'warning: {run.workdir / run_folder.LEARNING_CURVES_FILE} not written: '
                f'{type(e).__name__}: {e}', err=True)


def say(enabled: bool, message: str) -> None:
  """A line for the user, through the one writer (absl's INFO log is left to the libraries)."""
  if enabled:
    console.say(message)


def pause_if_asked(phase: str, stop=None) -> None:
  """Waits here (up to PAUSE_S) for a signal when $LRA_LUNA_PAUSE_IN names this phase (tests)."""
  if os.environ.get(PAUSE_ENV) != phase:
    return
  console.say(f'pausing in phase {phase} (${PAUSE_ENV})', err=True)
  stop = stop or StopSignals.active
  deadline = time.time() + PAUSE_S
  while time.time() < deadline and not (stop and stop.signal_name):
    time.sleep(0.01)


# What each phase's line says was running when it stopped at once (`StopSignals.doing`).
PHASES = {
    'data': 'while reading the data',
    'model': 'while building the model and restoring its checkpoint',
    'final': 'during the final evaluation (training finished at step {steps})',
    'done': 'after the final results',
    'start': 'while starting',
}


class StopSignals:
  """While active, SIGINT and SIGTERM stop the run. In a phase entered `immediate` (nothing of it
  is worth keeping: data, model, final evaluation) the handler raises StopRequested at once;
  otherwise (steps, validation, checkpoint writes) it only records the signal's name and the
  loop stops at its next safe point. A second signal stops the process at once, unsaved."""

  SIGNALS = (signal.SIGINT, signal.SIGTERM)
  active = None  # the StopSignals in effect (pause_if_asked reads it)

  def __init__(self):
    self.signal_name = None
    self.phase, self.immediate = 'start', True
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():  # Handlers live on the main thread.
      self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
    StopSignals.active = self
    return self

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    StopSignals.active = None

  def enter(self, phase: str, immediate: bool) -> None:
    """Starts `phase`; a signal recorded before an immediate phase stops the run now."""
    if immediate and self.signal_name:
      raise StopRequested(self.signal_name)
    self.phase, self.immediate = phase, immediate
    pause_if_asked(phase, self)

  def doing(self, config) -> str:
    return PHASES.get(self.phase, 'while starting').format(steps=config.num_train_steps)

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    if self.signal_name is not None:
      sys.stderr.write(f'error: second {name}: stopped at once, without saving.\n')
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.signal_name = name
    if self.immediate:
      raise StopRequested(name)
