"""What a run is before it runs: its opening line (task, model, protocol, steps, batch, length;
a model the config word left at its default says so), its size (parameters, XLA's FLOPs per
step, the data it reads) and its training time on this device, so that a full-size run that
takes days on a laptop says so before it starts (`run_lra.py`, `--print_config`).

The time: where one step is small enough to time here in seconds (XLA's FLOP count at this
device's matmul speed under MEASURE_MAX_BOUND_S), `--print_config` compiles the real training
step as training runs it and times MEASURED_STEPS steps on a random batch: steps x their median
is the training time a run on this machine takes (evaluation and data loading come on top). Otherwise, and in a
run's own first lines (which then train and time themselves), a lower bound: XLA's FLOP count of
the lowered step (no compile: seconds) times the steps left, at the speed this device multiplies
two 1024 x 1024 float32 matrices, measured now. A real step also moves memory and runs
element-wise work, so it is slower, 3 to 20 times on a CPU: the bound says when a run is long,
not how long it is.
"""

import time

from lra_luna import config_lib
from lra_luna.datasets import base as datasets_base

# A run whose time bound exceeds this many hours is announced as long, with the smaller words.
LONG_RUN_HOURS = 3.0
MATMUL_SIZE = 1024  # the square matmul that measures the device's best-case FLOP/s
# --print_config times the real step when the bound of one step is under this many seconds: the
# compile and MEASURED_STEPS + 1 steps then take seconds (a mid config on a CPU, a full-size one
# on a GPU); a full-size step on a CPU compiles for minutes and is bounded instead.
MEASURE_MAX_BOUND_S = 0.5
MEASURED_STEPS = 3


def model_word_given(preset: str) -> bool:
  """Whether a preset 'listops.py:<words>' names its model (a model word or model=...)."""
  words = [w.strip() for w in preset.partition(':')[2].split(',')]
  return any(w in config_lib.MODELS or w.partition('=')[0] == 'model' for w in words)


def opening_line(config) -> str:
  """The run's first line: task, model (marked when it is the default), protocol, steps, batch
  and length, and the words that shorten it."""
  model = config_lib.model_label(config)
  if not model_word_given(config.get('preset', '')):
    model += (f' (the default model: name one after the colon, configs/{config.task}.py:'
              '<model>; python run_lra.py --help lists them)')
  shortened = config_lib.shortened_reasons(config)
  size = (f'SHORTENED ({", ".join(shortened)})' if shortened else 'full size')
  return (f'{config.task} / {model}, {config.protocol.upper()} protocol, {size}: '
          f'{phase_steps(config)} of batch {config.batch_size} x {config.max_length} tokens.')


def phase_steps(config) -> str:
  """The steps a run trains, each phase named: '1500 steps'; a self-pretrained run's '1500
  masked pretraining + 1500 fine-tuning steps'; a run given config.pretrained '1500 fine-tuning
  steps from the pretraining in DIR'."""
  p = config.get('pretraining', {})
  if config.get('pretrained'):
    return (f'{config.num_train_steps} fine-tuning steps from the {p.get("objective")} '
            f'pretraining in {config.pretrained}')
  if p.get('objective'):
    return (f'{p.num_train_steps} {p.objective} pretraining + {config.num_train_steps} '
            'fine-tuning steps')
  return f'{config.num_train_steps} steps'


def data_line(config) -> str:
  """Where the run's data comes from, and what a generated set holds."""
  folder = datasets_base.data_root(config.data_dir or None) / config.dataset_name
  line = f'data: {folder} (data_source {config.data_source})'
  for section in ('listops', 'pathfinder'):
    if section in config:
      settings = ', '.join(f'{k} {v}' for k, v in config[section].items() if k.startswith('num'))
      where = '' if config.data_source == 'generated' else ' where no release copy is there'
      line += f'; generated on first use{where}: {settings}'
  return line + '.'


def step_cost(config) -> tuple[int, float | None]:
  """(parameters, XLA's FLOPs of one training step) of config's model at its batch and length,
  from the lowered step (no data read, nothing compiled; measure.lowered_step_cost)."""
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top  (starts JAX)
  return measure.lowered_step_cost(config)


def matmul_flops_per_s(size: int = MATMUL_SIZE, repeats: int = 3) -> float:
  """The best of `repeats` timed size x size float32 matmuls on the default device, FLOP/s."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  matmul = jax.jit(lambda a: a @ a)
  a = jnp.ones((size, size), jnp.float32)
  matmul(a).block_until_ready()
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * size**3 / max(best, 1e-9)


def time_bound_s(flops_per_step: float, steps: int, flops_per_s: float) -> float:
  """Seconds of `steps` steps of `flops_per_step` at `flops_per_s`: a lower bound."""
  return steps * flops_per_step / flops_per_s


def estimate_line(flops_per_step, steps: int, flops_per_s: float, device: str) -> str:
  """The time bound of the steps left, and where it comes from."""
  from lra_luna import console  # pylint: disable=g-import-not-at-top
  seconds = time_bound_s(flops_per_step, steps, flops_per_s)
  return (f'time: at least {console.format_duration(seconds)} (h:mm:ss) for {steps} steps on '
          f'this {device} ({flops_per_step / 1e12:.3g} TFLOP per step, XLA\'s count, at '
          f'{flops_per_s / 1e9:.0f} GFLOP/s, its measured matmul speed; the real time is longer)')


def measured_step_s(config) -> float | None:
  """The median seconds of MEASURED_STEPS real training steps of config's model as training runs
  them, vmapped over a seed axis of one (a scan under vmap is slower than alone: 1.7x for S5 on
  a CPU), on a random batch after one untimed step that compiles it (no data read); None where
  the step does not fit this device's memory."""
  import jax  # pylint: disable=g-import-not-at-top
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top
  from lra_luna.training import steps  # pylint: disable=g-import-not-at-top
  seed_axis = lambda tree: jax.tree.map(lambda x: x[None], tree)
  try:
    with measure.precision_scope(config):
      step, state, batch, dropout_key, _ = measure.build_step(config)
      seeded_step = jax.jit(jax.vmap(step.__wrapped__), donate_argnums=0)
      times = measure.timed_steps(seeded_step, steps.stack_trees([state]), seed_axis(batch),
                                  seed_axis(dropout_key), warmup=1, repeats=MEASURED_STEPS)
  except Exception as e:  # pylint: disable=broad-except
    if measure.is_out_of_memory(e):
      return None
    raise
  return measure.step_time_spread(times)['step_s']


def measured_line(step_s: float, steps: int, device: str) -> str:
  """The training time of the steps left at a measured step time, and what it leaves out."""
  from lra_luna import console  # pylint: disable=g-import-not-at-top
  return (f'time: about {console.format_duration(step_s * steps)} (h:mm:ss) of training for '
          f'{steps} steps on this {device} ({step_s:.3g} s a step, the median of '
          f'{MEASURED_STEPS} steps timed now on a random batch; evaluation and data loading '
          'come on top)')


def long_run_warning(config, seconds: float) -> str | None:
  """A warning for a run of more than LONG_RUN_HOURS (its bound), naming the quick and smoke
  words of the same task and model; None for a shorter one or a shortened run."""
  if seconds < LONG_RUN_HOURS * 3600 or config.get('smoke'):
    return None
  spec = f'configs/{config.task}.py:{config.model_name}'
  return (f'warning: this run takes at least {seconds / 3600:.0f} h on this device (time '
          f'above). To check the pipeline in minutes use {spec},smoke (this model and data '
          f'shapes, {config_lib.SMOKE_STEPS} steps) or {spec},quick (a small model and task that '
          'train in minutes); Ctrl-C stops this run and prints its resume command.')


def full_size_line(config, flops_per_s: float, device: str) -> str | None:
  """The time bound of the full-size run of a config that a word shortens (quick, mid: its preset
  without them, config_lib.full_preset), so that --print_config of a mid run shows what the full
  run would cost beside it; None for a config no word shortens or whose full preset cannot be
  built."""
  preset = config.get('preset', '')
  if not any(config_lib.preset_word(preset, w) for w in config_lib.SHORTENING_WORDS):
    return None
  full = config_lib.preset_config(config_lib.full_preset(config))
  if full is None:
    return None
  num_params, flops = step_cost(full)
  if not flops:
    return None
  seconds = time_bound_s(flops, full.num_train_steps, flops_per_s)
  from lra_luna import console  # pylint: disable=g-import-not-at-top
  return (f'full size ({config_lib.full_preset(config)}: {full.num_train_steps} steps of batch '
          f'{full.batch_size} x {full.max_length} tokens, {num_params / 1e6:.3g} M parameters): '
          f'at least {console.format_duration(seconds)} (h:mm:ss) on this {device} (XLA\'s FLOP '
          'count at the measured matmul speed: a lower bound).')


def describe(config, steps_left: int | None = None,
             measure: bool = False) -> tuple[list[str], float]:
  """(the lines that say what the run is, its size and time; that time in seconds). With
  `measure` (--print_config) the time of a step small enough (MEASURE_MAX_BOUND_S) is timed;
  otherwise, or where it does not fit, the lower bound."""
  import jax  # pylint: disable=g-import-not-at-top
  steps_left = config.num_train_steps if steps_left is None else steps_left
  num_params, flops = step_cost(config)
  lines = [opening_line(config), f'size: {num_params / 1e6:.3g} M parameters.', data_line(config)]
  if not flops:
    return lines + ['time: unknown (XLA gives no FLOP count for this step).'], 0.0
  speed = matmul_flops_per_s()
  device = jax.devices()[0].platform.upper()
  step_s = (measured_step_s(config) if measure and flops / speed < MEASURE_MAX_BOUND_S
            else None)
  if step_s:
    lines.append(measured_line(step_s, steps_left, device) + '.')
    seconds = step_s * steps_left
  else:
    lines.append(estimate_line(flops, steps_left, speed, device) + '.')
    seconds = time_bound_s(flops, steps_left, speed)
  full = full_size_line(config, speed, device)
  return lines + ([full] if full else []), seconds
