"""What a run is before it runs: its opening line (task, model, protocol, steps, batch, length;
a model the config word left at its default says so), its size (parameters, XLA's FLOPs per
step, the data it reads) and a lower bound of its training time on this device, so that a
full-size run that takes days on a laptop says so before it starts (`run_lra.py`,
`--print_config`).

The time bound: XLA's FLOP count of the lowered training step (no compile: seconds) times the
steps left, at the speed this device multiplies two 1024 x 1024 float32 matrices, measured now
(a best case: a real step also moves memory and runs element-wise work, so it is slower; on a
busy machine the measured speed, and so the bound, moves with the load).
"""

import time

from lra_luna import config_lib
from lra_luna.datasets import base as datasets_base

# A run whose time bound exceeds this many hours is announced as long, with the smaller words.
LONG_RUN_HOURS = 3.0
MATMUL_SIZE = 1024  # the square matmul that measures the device's best-case FLOP/s


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


def long_run_warning(config, seconds: float) -> str | None:
  """A warning for a run of more than LONG_RUN_HOURS (its bound), naming the quick and smoke
  words of the same task and model; None for a shorter one or a shortened run."""
  if seconds < LONG_RUN_HOURS * 3600 or config.get('smoke'):
    return None
  spec = f'configs/{config.task}.py:{config.model_name}'
  return (f'warning: this run takes at least {seconds / 3600:.0f} h on this device (bound '
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
          f'at least {console.format_duration(seconds)} (h:mm:ss) on this {device}, the same '
          'bound.')


def describe(config, steps_left: int | None = None) -> tuple[list[str], float]:
  """(the lines that say what the run is, its size and time bound; the bound in seconds)."""
  import jax  # pylint: disable=g-import-not-at-top
  steps_left = config.num_train_steps if steps_left is None else steps_left
  num_params, flops = step_cost(config)
  lines = [opening_line(config), f'size: {num_params / 1e6:.3g} M parameters.', data_line(config)]
  if not flops:
    return lines + ['time: unknown (XLA gives no FLOP count for this step).'], 0.0
  speed = matmul_flops_per_s()
  device = jax.devices()[0].platform.upper()
  lines.append(estimate_line(flops, steps_left, speed, device) + '.')
  full = full_size_line(config, speed, device)
  return lines + ([full] if full else []), time_bound_s(flops, steps_left, speed)
