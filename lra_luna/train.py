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

from lra_luna import checkpoints
from lra_luna import config_lib
from lra_luna import datasets
from lra_luna import input_pipeline
from lra_luna import metrics as metrics_lib
from lra_luna import models

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
             'grad_norm': optax.global_norm(grads), 'param_norm': optax.global_norm(params)}
  return dict(state, params=params, opt_state=opt_state, step=state['step'] + 1), metrics


def eval_step(params, constants, batch, *, graphdef):
  model = nnx.merge(graphdef, params, constants)
  logits = model(batch, deterministic=True)
  return weighted_cross_entropy(logits, batch['targets'], batch['weights'])


# ----------------------------------------------------------------------------------------------
# Devices: data parallel over every device of every process.
# ----------------------------------------------------------------------------------------------
def maybe_initialize_distributed():
  """Joins a multi-process run when the launcher set the coordinator (JAX_COORDINATOR_ADDRESS or a
  cluster JAX auto-detects, e.g. SLURM); a no-op for one process."""
  if os.environ.get('JAX_COORDINATOR_ADDRESS') or os.environ.get('SLURM_NTASKS', '1') != '1':
    jax.distributed.initialize()


def make_mesh():
  # Auto axes: the compiler propagates shardings through the model (no per-op annotations).
  return jax.make_mesh((jax.device_count(),), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))


def global_batch(mesh, local_batch: dict):
  """Assembles the global batch from each process's rows, sharded over the 'data' axis."""
  sharding = NamedSharding(mesh, PartitionSpec('data'))
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in local_batch.items()}


def evaluate(eval_fn, state, mesh, arrays, config) -> dict:
  """Loss and accuracy over every example of a split."""
  totals = np.zeros(3)
  for i, batch in enumerate(input_pipeline.eval_batches(arrays, config.eval_batch_size)):
    if config.max_eval_batches and i >= config.max_eval_batches:
      break
    totals += np.array(jax.device_get(eval_fn(state['params'], state['constants'],
                                              global_batch(mesh, batch))))
  loss, correct, count = totals
  return {'loss': float(loss / count), 'accuracy': float(correct / count), 'count': int(count)}


# ----------------------------------------------------------------------------------------------
# Workdir.
# ----------------------------------------------------------------------------------------------
def prepare_workdir(config, workdir: pathlib.Path, overwrite: bool) -> None:
  """Refuses a workdir that holds a run with another config, unless `overwrite` clears it."""
  config_path = workdir / CONFIG_FILE
  if config_path.exists():
    saved = json.loads(config_path.read_text())
    if saved != json.loads(config.to_json()):
      if not overwrite:
        differing = sorted(k for k in set(saved) | set(json.loads(config.to_json()))
                           if saved.get(k) != json.loads(config.to_json()).get(k))
        raise TrainingError(
            f'{workdir} holds a run with a different config (fields {differing} differ). '
            'Use another --workdir, or pass --overwrite to delete that run and start anew.')
  if overwrite and workdir.exists() and jax.process_index() == 0:
    shutil.rmtree(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if jax.process_index() == 0:
    metrics_lib.write_json_atomically(config_path, json.loads(config.to_json()))


def model_config(config, data) -> ml_collections.ConfigDict:
  """config.model with the fields that come from the data filled in."""
  mc = ml_collections.ConfigDict(config.model.to_dict())
  mc.vocab_size, mc.num_classes, mc.max_length = data.vocab_size, data.num_classes, config.max_length
  return mc


def majority_rate(targets) -> float:
  return float(np.bincount(np.asarray(targets)).max() / len(targets))


# ----------------------------------------------------------------------------------------------
# The loop.
# ----------------------------------------------------------------------------------------------
def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       overwrite: bool = False) -> dict:
  """Trains config's model on config's task in `workdir` (resuming what is there); returns results."""
  config_lib.validate(config)
  workdir = pathlib.Path(workdir)
  is_writer = jax.process_index() == 0
  prepare_workdir(config, workdir, overwrite)
  mesh = make_mesh()
  for field in ('batch_size', 'eval_batch_size'):
    if config[field] % jax.device_count():
      raise ValueError(f'config.{field} = {config[field]} does not divide over '
                       f'{jax.device_count()} devices; use a multiple of {jax.device_count()}.')

  # Data.
  data = datasets.load_task(config)
  train_arrays = data.splits['train']

  # Model, optimizer, state.
  mc = model_config(config, data)
  model = models.build_model(mc, config.seed)
  num_params = models.count_params(model)
  graphdef, params, constants = nnx.split(model, nnx.Param, ...)
  params, constants = nnx.to_pure_dict(params), nnx.to_pure_dict(constants)
  tx = make_optimizer(config)
  state = {'params': params, 'constants': constants, 'opt_state': tx.init(params),
           'step': jnp.zeros((), jnp.int32)}
  state = jax.device_put(state, NamedSharding(mesh, PartitionSpec()))
  dropout_key = jax.random.fold_in(jax.random.key(config.seed), 1)
  train_iter = input_pipeline.train_iterator(train_arrays, config.batch_size, config.seed)

  # Restore the latest checkpoint, if any: parameters, optimizer, step, data order, best so far.
  ckpt = checkpoints.Checkpoints(workdir)
  state, resume_info = ckpt.restore_latest(state, train_iter)
  start_step = int(state['step'])
  best = resume_info.get('best', {'step': -1, 'val_accuracy': -1.0})
  writer = metrics_lib.MetricWriter(workdir, enabled=is_writer,
                                    resume_step=start_step if start_step else None)
  if start_step == 0:
    writer.write_hparams({**config_lib.flatten(config), 'num_params': num_params})
  report(is_writer, f'{config.task} / {config.model_name}: {num_params} parameters; '
         f'starting at step {start_step} of {config.num_train_steps} in {workdir}.')

  step_fn = jax.jit(functools.partial(train_step, graphdef=graphdef, tx=tx), donate_argnums=0)
  eval_fn = jax.jit(functools.partial(eval_step, graphdef=graphdef))
  progress = make_progress(config, start_step, is_writer)
  pending = []  # Per-step metrics kept on device until the next log, to avoid a sync per step.
  last_log = (start_step, time.time())

  def flush_metrics(step):
    """Writes the mean train metrics since the last flush; stops the run on non-finite values."""
    nonlocal pending, last_log
    if not pending:
      return
    values = jax.device_get(pending)
    pending = []
    mean = {k: float(np.mean([v[k] for v in values])) for k in values[0]}
    if not all(np.isfinite(v[k]) for v in values for k in ('train_loss', 'grad_norm')):
      raise TrainingError(
          f'Non-finite loss or gradient before step {step} (mean train_loss {mean["train_loss"]}, '
          f'grad_norm {mean["grad_norm"]}). The last good checkpoint in {workdir / "checkpoints"} '
          'is kept; lower config.learning_rate or set config.grad_clip_norm, then rerun.')
    mean['steps_per_sec'] = (step - last_log[0]) / max(time.time() - last_log[1], 1e-9)
    mean['learning_rate'] = float(make_schedule(config)(step))
    last_log = (step, time.time())
    writer.write_scalars(step, mean)
    progress.set_postfix(loss=f'{mean["train_loss"]:.4f}', refresh=False)

  for step in range(start_step + 1, config.num_train_steps + 1):
    batch = global_batch(mesh, next(train_iter))
    state, step_metrics = step_fn(state, batch, dropout_key)
    pending.append(step_metrics)
    progress.update(1)
    if step % config.log_every == 0 or step == config.num_train_steps:
      flush_metrics(step)
    is_last = step == config.num_train_steps
    if step % config.eval_every == 0 or is_last:
      flush_metrics(step)
      val = evaluate(eval_fn, state, mesh, data.splits['validation'], config)
      writer.write_scalars(step, {'val_loss': val['loss'], 'val_accuracy': val['accuracy']})
      report(is_writer, f'step {step}: val accuracy {val["accuracy"]:.4f}, loss {val["loss"]:.4f}')
      if val['accuracy'] > best['val_accuracy']:
        best = {'step': step, 'val_accuracy': val['accuracy'], 'val_loss': val['loss']}
        ckpt.save_best(step, state)
    if step % config.checkpoint_every == 0 or is_last:
      flush_metrics(step)
      ckpt.save_latest(step, state, train_iter, {'best': best})
  progress.close()

  # Test the last and the best-on-validation checkpoints.
  results = {'task': config.task, 'model': config.model_name, 'head': config.model.head,
             'seed': config.seed, 'num_params': num_params, 'steps': config.num_train_steps,
             'test_majority_rate': majority_rate(data.splits['test']['targets'])}
  sections = {}
  for name, section_state, step in (
      ('last', state, config.num_train_steps),
      ('best', ckpt.restore_best(state), best['step'])):
    val = evaluate(eval_fn, section_state, mesh, data.splits['validation'], config)
    test = evaluate(eval_fn, section_state, mesh, data.splits['test'], config)
    sections[name] = {'step': step, 'val_accuracy': val['accuracy'], 'val_loss': val['loss'],
                      'test_accuracy': test['accuracy'], 'test_loss': test['loss'],
                      'test_examples': test['count']}
  # The flat keys report the last checkpoint, as LRA did; `best` is beside it.
  results.update({k: sections['last'][k]
                  for k in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss')})
  results.update(sections)
  if is_writer:
    metrics_lib.write_json_atomically(workdir / RESULTS_FILE, results)
  writer.write_scalars(config.num_train_steps, {'test_accuracy': results['test_accuracy'],
                                                'test_loss': results['test_loss']})
  writer.close()
  ckpt.close()
  return results


def report(enabled: bool, message: str) -> None:
  """A line for the user (absl's INFO log is left to the libraries' chatter)."""
  if enabled:
    print(message, flush=True)


def make_progress(config, start_step, enabled):
  """A tqdm bar with steps/s and ETA; disabled in CI and on processes other than 0."""
  from tqdm import tqdm
  return tqdm(total=config.num_train_steps, initial=start_step, unit='step', desc='train',
              disable=not (enabled and config.progress_bar) or bool(os.environ.get('CI')))
