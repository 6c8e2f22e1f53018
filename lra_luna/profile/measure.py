"""One profile point in this process: its config, the real training step built and compiled
ahead of time, its median step time, its memory (XLA's estimate and the device's own counters)
and its FLOPs.
"""

import contextlib
import functools
import os
import time
import types

import jax
import numpy as np

from lra_luna import config_lib
from lra_luna import datasets
from lra_luna import spt
from lra_luna.models import plugins
from lra_luna.models.attention import softmax
from lra_luna.training import steps

TEXT_CONFIG = config_lib.CONFIG_DIR / 'text.py'


# ----------------------------------------------------------------------------------------------
# Configs.
# ----------------------------------------------------------------------------------------------
def default_models() -> list[str]:
  """Every registered model (lra_luna/registry.py), in the registry's order."""
  return list(config_lib.MODELS)


def load_config(spec: str, model_name: str, overrides=(), spt_word: bool = False):
  """`path/to/<task>.py[:arg]` -> its get_config('<model>[,arg]') with the `KEY=VALUE`
  overrides (--override), after the word spt where `spt_word`; a plug-in attention
  ('file.py:Class', plugins.py) goes into the config of the `transformer` preset."""
  preset = 'transformer' if plugins.is_plugin(model_name) else model_name
  words = {'model': preset, **({'spt': True} if spt_word else {})}
  config = config_lib.load_config(spec, [f'--config.{item}' for item in overrides], **words)
  if plugins.is_plugin(model_name):
    config.model.attention = model_name
  return config


# What a profile point's step trains: the classifier, or a pretraining objective (spt.py).
OBJECTIVES = ('classification', *spt.OBJECTIVES)


def point_config(spec: str, model_name: str, length: int, batch_size: int, dtype: str,
                 objective: str = 'classification', overrides=()):
  """The task config of one profile point: its model at `length` tokens, `batch_size`, `dtype`
  (the model's compute dtype), the `KEY=VALUE` overrides; with a pretraining `objective` the
  config of the pretraining phase (spt.phase_config: the token head at every position; causal
  with the mean head)."""
  # The spt word's settings first, so that an override (e.g. pretraining.loss) wins over them.
  config = load_config(spec, model_name, overrides, spt_word=objective != 'classification')
  config.max_length = length
  config.batch_size = batch_size
  config.model.dtype = dtype
  if objective != 'classification':
    config.pretraining.objective = objective
    if objective == 'causal':
      config.model.head = 'mean'
    config = spt.phase_config(config)
  config_lib.validate(config)
  return config


def point_label(model_name: str, objective: str) -> str:
  """A point's model label: a pretraining step's is the model's with its objective."""
  label = plugins.label(model_name)
  return label if objective == 'classification' else f'{label} [{objective}]'


def matmul_precision(config) -> str:
  """The matmul precision the step is compiled with: the config's `matmul_precision` where it
  has one, else JAX's default (jax_default_matmul_precision; 'default' = the backend's choice:
  TF32 for float32 on recent GPUs, bfloat16 passes on TPU, full float32 on CPU)."""
  return config.get('matmul_precision') or jax.config.jax_default_matmul_precision or 'default'


def attention_implementation(config) -> str:
  """What computes the attention of this point's model: 'softmax, vanilla' (the n x n matrix),
  'softmax, fused' (jax.nn.dot_product_attention), or the attention's key ('luna', 'linformer',
  a plug-in's class name)."""
  attention = config.model.attention
  if plugins.is_plugin(attention):
    return plugins.label(attention)
  implementation = config.model.get('attention_implementation')
  return f'{attention}, {implementation}' if attention == 'softmax' and implementation else attention


# ----------------------------------------------------------------------------------------------
# Build and compile.
# ----------------------------------------------------------------------------------------------
def build_step(config):
  """The jitted real training step (state donated), its state, a random batch, a dropout key and
  the parameter count; state and batch already on the device."""
  steps.reuse_freed_host_memory()  # Timed as training runs (on a CPU: scratch buffers reused).
  # Training reads these from the data; profiling needs no data (only the embedding and the
  # last layer depend on them).
  vocab_size, num_classes = datasets.task_sizes(config.task, config.append_eos)
  sizes = types.SimpleNamespace(vocab_size=vocab_size, num_classes=num_classes, source={})
  model = steps.model_config(config, sizes)
  objective = steps.pretraining_objective(config, sizes)
  tx = steps.make_optimizer(config)
  graphdef, state, num_params = steps.init_state(model, config.seed, tx, objective)
  rng = np.random.default_rng(config.seed)
  # Ids from 1: no padding, so every model works on the full length; MQAR's query positions
  # anywhere in it.
  ranges = {'targets': (0, num_classes), 'query_positions': (0, config.max_length)}
  batch = {name: rng.integers(*ranges.get(name, (1, vocab_size)), shape, np.int32)
           for name, shape in steps.batch_shapes(config, model).items()}
  step = jax.jit(functools.partial(steps.train_step, graphdef=graphdef, tx=tx,
                                   objective=objective), donate_argnums=0)
  return (step, jax.device_put(state), jax.device_put(batch), jax.random.key(config.seed),
          num_params)


def precision_scope(config):
  """The config's matmul precision around tracing and compiling, where it names one."""
  precision = config.get('matmul_precision')
  return jax.default_matmul_precision(precision) if precision else contextlib.nullcontext()


def compiled_memory(compiled) -> dict:
  """XLA's memory estimate of one step: argument + output - alias + temp (the donated state is
  aliased to the new one, so it counts once).

  `peak_memory_in_bytes` is kept beside it but not used: on CPU (jax 0.10) it is about the
  argument size and leaves out the temporaries, the part that grows with length.
  """
  stats = compiled.memory_analysis()
  if stats is None:
    return {'estimated_bytes': None, 'memory_analysis': None}
  parts = {name: int(getattr(stats, f'{name}_size_in_bytes'))
           for name in ('argument', 'output', 'alias', 'temp')}
  parts['peak'] = int(getattr(stats, 'peak_memory_in_bytes', 0) or 0)
  estimate = parts['argument'] + parts['output'] - parts['alias'] + parts['temp']
  return {'estimated_bytes': estimate, 'memory_analysis': parts}


def compiled_flops(compiled) -> float | None:
  """FLOPs of one step from XLA's cost analysis (a dict; a list of dicts on older jax)."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return float(cost['flops']) if cost and 'flops' in cost else None


# ----------------------------------------------------------------------------------------------
# Memory.
# ----------------------------------------------------------------------------------------------
def host_memory_bytes() -> int:
  """This machine's physical memory."""
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def gib(num_bytes) -> str:
  return f'{num_bytes / 2**30:.3g} GiB'


def device_memory_stats() -> dict:
  """The device allocator's counters (bytes_limit, bytes_in_use, peak_bytes_in_use, ...); {} where
  the device keeps none (a CPU)."""
  return jax.devices()[0].memory_stats() or {}


def device_memory(after_compile: dict, after_steps: dict | None) -> dict:
  """The device's memory of a point from its counters after compiling and after the timed steps.

  peak_bytes_in_use never resets, and compiling (GPU autotuning's scratch buffers) may set it:
  the steps' own peak is the peak after them where they raised it above the peak after compile,
  else unknown (None: at most the compile's peak, `device_peak_hidden`). Every field None where
  the device keeps no counters.
  """
  compile_peak = after_compile.get('peak_bytes_in_use')
  steps_peak = (after_steps or {}).get('peak_bytes_in_use')
  raised = steps_peak is not None and compile_peak is not None and steps_peak > compile_peak
  return {'device_bytes_limit': after_compile.get('bytes_limit'),
          'device_in_use_after_compile_bytes': after_compile.get('bytes_in_use'),
          'device_peak_after_compile_bytes': compile_peak,
          'device_peak_bytes': steps_peak if raised else None,
          'device_peak_hidden': steps_peak is not None and not raised}


# ----------------------------------------------------------------------------------------------
# Time.
# ----------------------------------------------------------------------------------------------
def step_time_spread(times) -> dict:
  """min / median / max of the timed steps and their spread, (max - min) / median."""
  step_s = float(np.median(times))
  return {'step_s': step_s, 'step_s_min': float(min(times)), 'step_s_max': float(max(times)),
          'spread': (max(times) - min(times)) / step_s}


def timed_steps(compiled, state, batch, dropout_key, *, warmup: int, repeats: int) -> list:
  """Seconds of each of `repeats` steps after `warmup` untimed ones, each waited for."""
  for _ in range(warmup):
    state, _ = compiled(state, batch, dropout_key)
  jax.block_until_ready(state)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = compiled(state, batch, dropout_key)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - start)
  return times


NOT_TIMED = {'step_times_s': [], 'step_s': None, 'steps_per_s': None}


def lowered_step_cost(config) -> tuple[int, float | None]:
  """(parameters, XLA's FLOPs of config's training step) counted on the lowered step, before
  optimization: seconds, where compiling a full-size step on a CPU takes minutes. JAX's GPU and
  TPU plugins count only compiled steps (a lowered step's count is None there: seen on an H200),
  so where the device gives none the same step is lowered for the host's CPU, with the CPU's
  attention kernel, and counted there."""
  def count():
    with precision_scope(config):
      step, state, batch, dropout_key, num_params = build_step(config)
      return num_params, compiled_flops(step.lower(state, batch, dropout_key))

  num_params, flops = count()
  if flops is None and jax.default_backend() != 'cpu':
    with jax.default_device(jax.devices('cpu')[0]), softmax.target_platform('cpu'):
      num_params, flops = count()
  return num_params, flops


def lowered_flops_point(config) -> dict:
  """--flops_only: lowered_step_cost's count, nothing compiled or timed (campaign --estimate
  --assume_tflops)."""
  num_params, flops = lowered_step_cost(config)
  return {'status': 'ok', 'num_params': num_params, 'compile_s': None, 'flops_per_step': flops,
          'estimated_bytes': None, **NOT_TIMED, **device_memory({}, None)}


def measure_point(config, *, warmup: int, repeats: int, memory_only: bool = False,
                  flops_only: bool = False, host_memory: int | None = None) -> dict:
  """Compile time, median step time (with min and max), memory and FLOPs of config's step.

  memory_only: compile and read XLA's estimates without running a step, so a point far larger
  than this machine's memory (the Transformer at 4K and batch 32 on a CPU) still gets its figure.
  host_memory: on a CPU, a point whose estimate exceeds it is not run (status 'skipped'), rather
  than left to the kernel's OOM killer.
  """
  if flops_only:
    return lowered_flops_point(config)
  with precision_scope(config):
    step, state, batch, dropout_key, num_params = build_step(config)
    start = time.perf_counter()
    compiled = step.lower(state, batch, dropout_key).compile()
    compile_s = time.perf_counter() - start
  after_compile = device_memory_stats()
  estimates = {'num_params': num_params, 'compile_s': compile_s,
               'flops_per_step': compiled_flops(compiled), **compiled_memory(compiled)}
  if memory_only:
    return {'status': 'ok', **estimates, **NOT_TIMED, **device_memory(after_compile, None)}
  needed = estimates['estimated_bytes']
  if host_memory and needed and needed > host_memory and jax.devices()[0].platform == 'cpu':
    return {'status': 'skipped', **estimates,
            'reason': f'needs {gib(needed)}, host has {gib(host_memory)}'}
  times = timed_steps(compiled, state, batch, dropout_key, warmup=warmup, repeats=repeats)
  spread = step_time_spread(times)
  return {'status': 'ok', **estimates, 'step_times_s': times, **spread,
          'steps_per_s': 1.0 / spread['step_s'],
          **device_memory(after_compile, device_memory_stats())}


# ----------------------------------------------------------------------------------------------
# Out of memory and other failures.
# ----------------------------------------------------------------------------------------------
def mentions_out_of_memory(text: str) -> bool:
  """Whether an error message is XLA's (RESOURCE_EXHAUSTED) or an allocator's out of memory."""
  return 'RESOURCE_EXHAUSTED' in text or 'out of memory' in text.lower()


def is_out_of_memory(error: BaseException) -> bool:
  if isinstance(error, MemoryError):
    return True
  return isinstance(error, jax.errors.JaxRuntimeError) and mentions_out_of_memory(str(error))


def failed_point(model_name: str, length: int, status: str, reason: str) -> dict:
  """A point that did not run: status 'oom' (out of memory) or 'crash' (anything else)."""
  return {'model': model_name, 'length': length, 'status': status, 'error': reason[-2000:]}


def oom_point(model_name: str, length: int, reason: str) -> dict:
  return failed_point(model_name, length, 'oom', reason)


def first_line(error: BaseException) -> str:
  """'Type: the message's first line', for a table cell."""
  lines = str(error).strip().splitlines()
  return f'{type(error).__name__}: {lines[0] if lines else ""}'.strip()


def profile_point(args, model_name: str, length: int, *, crash_ok: bool = False,
                  objective: str = 'classification') -> dict:
  """One point in this process. Out of memory gives an OOM point; any other error is raised, or
  with `crash_ok` (a worker process, whose parent goes on with the sweep) gives a crash point
  with the error's first line."""
  label = point_label(model_name, objective)
  try:
    config = point_config(args.config, model_name, length, args.batch_size, args.dtype,
                          objective, args.override)
    result = measure_point(config, warmup=args.warmup, repeats=args.repeats,
                           memory_only=args.memory_only, flops_only=args.flops_only,
                           host_memory=int(args.host_memory_gib * 2**30))
  except Exception as error:  # Out of memory is a result; so is a worker's crash.
    if is_out_of_memory(error):
      return oom_point(label, length, f'{type(error).__name__}: {error}')
    if not crash_ok:
      raise
    return failed_point(label, length, 'crash', first_line(error))
  return {'model': label, 'objective': objective, 'length': length, 'dtype': args.dtype,
          'matmul_precision': matmul_precision(config),
          'attention_implementation': attention_implementation(config), **result}
