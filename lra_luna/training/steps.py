"""What a run is built from, for the training loop and the tools alike: the model's typed config,
the train state, the optimizer and its schedule, the train and eval steps, the evaluator and the
device mesh. `train` (the loop), `evaluate`, `predict`, `profile` and `sweep` import this module.

The state is a plain pytree {'params', 'constants', 'opt_state', 'step'}, plus 'loss_scale'
when the model computes in float16 (dynamic loss scaling); several seeds train as a stack of
states (a leading seed axis, steps vmapped over it).
"""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from lra_luna import config_lib
from lra_luna import spt
from lra_luna.datasets import input_pipeline
from lra_luna.models import attention
from lra_luna.models import classifier as models
from lra_luna.models.blocks import lru
from lra_luna.models import objectives as objectives_lib
from lra_luna.models import pretraining
from lra_luna.models.blocks import s4d
from lra_luna.models.blocks import s5
from lra_luna.models.model_config import ModelConfig
from lra_luna.training import host_memory


def model_config(config, data) -> ModelConfig:
  """The checked, typed config.model, with the fields that come from the data (and from
  config.pretraining: the mask id's row, the causal encoder) filled in."""
  objective = config.get('pretraining', {}).get('objective', '')
  return ModelConfig.from_config(config.model, vocab_size=data.vocab_size,
                                 num_classes=data.num_classes, max_length=config.max_length,
                                 mask_token=objective == 'masked',
                                 causal=objective == 'causal' or bool(config.model.causal))


def pretraining_objective(config, data) -> objectives_lib.Objective | None:
  """The pretraining objective of a pretraining phase's config (`spt.phase_config`); None for
  classification."""
  if not config.get('pretraining', {}).get('is_phase', False):
    return None
  loss = config.pretraining.get('loss', 'ce')
  mean, std = spt.PIXEL_NORMALIZATION.get(config.task, (0.0, 1.0))
  return objectives_lib.Objective(
      config.pretraining.objective, float(config.pretraining.mask_rate), data.vocab_size,
      mask_id=data.vocab_size + 1, eos_id=int(data.source.get('eos_id', -1)),
      mask_padding=bool(config.model.mask_padding), loss=loss, pixel_mean=float(mean),
      pixel_std=float(std))


def matmul_precision(name: str):
  """The context in which a run traces its steps: jax.default_matmul_precision(name) for a
  config_lib.MATMUL_PRECISIONS name ('default' is JAX's own: TF32 for float32 matmuls on recent
  NVIDIA GPUs, bfloat16 passes on TPUs; 'highest' true float32)."""
  return jax.default_matmul_precision(name)


def precision_record(config) -> dict:
  """What results.json['precision'] records of a run's numerics: the compute dtype, whether
  float16 loss scaling ran, the matmul precision, the platform and the attention
  implementation that ran (the fused Transformer: 'cudnn' or 'xla')."""
  platform = jax.default_backend()
  return {'dtype': config.model.dtype, 'loss_scaling': uses_loss_scaling(config.model),
          'matmul_precision': config.matmul_precision, 'platform': platform,
          'attention_implementation': attention.attention_implementation(
              config.model.attention, config.model.attention_implementation, platform,
              config.model.dtype)}


def majority_rate(train_targets, test_targets) -> float:
  """The majority class's accuracy on the test set: the rate of the TRAINING set's most frequent
  label (the lowest of a tie) among the test labels, what a constant classifier fit on the
  training set scores (the test set's own most frequent label is no classifier's to know)."""
  label = int(np.bincount(np.asarray(train_targets).ravel()).argmax())  # MQAR: [N, queries]
  return float(np.mean(np.asarray(test_targets) == label))



# ----------------------------------------------------------------------------------------------
# Optimizer and schedules (docs/protocols.md).
# ----------------------------------------------------------------------------------------------
def make_schedule(config, peak=None):
  """'rsqrt': lr * min(s/w, sqrt(w/s)) (LRA's linear_warmup * rsqrt_decay, peak-normalised as
  fairseq's inverse_sqrt); 'cosine': linear warmup to lr, then cosine decay to 0; 'linear':
  linear warmup to lr, then linear decay to 0 at num_train_steps (fairseq's linear_decay, the
  Mega authors'). lr is config.learning_rate, or `peak`."""
  peak, warmup = peak or config.learning_rate, max(config.warmup_steps, 1)
  if config.schedule == 'rsqrt':
    def rsqrt(step):
      step = jnp.maximum(step, 1).astype(jnp.float32)
      return peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))
    return rsqrt
  if config.schedule == 'cosine':
    return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, max(config.num_train_steps, warmup + 1))
  if config.schedule == 'linear':
    decay = max(config.num_train_steps - warmup, 1)
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup),
                                 optax.linear_schedule(peak, 0.0, decay)], [warmup])
  if config.schedule == 'constant':  # the SPT authors' constant_warmup (docs/spt.md)
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup),
                                 optax.constant_schedule(peak)], [warmup])
  raise ValueError(f'Unknown schedule {config.schedule!r}; valid choices: {config_lib.SCHEDULES}.')


def make_optimizer(config):
  """AdamW (b1 0.9, b2 0.98, decoupled weight decay), optional global-norm clipping. With
  config.ssm_learning_rate > 0 an SSM's A and dt (parameter_groups) get that peak rate on the
  same schedule and no weight decay (the S4 authors' optimizer groups)."""
  adamw = optax.adamw(make_schedule(config), b1=config.adam_b1, b2=config.adam_b2,
                      eps=config.adam_eps, weight_decay=config.weight_decay)
  if config.ssm_learning_rate > 0:
    ssm = optax.adam(make_schedule(config, config.ssm_learning_rate), b1=config.adam_b1,
                     b2=config.adam_b2, eps=config.adam_eps)
    adamw = optax.multi_transform({'default': adamw, 'ssm': ssm}, parameter_groups)
  if config.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), adamw)
  return adamw


# The leaves that train at config.ssm_learning_rate: each state space model's SSM_PARAMETERS.
SSM_PARAMETERS = frozenset(s4d.SSM_PARAMETERS + s5.SSM_PARAMETERS + lru.SSM_PARAMETERS)


def parameter_groups(params):
  """The optimizer group of every parameter leaf: 'ssm' for an SSM's own parameters (a name in
  SSM_PARAMETERS: S4D's A and dt, S5's Lambda, B~ and steps, LRU's nu, theta, gamma and B),
  'default' for the rest."""
  def group(path, _):
    return 'ssm' if getattr(path[-1], 'key', None) in SSM_PARAMETERS else 'default'
  return jax.tree_util.tree_map_with_path(group, params)


# ----------------------------------------------------------------------------------------------
# Dynamic loss scaling (float16 compute), fairseq --fp16's scheme: the loss is multiplied by the
# scale before the backward pass so that small float16 gradients do not flush to zero; a step
# whose gradients overflow is skipped and the scale halved; after LOSS_SCALE_PERIOD finite steps
# in a row it doubles.
# ----------------------------------------------------------------------------------------------
INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_PERIOD = 2000
MIN_LOSS_SCALE = 1.0


def uses_loss_scaling(model_cfg) -> bool:
  """Whether a model's training uses dynamic loss scaling: float16 compute (the `fp16` word)."""
  return model_cfg.dtype == 'float16'


def initial_loss_scale() -> dict:
  """{'scale': the float32 scale, 'good_steps': finite steps in a row since it last changed}."""
  return {'scale': jnp.asarray(INITIAL_LOSS_SCALE, jnp.float32),
          'good_steps': jnp.zeros((), jnp.int32)}


def next_loss_scale(loss_scale: dict, finite) -> dict:
  """Halved (down to MIN_LOSS_SCALE) after a non-finite step; doubled after LOSS_SCALE_PERIOD
  finite steps in a row."""
  good_steps = jnp.where(finite, loss_scale['good_steps'] + 1, 0)
  grow = good_steps >= LOSS_SCALE_PERIOD
  scale = jnp.where(finite, jnp.where(grow, loss_scale['scale'] * 2, loss_scale['scale']),
                    jnp.maximum(loss_scale['scale'] / 2, MIN_LOSS_SCALE))
  return {'scale': scale, 'good_steps': jnp.where(grow, 0, good_steps)}


def all_finite(tree) -> jax.Array:
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


# ----------------------------------------------------------------------------------------------
# Steps. State = {'params', 'constants', 'opt_state', 'step'[, 'loss_scale']}: a plain pytree.
# ----------------------------------------------------------------------------------------------
def weighted_cross_entropy(logits, targets, weights):
  """Sums of loss, correct predictions and weights over a batch (weights [B] mask padding rows).
  Targets [B, K] (MQAR's queries) count each of the K predictions, its row's weight each."""
  extra = (1,) * (targets.ndim - weights.ndim)
  weights = jnp.broadcast_to(weights.reshape(weights.shape + extra), targets.shape)
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  return jnp.sum(losses * weights), jnp.sum(correct * weights), jnp.sum(weights)


def micro_batches(batch: dict, accumulation_steps: int) -> dict:
  """batch's arrays as [accumulation_steps, rows / accumulation_steps, ...]: micro-batch i holds
  rows i, i + k, i + 2k, ..., so that each device's share of the example axis (data-parallel
  sharding) is split evenly among the micro-batches."""
  def split(x):
    x = x.reshape(x.shape[0] // accumulation_steps, accumulation_steps, *x.shape[1:])
    return jnp.swapaxes(x, 0, 1)
  return jax.tree.map(split, batch)


def loss_sums(model, batch, weights, objective, key, *, deterministic: bool):
  """(sum of losses, sum of correct predictions, sum of weights) of one batch: the classifier's
  cross-entropy (weights [B]), or the pretraining objective's token loss (`objective`; its mask
  drawn from `key`, padding rows of weight 0)."""
  rngs = None if deterministic else nnx.Rngs(dropout=key)
  if objective is None:
    logits = model(batch, deterministic=deterministic, rngs=rngs)
    return weighted_cross_entropy(logits, batch['targets'], weights)
  mask_key = (objectives_lib.masking.evaluation_key(objectives_lib.pretraining_sequences(batch))
              if deterministic else jax.random.fold_in(key, MASK_STREAM))
  return objectives_lib.token_loss_sums(model, dict(batch, weights=weights), objective,
                                        mask_key, deterministic=deterministic, rngs=rngs)


# The masked objective's mask key is the step's dropout key folded with this.
MASK_STREAM = 7


def batch_gradients(params, constants, batch, rngs_key, scale, *, graphdef,
                    accumulation_steps: int = 1, objective=None):
  """(gradient of the batch's mean cross-entropy, times `scale` where not None; mean loss; mean
  accuracy). With accumulation_steps k > 1 the batch runs as k equal micro-batches in a
  jax.lax.scan (one micro-batch's activations alive at a time) and the gradient and metrics are
  the means over them: those of the whole batch up to float summation order (dropout draws its
  masks per micro-batch). With a pretraining `objective` the loss is its token loss."""
  def loss_fn(params, batch, key):
    model = nnx.merge(graphdef, params, constants)
    loss, correct, count = loss_sums(model, batch, jnp.ones_like(batch['targets'], jnp.float32),
                                     objective, key, deterministic=False)
    mean = loss / count
    return (mean if scale is None else mean * scale), (mean, correct / count)

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  if accumulation_steps == 1:  # The whole batch at once, with the step's own dropout key.
    (_, (loss, accuracy)), grads = grad_fn(params, batch, rngs_key)
    return grads, loss, accuracy

  def accumulate(sums, index_and_batch):
    index, micro = index_and_batch
    (_, (loss, accuracy)), grads = grad_fn(params, micro, jax.random.fold_in(rngs_key, index))
    metrics = (loss.astype(jnp.float32), accuracy.astype(jnp.float32))
    return jax.tree.map(jnp.add, sums, (grads, *metrics)), None

  zeros = (jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.float32),
           jnp.zeros((), jnp.float32))
  sums, _ = jax.lax.scan(accumulate, zeros, (jnp.arange(accumulation_steps),
                                             micro_batches(batch, accumulation_steps)))
  return jax.tree.map(lambda total: total / accumulation_steps, sums)


def train_step(state, batch, dropout_key, *, graphdef, tx, accumulation_steps: int = 1,
               objective=None):
  """One AdamW step on the mean cross-entropy; dropout keys are explicit (folded with the step).
  The gradient is accumulated over accumulation_steps micro-batches (batch_gradients;
  config.grad_accumulation_steps).

  With a 'loss_scale' in the state (float16) the loss is scaled before the backward pass and the
  gradients unscaled after it; a step with a non-finite gradient leaves the parameters and the
  optimizer state as they were (metrics 'skipped_steps' 1, 'loss_scale' the scale it used).
  """
  rngs_key = jax.random.fold_in(dropout_key, state['step'])
  scale = state['loss_scale']['scale'] if 'loss_scale' in state else None
  grads, loss, accuracy = batch_gradients(state['params'], state['constants'], batch, rngs_key,
                                          scale, graphdef=graphdef,
                                          accumulation_steps=accumulation_steps,
                                          objective=objective)
  if scale is not None:
    grads = jax.tree.map(lambda g: g / scale, grads)
  updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
  params = optax.apply_updates(state['params'], updates)
  metrics = {'train_loss': loss, 'train_accuracy': accuracy,
             'grad_norm': optax.tree.norm(grads), 'param_norm': optax.tree.norm(params)}
  new_state = dict(state, params=params, opt_state=opt_state, step=state['step'] + 1)
  if scale is None:
    return new_state, metrics
  finite = all_finite(grads)
  keep = lambda new, old: jnp.where(finite, new, old)  # A skipped step changes nothing.
  new_state.update(params=jax.tree.map(keep, params, state['params']),
                   opt_state=jax.tree.map(keep, opt_state, state['opt_state']),
                   loss_scale=next_loss_scale(state['loss_scale'], finite))
  metrics.update(param_norm=optax.tree.norm(new_state['params']), loss_scale=scale,
                 skipped_steps=1.0 - finite.astype(jnp.float32))
  return new_state, metrics


def init_state(model_cfg: ModelConfig, seed: int, tx, objective=None):
  """(graphdef, state, number of parameters) of a fresh model described by `model_cfg`: the
  classifier, or with a pretraining `objective` the token predictor."""
  model = (models.build_model(model_cfg, seed) if objective is None
           else pretraining.build_token_predictor(model_cfg, seed, objective.outputs))
  graphdef, params, constants = nnx.split(model, nnx.Param, ...)
  params, constants = nnx.to_pure_dict(params), nnx.to_pure_dict(constants)
  state = {'params': params, 'constants': constants, 'opt_state': tx.init(params),
           'step': jnp.zeros((), jnp.int32)}
  if uses_loss_scaling(model_cfg):
    state['loss_scale'] = initial_loss_scale()  # Saved and restored with the state.
  return graphdef, state, models.count_params(model)


def batch_shapes(config, model_cfg: ModelConfig) -> dict:
  """{name: shape} of one training batch as the data gives it (for a step compiled or timed
  without data): the inputs (two documents for a dual encoder) and a target per example, or, for
  a recall model (MQAR), the query positions and a target per query."""
  rows = config.batch_size
  inputs = ('inputs1', 'inputs2') if model_cfg.dual_encoder else ('inputs',)
  shapes = {name: (rows, config.max_length) for name in inputs}
  if model_cfg.predict == 'queries':
    shapes['query_positions'] = shapes['targets'] = (rows, config.mqar.num_kv_pairs)
  else:
    shapes['targets'] = (rows,)
  return shapes


def eval_step(params, constants, batch, *, graphdef, objective=None):
  model = nnx.merge(graphdef, params, constants)
  return loss_sums(model, batch, batch['weights'], objective, None, deterministic=True)


def eval_batch_size(config) -> int:
  """config.eval_batch_size rounded up to a multiple of the devices: the added rows are padding
  of weight 0, so the metrics are those of the configured batch (250 runs as 256 on 8 devices)."""
  devices = jax.device_count()
  return -(-config.eval_batch_size // devices) * devices


def make_evaluator(config, graphdef, mesh, objective=None):
  """evaluate(stacked_state, arrays, on_batch=None) -> {'loss': [seeds], 'accuracy': [seeds],
  'count': int} over every example of one split's arrays (at most config.max_eval_batches
  batches, if set). on_batch(done, total) is called after each batch (progress; it may raise to
  stop the pass)."""
  eval_fn = jax.jit(jax.vmap(functools.partial(eval_step, graphdef=graphdef, objective=objective),
                             in_axes=(0, 0, None)))

  def evaluate(stacked_state, arrays, on_batch=None):
    totals = 0.0
    num_batches = num_eval_batches(config, arrays)
    for i, batch in enumerate(input_pipeline.eval_batches(arrays, eval_batch_size(config))):
      if i >= num_batches:
        break
      with matmul_precision(config.matmul_precision):  # also for evaluate.py's passes
        sums = eval_fn(stacked_state['params'], stacked_state['constants'],
                       global_batch(mesh, batch))
      totals = totals + np.stack(jax.device_get(sums), axis=-1).astype(np.float64)
      if on_batch is not None:
        on_batch(i + 1, num_batches)
    loss, correct, count = totals[:, 0], totals[:, 1], totals[0, 2]
    return {'loss': loss / count, 'accuracy': correct / count, 'count': int(count)}

  return evaluate


def num_eval_batches(config, arrays) -> int:
  """The batches one evaluation pass over `arrays` runs: every example, at most
  config.max_eval_batches batches if that is set."""
  num = -(-len(arrays['targets']) // eval_batch_size(config))
  return min(num, config.max_eval_batches) if config.max_eval_batches else num


def checkpoint_metrics(step: int, val: dict, test: dict, index: int) -> dict:
  """A results.json section ('best', 'last'): seed `index`'s metrics from `evaluate`."""
  return {'step': int(step),
          'val_accuracy': float(val['accuracy'][index]), 'val_loss': float(val['loss'][index]),
          'test_accuracy': float(test['accuracy'][index]), 'test_loss': float(test['loss'][index]),
          'test_examples': test['count']}


# ----------------------------------------------------------------------------------------------
# Devices: data parallel over every device of every process.
# ----------------------------------------------------------------------------------------------
def local_device_ids() -> list[int] | None:
  """The devices of this process on its node in a multi-process run started by hand:
  $JAX_LOCAL_DEVICE_IDS ('0,1'), else [$LOCAL_RANK] (one device per process, as JAX itself
  assigns under SLURM and Open MPI), else None: one process per node, with all its devices."""
  if os.environ.get('JAX_LOCAL_DEVICE_IDS'):
    return [int(i) for i in os.environ['JAX_LOCAL_DEVICE_IDS'].split(',')]
  if os.environ.get('LOCAL_RANK'):
    return [int(os.environ['LOCAL_RANK'])]
  return None


def maybe_initialize_distributed():
  """Joins a multi-process run when the launcher says so: JAX_COORDINATOR_ADDRESS with
  JAX_NUM_PROCESSES and JAX_PROCESS_ID (each process on its `local_device_ids`), or a cluster
  JAX detects itself (SLURM, Open MPI: one device per process)."""
  if os.environ.get('JAX_COORDINATOR_ADDRESS'):
    # CPU processes (tests, CPU clusters) exchange collectives through gloo.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(
        os.environ['JAX_COORDINATOR_ADDRESS'],
        num_processes=int(os.environ['JAX_NUM_PROCESSES']),
        process_id=int(os.environ['JAX_PROCESS_ID']), local_device_ids=local_device_ids())
  elif int(os.environ.get('SLURM_NTASKS', '1')) > 1 or int(os.environ.get('OMPI_COMM_WORLD_SIZE', '1')) > 1:
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize()


def reuse_freed_host_memory() -> bool:
  """On a CPU, keeps freed host blocks in the process for the next allocation, whatever their
  size; whether it did. Call it before JAX starts its backend (the dispatch setting below is read
  then).

  CPU only: the platform is host_memory.planned_platform's, decided without starting a backend
  (JAX_PLATFORMS / jax.config.jax_platforms where set, else 'cpu' only where no GPU or TPU back
  end is installed), so a parent process never claims an accelerator to decide. On a GPU or TPU
  nothing changes: the host's allocator and JAX's asynchronous dispatch are left as they are.

  XLA:CPU allocates a step's temporary buffers afresh at every call (52 MB for ListOps quick,
  1.26 GB for Luna-16 at 2K tokens and batch 8), and glibc maps a block that big from the
  kernel and unmaps it when freed, so every step paid the page faults of zeroing fresh memory (a
  fifth of the quick step's CPU time; 350,000 faults, a quarter of the step, at 2K batch 8).
  Lifting glibc's mmap and trim thresholds (host_memory.keep_freed_blocks_in_heap) serves the
  block from the heap and keeps it there (a limit of 2 GiB left Luna-16 at 4K tokens and batch 8 with 700,000 faults a step; the
  process's resident memory stays at the step's peak, which every step reaches anyway).
  The step must also run on the calling (main) thread, so JAX's CPU dispatch is made
  synchronous: with asynchronous dispatch XLA runs it on a thread of its own, whose glibc heap
  holds at most 64 MiB, and larger blocks are mapped afresh whatever the thresholds. The price
  is that the loop's host work no longer overlaps the step: on the quick ListOps run, whose 52 MB
  fitted a thread's heap anyway, 21.9-27.1 steps/s against 24.6-28.2 (three runs each, idle
  machine); Luna-16's Text step at 2K tokens, batch 8, runs 1.35x faster. Where the entry point
  put every thread on one heap (host_memory.one_heap_for_every_thread), asynchronous dispatch
  gains nothing back: steps/s every 100-250 steps, two runs each, idle 2-core Xeon, sync against
  async: quick ListOps (Luna-16) 20.5-23.2 against 20.9-23.0, quick MQAR (Transformer, L = 256)
  3.84-3.97 against 3.74-4.01; synchronous stays, as it also serves a process without one heap.
  Linux with glibc only (elsewhere the allocator is left as it is).
  """
  if host_memory.planned_platform(jax.config.jax_platforms) != 'cpu':
    return False
  jax.config.update('jax_cpu_enable_async_dispatch', False)  # Read when the backend starts.
  host_memory.keep_freed_blocks_in_heap()
  return True


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


def stack_trees(trees):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def unstack_tree(tree, index):
  return jax.tree.map(lambda x: x[index], tree)
