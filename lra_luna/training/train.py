"""Training and evaluation of one LRA model: `train_and_evaluate(config, workdir)`.

Read top to bottom: optimizer and schedule, the train and eval steps (pure functions of a state
pytree, jitted), then the loop: data, model, restore, train with periodic evaluation and
checkpoints, and the final test of the best and the last checkpoint into `results.json`.
"""

import functools
import json
import os
import pathlib
import shutil
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna.training import checkpoints
from lra_luna import config_lib
from lra_luna import datasets
from lra_luna.datasets import input_pipeline
from lra_luna.training import metrics as metrics_lib
from lra_luna.models import classifier as models
from lra_luna.models.model_config import ModelConfig

RESULTS_FILE = 'results.json'
CONFIG_FILE = 'config.json'


class TrainingError(RuntimeError):
  """The run cannot go on (non-finite loss or gradient, a workdir of another run)."""


# ----------------------------------------------------------------------------------------------
# Optimizer and schedules (lra.md §3).
# ----------------------------------------------------------------------------------------------
def make_schedule(config):
  """'rsqrt': lr * min(s/w, sqrt(w/s)) (LRA's linear_warmup * rsqrt_decay, peak-normalised as
  fairseq's inverse_sqrt); 'cosine': linear warmup to lr, then cosine decay to 0."""
  peak, warmup = config.learning_rate, max(config.warmup_steps, 1)
  if config.schedule == 'rsqrt':
    def rsqrt(step):
      step = jnp.maximum(step, 1).astype(jnp.float32)
      return peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))
    return rsqrt
  if config.schedule == 'cosine':
    return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, max(config.num_train_steps, warmup + 1))
  raise ValueError(f'Unknown schedule {config.schedule!r}; valid choices: {config_lib.SCHEDULES}.')


def make_optimizer(config):
  """AdamW (b1 0.9, b2 0.98, decoupled weight decay), optional global-norm clipping."""
  adamw = optax.adamw(make_schedule(config), b1=config.adam_b1, b2=config.adam_b2,
                      eps=config.adam_eps, weight_decay=config.weight_decay)
  if config.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), adamw)
  return adamw


# ----------------------------------------------------------------------------------------------
# Steps. State = {'params', 'constants', 'opt_state', 'step'}: a plain pytree.
# ----------------------------------------------------------------------------------------------
def weighted_cross_entropy(logits, targets, weights):
  """Sums of loss, correct predictions and weights over a batch (weights mask padding rows)."""
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  return jnp.sum(losses * weights), jnp.sum(correct * weights), jnp.sum(weights)


def train_step(state, batch, dropout_key, *, graphdef, tx):
  """One AdamW step on the mean cross-entropy; dropout keys are explicit (folded with the step)."""
  rngs_key = jax.random.fold_in(dropout_key, state['step'])

  def loss_fn(params):
    model = nnx.merge(graphdef, params, state['constants'])
    logits = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=rngs_key))
    loss, correct, count = weighted_cross_entropy(logits, batch['targets'],
                                                  jnp.ones_like(batch['targets'], jnp.float32))
    return loss / count, correct / count

  (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state['params'])
  updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
  params = optax.apply_updates(state['params'], updates)
  metrics = {'train_loss': loss, 'train_accuracy': accuracy,
             'grad_norm': optax.tree.norm(grads), 'param_norm': optax.tree.norm(params)}
  return dict(state, params=params, opt_state=opt_state, step=state['step'] + 1), metrics


def init_state(model_cfg: ModelConfig, seed: int, tx):
  """(graphdef, state, number of parameters) of a fresh model described by `model_cfg`."""
  model = models.build_model(model_cfg, seed)
  graphdef, params, constants = nnx.split(model, nnx.Param, ...)
  params, constants = nnx.to_pure_dict(params), nnx.to_pure_dict(constants)
  state = {'params': params, 'constants': constants, 'opt_state': tx.init(params),
           'step': jnp.zeros((), jnp.int32)}
  return graphdef, state, models.count_params(model)


def eval_step(params, constants, batch, *, graphdef):
  model = nnx.merge(graphdef, params, constants)
  logits = model(batch, deterministic=True)
  return weighted_cross_entropy(logits, batch['targets'], batch['weights'])


def make_evaluator(config, graphdef, mesh):
  """evaluate(stacked_state, arrays) -> {'loss': [seeds], 'accuracy': [seeds], 'count': int}
  over every example of one split's arrays (at most config.max_eval_batches batches, if set)."""
  eval_fn = jax.jit(jax.vmap(functools.partial(eval_step, graphdef=graphdef),
                             in_axes=(0, 0, None)))

  def evaluate(stacked_state, arrays):
    totals = 0.0
    for i, batch in enumerate(input_pipeline.eval_batches(arrays, config.eval_batch_size)):
      if config.max_eval_batches and i >= config.max_eval_batches:
        break
      sums = eval_fn(stacked_state['params'], stacked_state['constants'],
                     global_batch(mesh, batch))
      totals = totals + np.stack(jax.device_get(sums), axis=-1).astype(np.float64)
    loss, correct, count = totals[:, 0], totals[:, 1], totals[0, 2]
    return {'loss': loss / count, 'accuracy': correct / count, 'count': int(count)}

  return evaluate


def checkpoint_metrics(step: int, val: dict, test: dict, index: int) -> dict:
  """A results.json section ('best', 'last'): seed `index`'s metrics from `evaluate`."""
  return {'step': int(step),
          'val_accuracy': float(val['accuracy'][index]), 'val_loss': float(val['loss'][index]),
          'test_accuracy': float(test['accuracy'][index]), 'test_loss': float(test['loss'][index]),
          'test_examples': test['count']}


# ----------------------------------------------------------------------------------------------
# Devices: data parallel over every device of every process.
# ----------------------------------------------------------------------------------------------
def maybe_initialize_distributed():
  """Joins a multi-process run when the launcher says so: JAX_COORDINATOR_ADDRESS with
  JAX_NUM_PROCESSES and JAX_PROCESS_ID, or a cluster JAX detects itself (SLURM, Open MPI)."""
  if os.environ.get('JAX_COORDINATOR_ADDRESS'):
    # CPU processes (tests, CPU clusters) exchange collectives through gloo.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(
        os.environ['JAX_COORDINATOR_ADDRESS'],
        num_processes=int(os.environ['JAX_NUM_PROCESSES']),
        process_id=int(os.environ['JAX_PROCESS_ID']))
  elif int(os.environ.get('SLURM_NTASKS', '1')) > 1 or int(os.environ.get('OMPI_COMM_WORLD_SIZE', '1')) > 1:
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize()


def make_mesh():
  # Auto axes: the compiler propagates shardings through the model (no per-op annotations).
  return jax.make_mesh((jax.device_count(),), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))


def global_batch(mesh, local_batch: dict, seed_axis: bool = False):
  """Assembles the global batch from each process's rows, sharded over the 'data' axis (the
  example axis: axis 1 when the batch carries a leading seed axis)."""
  spec = PartitionSpec(None, 'data') if seed_axis else PartitionSpec('data')
  sharding = NamedSharding(mesh, spec)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in local_batch.items()}


# ----------------------------------------------------------------------------------------------
# Workdir.
# ----------------------------------------------------------------------------------------------
def check_workdir(config, workdir: pathlib.Path, overwrite: bool) -> None:
  """Refuses a workdir that holds a run with another config, unless `overwrite`; writes nothing."""
  if workdir.exists() and not workdir.is_dir():
    raise TrainingError(f'--workdir {workdir} is a file, not a folder; choose a folder for the '
                        'run (checkpoints, metrics, results.json).')
  config_path = workdir / CONFIG_FILE
  if config_path.exists() and not overwrite:
    saved, wanted = json.loads(config_path.read_text()), json.loads(config.to_json())
    if saved != wanted:
      differing = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
      raise TrainingError(
          f'{workdir} holds a run with a different config (fields {differing} differ). '
          'Use another --workdir, or pass --overwrite to delete that run and start anew.')


def start_workdir(config, workdir: pathlib.Path, overwrite: bool) -> None:
  """Clears the workdir with `overwrite`, then records the config. Called once the data and the
  model are ready, so that a start that fails (missing data, a bad option) leaves no config
  behind to refuse the corrected rerun."""
  if jax.process_index() != 0:
    return
  try:
    if overwrite and workdir.exists():
      shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    metrics_lib.write_json_atomically(workdir / CONFIG_FILE, json.loads(config.to_json()))
  except OSError as e:
    raise TrainingError(f'Cannot write the run folder {workdir} ({e.strerror}: {e.filename}); '
                        'choose a writable --workdir.') from None


def model_config(config, data) -> ModelConfig:
  """The checked, typed config.model, with the fields that come from the data filled in."""
  return ModelConfig.from_config(config.model, vocab_size=data.vocab_size,
                                 num_classes=data.num_classes, max_length=config.max_length)


def majority_rate(targets) -> float:
  return float(np.bincount(np.asarray(targets)).max() / len(targets))


# ----------------------------------------------------------------------------------------------
# The loop. Several seeds train in one program as a stack: state leaves get a leading seed axis
# and the steps are vmapped over it; one seed is a stack of one.
# ----------------------------------------------------------------------------------------------
def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       overwrite: bool = False) -> dict:
  """Trains config's model on config's task in `workdir` (resuming what is there); returns results."""
  return train_seeds(config, [config.seed], [workdir], overwrite=overwrite)[0]


def stack_trees(trees):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def unstack_tree(tree, index):
  return jax.tree.map(lambda x: x[index], tree)


def train_seeds(config: ml_collections.ConfigDict, seeds, workdirs, *,
                overwrite: bool = False) -> list[dict]:
  """Trains one model per seed, all in one program (the step vmapped over seeds).

  Each seed gets its own parameters, dropout keys, data order, workdir, checkpoints, metrics and
  results.json, exactly as if it ran alone with config.seed = seed. Returns the results per seed.
  """
  if len(seeds) != len(workdirs) or not seeds:
    raise ValueError(f'Need one workdir per seed, got seeds {seeds} and workdirs {workdirs}.')
  configs = []
  for seed in seeds:
    seed_config = ml_collections.ConfigDict(config.to_dict())
    seed_config.seed = int(seed)
    config_lib.validate(seed_config)
    configs.append(seed_config)
  workdirs = [pathlib.Path(w) for w in workdirs]
  is_writer = jax.process_index() == 0
  for seed_config, workdir in zip(configs, workdirs):
    check_workdir(seed_config, workdir, overwrite)
  for field in ('batch_size', 'eval_batch_size'):
    if config[field] % jax.device_count():
      raise ValueError(f'config.{field} = {config[field]} does not divide over '
                       f'{jax.device_count()} devices; use a multiple of {jax.device_count()}.')
  mesh = make_mesh()

  # Data: one copy for every seed; each seed its own shuffled iterator.
  data = datasets.load_task(config)
  train_iters = [input_pipeline.train_iterator(data.splits['train'], config.batch_size, s)
                 for s in seeds]

  # Model, optimizer, state (a plain pytree per seed).
  model_cfg = model_config(config, data)
  tx = make_optimizer(config)
  states = []
  for seed in seeds:
    graphdef, state, num_params = init_state(model_cfg, seed, tx)
    states.append(state)
  dropout_keys = jnp.stack([jax.random.fold_in(jax.random.key(s), 1) for s in seeds])
  for seed_config, workdir in zip(configs, workdirs):
    start_workdir(seed_config, workdir, overwrite)

  # Restore each seed's latest checkpoint: parameters, optimizer, step, data order, best so far.
  ckpts = [checkpoints.Checkpoints(w) for w in workdirs]
  restored = [c.restore_latest(st, it) for c, st, it in zip(ckpts, states, train_iters)]
  states = [st for st, _ in restored]
  bests = [info.get('best', {'step': -1, 'val_accuracy': -1.0}) for _, info in restored]
  start_steps = {int(st['step']) for st in states}
  if len(start_steps) > 1:
    raise TrainingError(f'The workdirs {[str(w) for w in workdirs]} hold checkpoints of '
                        f'different steps {sorted(start_steps)}; resume them one seed at a time.')
  start_step = start_steps.pop()
  replicated = NamedSharding(mesh, PartitionSpec())
  state = jax.device_put(stack_trees(states), replicated)
  writers = [metrics_lib.MetricWriter(w, enabled=is_writer,
                                      resume_step=start_step if start_step else None)
             for w in workdirs]
  if start_step == 0:
    for seed_config, writer in zip(configs, writers):
      writer.write_hparams({**config_lib.flatten(seed_config), 'num_params': num_params})
  label = config_lib.model_label(config)  # The preset name, or a plug-in's class name.
  report(is_writer, f'{config.task} / {label}, seeds {list(seeds)}: {num_params} '
         f'parameters; starting at step {start_step} of {config.num_train_steps}.')

  step_fn = jax.jit(jax.vmap(functools.partial(train_step, graphdef=graphdef, tx=tx)),
                    donate_argnums=0)
  evaluate = make_evaluator(config, graphdef, mesh)
  progress = make_progress(config, start_step, is_writer)
  pending = []  # Per-step metrics kept on device until the next log, to avoid a sync per step.
  last_log = (start_step, time.time())

  def flush_metrics(step):
    """Writes each seed's mean train metrics since the last flush; stops on non-finite values."""
    nonlocal pending, last_log
    if not pending:
      return
    values = {k: np.stack([np.asarray(v[k]) for v in jax.device_get(pending)], axis=1)
              for k in pending[0]}  # name -> [seeds, steps]
    pending = []
    for i, seed in enumerate(seeds):
      if not all(np.isfinite(values[k][i]).all() for k in ('train_loss', 'grad_norm')):
        raise TrainingError(
            f'Non-finite loss or gradient (seed {seed}) before step {step}: train_loss '
            f'{values["train_loss"][i].tolist()}, grad_norm {values["grad_norm"][i].tolist()}. '
            f'The last good checkpoint in {workdirs[i] / "checkpoints"} is kept; lower '
            'config.learning_rate or set config.grad_clip_norm, then rerun.')
    speed = (step - last_log[0]) / max(time.time() - last_log[1], 1e-9)
    last_log = (step, time.time())
    for i, writer in enumerate(writers):
      mean = {k: float(np.mean(v[i])) for k, v in values.items()}
      writer.write_scalars(step, {**mean, 'steps_per_sec': speed,
                                  'learning_rate': float(make_schedule(config)(step))})
    progress.set_postfix(loss=f'{np.mean(values["train_loss"][:, -1]):.4f}', refresh=False)

  def evaluate_split(stacked_state, split):
    return evaluate(stacked_state, data.splits[split])

  for step in range(start_step + 1, config.num_train_steps + 1):
    batch = global_batch(mesh, input_pipeline.stack_examples([next(it) for it in train_iters]),
                         seed_axis=True)
    state, step_metrics = step_fn(state, batch, dropout_keys)
    pending.append(step_metrics)
    progress.update(1)
    is_last = step == config.num_train_steps
    if step % config.log_every == 0 or is_last:
      flush_metrics(step)
    if step % config.eval_every == 0 or is_last:
      flush_metrics(step)
      val = evaluate_split(state, 'validation')
      for i, seed in enumerate(seeds):
        writers[i].write_scalars(step, {'val_loss': val['loss'][i],
                                        'val_accuracy': val['accuracy'][i]})
        report(is_writer, f'seed {seed} step {step}: val accuracy {val["accuracy"][i]:.4f}, '
               f'loss {val["loss"][i]:.4f}')
        if val['accuracy'][i] > bests[i]['val_accuracy']:
          bests[i] = {'step': step, 'val_accuracy': float(val['accuracy'][i]),
                      'val_loss': float(val['loss'][i])}
          ckpts[i].save_best(step, unstack_tree(state, i))
    if step % config.checkpoint_every == 0 or is_last:
      flush_metrics(step)
      for i in range(len(seeds)):
        ckpts[i].save_latest(step, unstack_tree(state, i), train_iters[i], {'best': bests[i]})
  progress.close()

  # Test the last and the best-on-validation checkpoints of every seed.
  best_state = stack_trees([c.restore_best(unstack_tree(state, i)) for i, c in enumerate(ckpts)])
  sections = {}
  for name, section_state in (('last', state), ('best', best_state)):
    sections[name] = (evaluate_split(section_state, 'validation'),
                      evaluate_split(section_state, 'test'))
  all_results = []
  for i, seed in enumerate(seeds):
    results = {'task': config.task, 'model': label, 'head': config.model.head,
               'protocol': config.get('protocol', 'lra'),
               'seed': int(seed), 'num_params': num_params, 'steps': config.num_train_steps,
               'test_majority_rate': majority_rate(data.splits['test']['targets']),
               'data': data.source}
    for name, (val, test) in sections.items():
      results[name] = checkpoint_metrics(
          config.num_train_steps if name == 'last' else bests[i]['step'], val, test, i)
    # The flat keys report the last checkpoint, as LRA did; `best` is beside it.
    results.update({k: results['last'][k]
                    for k in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss')})
    if is_writer:
      metrics_lib.write_json_atomically(workdirs[i] / RESULTS_FILE, results)
    writers[i].write_scalars(config.num_train_steps, {'test_accuracy': results['test_accuracy'],
                                                      'test_loss': results['test_loss']})
    writers[i].close()
    ckpts[i].close()
    all_results.append(results)
  return all_results


def report(enabled: bool, message: str) -> None:
  """A line for the user (absl's INFO log is left to the libraries' chatter)."""
  if enabled:
    print(message, flush=True)


def make_progress(config, start_step, enabled):
  """A tqdm bar with steps/s and ETA; disabled in CI and on processes other than 0."""
  from tqdm import tqdm
  return tqdm(total=config.num_train_steps, initial=start_step, unit='step', desc='train',
              disable=not (enabled and config.progress_bar) or bool(os.environ.get('CI')))
