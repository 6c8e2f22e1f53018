"""Training speed and memory of each model against sequence length: the paper's Table 2.

  python -m lra_luna.profile --lengths 1024,2048,3072,4096 --batch_size 32 --out_dir runs/profile

For each (model, length) it builds the model with that max_length, the real optimizer and the
real `steps.train_step`, keeps one random batch on the device, compiles ahead of time (timed on
its own), warms up and takes the median of timed steps (docs/performance.md),
with their min and max: a point whose steps spread more than 10% ((max - min) / median) gets a
warning, in the output and under table2.md, since a busy machine moves ratios by more than that.
Memory: XLA's estimate for the compiled step (argument + output - alias + temp) everywhere, and
on GPU the device's `peak_bytes_in_use`. That peak never resets, so on GPU every point runs in a
fresh process (`--isolate`, the default there). A point that runs out of memory is recorded as
OOM and the sweep goes on. On a CPU a point whose compiled estimate exceeds the host's memory
(--host_memory_gib, default the physical memory) is skipped before it runs ("needs X GiB, host
has Y"), not left to the kernel's OOM killer. One device; the whole batch sits on it.
Fitted log-log slopes of time and memory against length need 3 or more lengths and are printed
with their standard error, to the digits it supports. --lengths takes 1024,2048 or 1K,2K.

`--memory_only` compiles every point and reads the estimates without running a step: the
paper's batch of 32 at 4K then gets its memory column even where the Transformer could never
run (a CPU). `--flops_only` only lowers each step and reads XLA's FLOP count (seconds a point;
what `campaign --estimate --assume_tflops` uses where no GPU can time the steps).

Writes to --out_dir: profile.json (every point), table2.md and table2.tex (speed and memory
relative to the vanilla Transformer, the paper's rows beside ours) and scaling.png.
Any task config works: --config configs/<task>.py[:arg]; the default is configs/text.py.
Your own attention joins with `--models transformer,path/to/file.py:Class` (lra_luna/models/plugins.py;
its constructor defaults, labelled by its class name).
"""

import argparse
import functools
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
import types

import jax
import numpy as np

from lra_luna import config_lib
from lra_luna import datasets
from lra_luna import registry
from lra_luna.models import plugins
from lra_luna.training import steps

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXT_CONFIG = config_lib.CONFIG_DIR / 'text.py'
BASELINE = 'transformer'
PAPER_LENGTHS = (1024, 2048, 3072, 4096)


# ----------------------------------------------------------------------------------------------
# Configs.
# ----------------------------------------------------------------------------------------------
def default_models() -> list[str]:
  """Every registered model (lra_luna/registry.py), in the registry's order."""
  return list(config_lib.MODELS)


def load_config(spec: str, model_name: str):
  """`path/to/<task>.py[:arg]` -> its get_config('<model>[,arg]'); a plug-in attention
  ('file.py:Class', plugins.py) goes into the config of the `transformer` preset."""
  preset = 'transformer' if plugins.is_plugin(model_name) else model_name
  config = config_lib.load_config(spec, model=preset)
  if plugins.is_plugin(model_name):
    config.model.attention = model_name
  return config


def point_config(spec: str, model_name: str, length: int, batch_size: int, dtype: str):
  """The task config of one profile point: its model at `length` tokens, `batch_size`, `dtype`."""
  config = load_config(spec, model_name)
  config.max_length = length
  config.batch_size = batch_size
  config.model.dtype = dtype
  config_lib.validate(config)
  return config


# ----------------------------------------------------------------------------------------------
# One point: build, compile, time, read memory and FLOPs.
# ----------------------------------------------------------------------------------------------
def build_step(config):
  """The jitted real training step (state donated), its state, a random batch, a dropout key and
  the parameter count; state and batch already on the device."""
  steps.reuse_freed_host_memory()  # Timed as training runs: scratch buffers reused.
  # Training reads these from the data; profiling needs no data (only the embedding and the
  # last layer depend on them).
  vocab_size, num_classes = datasets.task_sizes(config.task, config.append_eos)
  model = steps.model_config(config, types.SimpleNamespace(vocab_size=vocab_size,
                                                           num_classes=num_classes))
  tx = steps.make_optimizer(config)
  graphdef, state, num_params = steps.init_state(model, config.seed, tx)
  rng = np.random.default_rng(config.seed)
  input_names = ('inputs1', 'inputs2') if model.dual_encoder else ('inputs',)
  # Ids from 1: no padding, so every model works on the full length.
  batch = {name: rng.integers(1, vocab_size, (config.batch_size, config.max_length), np.int32)
           for name in input_names}
  batch['targets'] = rng.integers(0, num_classes, (config.batch_size,), np.int32)
  step = jax.jit(functools.partial(steps.train_step, graphdef=graphdef, tx=tx), donate_argnums=0)
  return (step, jax.device_put(state), jax.device_put(batch), jax.random.key(config.seed),
          num_params)


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


def host_memory_bytes() -> int:
  """This machine's physical memory."""
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def gib(num_bytes) -> str:
  return f'{num_bytes / 2**30:.3g} GiB'


# A spread of step times over the repeats ((max - min) / median) above this gets a warning.
SPREAD_WARNING = 0.10


def step_time_spread(times) -> dict:
  """min / median / max of the timed steps and their spread, (max - min) / median."""
  step_s = float(np.median(times))
  return {'step_s': step_s, 'step_s_min': float(min(times)), 'step_s_max': float(max(times)),
          'spread': (max(times) - min(times)) / step_s}


def measure_point(config, *, warmup: int, repeats: int, fresh_process: bool,
                  memory_only: bool = False, flops_only: bool = False,
                  host_memory: int | None = None) -> dict:
  """Compile time, median step time (with min and max), memory and FLOPs of config's step.

  memory_only: compile and read XLA's estimates without running a step, so a point far larger
  than this machine's memory (the Transformer at 4K and batch 32 on a CPU) still gets its figure.
  host_memory: on a CPU, a point whose estimate exceeds it is not run (status 'skipped'), rather
  than left to the kernel's OOM killer.
  """
  step, state, batch, dropout_key, num_params = build_step(config)
  if flops_only:
    # XLA's count on the lowered step, before optimization: seconds, where compiling a full-size
    # step on a CPU takes minutes (campaign --estimate --assume_tflops).
    return {'status': 'ok', 'num_params': num_params, 'compile_s': None,
            'flops_per_step': compiled_flops(step.lower(state, batch, dropout_key)),
            'estimated_bytes': None, 'step_times_s': [], 'step_s': None, 'steps_per_s': None,
            'device_peak_bytes': None}
  start = time.perf_counter()
  compiled = step.lower(state, batch, dropout_key).compile()
  compile_s = time.perf_counter() - start
  estimates = {'num_params': num_params, 'compile_s': compile_s,
               'flops_per_step': compiled_flops(compiled), **compiled_memory(compiled)}
  if memory_only:
    return {'status': 'ok', **estimates, 'step_times_s': [], 'step_s': None,
            'steps_per_s': None, 'device_peak_bytes': None}
  needed = estimates['estimated_bytes']
  if (host_memory and needed and needed > host_memory
      and jax.devices()[0].platform == 'cpu'):
    return {'status': 'skipped', **estimates,
            'reason': f'needs {gib(needed)}, host has {gib(host_memory)}'}
  for _ in range(warmup):
    state, _ = compiled(state, batch, dropout_key)
  jax.block_until_ready(state)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = compiled(state, batch, dropout_key)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - start)
  spread = step_time_spread(times)
  # peak_bytes_in_use never resets: it belongs to this point only in a fresh process.
  device_stats = (jax.devices()[0].memory_stats() or {}) if fresh_process else {}
  return {'status': 'ok', **estimates, 'step_times_s': times, **spread,
          'steps_per_s': 1.0 / spread['step_s'],
          'device_peak_bytes': device_stats.get('peak_bytes_in_use')}


def is_out_of_memory(error: BaseException) -> bool:
  if isinstance(error, MemoryError):
    return True
  return isinstance(error, jax.errors.JaxRuntimeError) and mentions_out_of_memory(str(error))


def mentions_out_of_memory(text: str) -> bool:
  return 'RESOURCE_EXHAUSTED' in text or 'out of memory' in text.lower()


def oom_point(model_name: str, length: int, reason: str) -> dict:
  return {'model': model_name, 'length': length, 'status': 'oom', 'error': reason[-2000:]}


def profile_point(args, model_name: str, length: int, *, fresh_process: bool = False) -> dict:
  """One point in this process; out of memory gives an OOM point, any other error is raised."""
  config = point_config(args.config, model_name, length, args.batch_size, args.dtype)
  try:
    result = measure_point(config, warmup=args.warmup, repeats=args.repeats,
                           fresh_process=fresh_process, memory_only=args.memory_only,
                           flops_only=args.flops_only,
                           host_memory=int(args.host_memory_gib * 2**30))
  except Exception as error:  # Only out-of-memory is tolerated; see below.
    if not is_out_of_memory(error):
      raise
    return oom_point(plugins.label(model_name), length, f'{type(error).__name__}: {error}')
  return {'model': plugins.label(model_name), 'length': length, **result}


def profile_point_isolated(args, model_name: str, length: int) -> dict:
  """One point in a fresh Python process; a process killed by a signal counts as OOM."""
  with tempfile.TemporaryDirectory() as tmp:
    result_path = pathlib.Path(tmp) / 'point.json'
    command = [sys.executable, '-m', 'lra_luna.profile', '--point_output', str(result_path),
               '--models', model_name, '--lengths', str(length), '--config', args.config,
               '--batch_size', str(args.batch_size), '--dtype', args.dtype,
               '--warmup', str(args.warmup), '--repeats', str(args.repeats),
               '--host_memory_gib', str(args.host_memory_gib),
               '--memory_only' if args.memory_only else '--no-memory_only',
               '--flops_only' if args.flops_only else '--no-flops_only']
    # The worker runs from the repository root; a plug-in module 'package.module:Class' may live
    # in this process's current directory.
    python_path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get('PYTHONPATH')]))
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': python_path})
    if result_path.exists():
      return json.loads(result_path.read_text())
  if done.returncode < 0 or mentions_out_of_memory(done.stderr):
    # A negative code is a signal, typically SIGKILL from the host's OOM killer.
    return oom_point(plugins.label(model_name), length,
                     f'worker exited with {done.returncode}: {done.stderr}')
  raise RuntimeError(f'Profiling {model_name} at length {length} failed (exit '
                     f'{done.returncode}):\n{done.stderr[-4000:]}')


def cpu_name() -> str:
  """The processor's model name (/proc/cpuinfo), else what `platform` knows."""
  cpuinfo = pathlib.Path('/proc/cpuinfo')
  names = [line.split(':', 1)[1].strip() for line in
           (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
           if line.startswith('model name')]
  return names[0] if names else (platform.processor() or platform.machine())


def device_info() -> dict:
  device = jax.devices()[0]
  return {'platform': device.platform, 'device_kind': device.device_kind,
          'jax_version': jax.__version__, 'cpu_count': os.cpu_count()}


def probe_device_info() -> dict:
  """device_info() from a fresh process, so that this one never claims the accelerator."""
  code = 'import json; from lra_luna import profile; print(json.dumps(profile.device_info()))'
  done = subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT, capture_output=True,
                        text=True, check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


def mib(num_bytes) -> str:
  return '-' if num_bytes is None else f'{num_bytes / 2**20:.1f}'


def rate(steps_per_s) -> str:
  return 'not timed' if steps_per_s is None else f'{steps_per_s:.3g}'


def describe(point: dict) -> str:
  """One progress line."""
  name = f'{point["model"]} @ {point["length"]}'
  if point['status'] == 'oom':
    return f'{name}: OOM'
  if point['status'] == 'skipped':
    return f'{name}: skipped, {point["reason"]}'
  compile_s = point.get('compile_s')  # None with --flops_only: not compiled
  line = (f'{name}: {rate(point["steps_per_s"])} steps/s{spread_words(point)} ('
          + ('not compiled' if compile_s is None else f'compile {compile_s:.1f} s') + '), '
          f'memory estimate {mib(point["estimated_bytes"])} MiB, '
          f'device peak {mib(point["device_peak_bytes"])} MiB, '
          f'{(point["flops_per_step"] or 0) / 1e9:.1f} GFLOP/step')
  if (point.get('spread') or 0) > SPREAD_WARNING:
    line += (f'\n  WARNING: step times spread {point["spread"]:.0%} over the repeats (over '
             f'{SPREAD_WARNING:.0%}): the machine was busy; rerun on an idle one or with more '
             '--repeats before quoting this speed.')
  return line


def spread_words(point: dict) -> str:
  """' (min-max over N repeats, spread S%)' in steps/s, or '' where there is none."""
  if point.get('step_s_min') is None:
    return ''
  return (f' (median; {rate(1 / point["step_s_max"])}-{rate(1 / point["step_s_min"])} over '
          f'{len(point["step_times_s"])} repeats, spread {point["spread"]:.0%})')


# ----------------------------------------------------------------------------------------------
# Tables and the scaling figure.
# ----------------------------------------------------------------------------------------------
def memory_key(points) -> str:
  """The memory the tables compare: the device's peak where every point has it, else XLA's."""
  measured = [p for p in points if p['status'] == 'ok']
  if measured and all(p.get('device_peak_bytes') for p in measured):
    return 'device_peak_bytes'
  return 'estimated_bytes'


MEMORY_LABELS = {'device_peak_bytes': "device peak_bytes_in_use",
                 'estimated_bytes': 'XLA compiled-memory estimate'}


def relative_cell(index: dict, model_name: str, length: int, key: str):
  """point[key] / Transformer's point[key] at that length; 'OOM', 'skipped' (for host memory),
  '... baseline' or None. A skipped point keeps its memory estimate, so memory still divides."""
  point, base = index.get((model_name, length)), index.get((BASELINE, length))
  if point is None or base is None:
    return None
  if (point['status'] != 'ok' or base['status'] != 'ok') and not (point.get(key)
                                                                   and base.get(key)):
    words = {'oom': 'OOM', 'skipped': 'skipped'}
    return (words[point['status']] if point['status'] != 'ok'
            else f'{words[base["status"]]} baseline')
  if not point.get(key) or not base.get(key):
    return None
  return point[key] / base[key]


def relative_rows(results: dict) -> list[tuple[str, list]]:
  """(label, cells) per row: ours (speed then memory over every length), each with the paper's
  row below it where the paper has one. Our cells are floats, 'OOM...' or None; the paper's are
  its printed strings."""
  points, lengths = results['points'], results['lengths']
  index = {(p['model'], p['length']): p for p in points}
  memory = memory_key(points)
  models_in_order = sorted(results['models'], key=lambda name: name != BASELINE)
  rows = []
  for name in models_in_order:
    cells = ([relative_cell(index, name, n, 'steps_per_s') for n in lengths]
             + [relative_cell(index, name, n, memory) for n in lengths])
    rows.append((registry.label(name), cells))
    paper_row = registry.table2_rows().get(name)
    if paper_row and set(lengths) & set(PAPER_LENGTHS):
      # The Luna paper's Table 2 (byte-level Text, relative to the Transformer), as printed.
      speed, peak = (dict(zip(PAPER_LENGTHS, values)) for values in paper_row)
      rows.append((f'{registry.label(name)} (paper)',
                   [speed.get(n) for n in lengths] + [peak.get(n) for n in lengths]))
  return rows


def format_cell(cell) -> str:
  """A ratio with 2 decimals; words ('OOM', the paper's printed numbers) as they are; None '-'."""
  if cell is None:
    return '-'
  return cell if isinstance(cell, str) else f'{cell:.2f}'


def length_label(length: int) -> str:
  return f'{length // 1024}K' if length % 1024 == 0 else str(length)


# Two lengths always fit a line exactly: a slope needs at least this many to mean anything.
MIN_SLOPE_LENGTHS = 3


def fitted_slope(lengths, values, log_errors=None) -> dict | None:
  """Slope of log(value) against log(length) (1 = linear, 2 = quadratic) and its standard error:
  the larger of the fit's (from its residuals) and the one the values' own errors give
  (`log_errors`, per point, in log units: the repeats' spread of a timed step). None with fewer
  than MIN_SLOPE_LENGTHS lengths."""
  if len(lengths) < MIN_SLOPE_LENGTHS:
    return None
  x, y = np.log(lengths), np.log(values)
  slope, intercept = np.polyfit(x, y, 1)
  sxx = float(np.sum((x - x.mean())**2))
  residuals = y - (slope * x + intercept)
  fit_error = float(np.sqrt(np.sum(residuals**2) / (len(x) - 2) / sxx))
  errors = np.zeros_like(x) if log_errors is None else np.asarray(log_errors, float)
  value_error = float(np.sqrt(np.sum((x - x.mean())**2 * errors**2)) / sxx)
  return {'slope': float(slope), 'stderr': max(fit_error, value_error),
          'lengths': [int(n) for n in lengths]}


def scaling_slopes(points, key: str) -> dict:
  """model -> fitted_slope of `key` (step_s: the step time, with its repeats' spread) over its
  measured points; models with fewer than MIN_SLOPE_LENGTHS lengths are left out."""
  slopes = {}
  for name in dict.fromkeys(p['model'] for p in points):
    measured = sorted((p['length'], p[key], spread_log_error(p) if key == 'step_s' else 0.0)
                      for p in points if p['model'] == name and p['status'] == 'ok'
                      and p.get(key))
    if measured:
      lengths, values, log_errors = zip(*measured)
      slope = fitted_slope(lengths, values, log_errors)
      if slope is not None:
        slopes[name] = slope
  return slopes


def spread_log_error(point: dict) -> float:
  """Half the range of the timed steps in log units: the point's own error for the fit."""
  if point.get('step_s_min') and point.get('step_s_max'):
    return float(np.log(point['step_s_max'] / point['step_s_min']) / 2)
  return 0.0


def format_slope(slope: dict | None) -> str:
  """'1.06 ± 0.03': as many decimals as the error's first digit (at most 2), so no digit is
  printed that the data does not support; '-' where there is no slope."""
  if slope is None:
    return f'- (needs {MIN_SLOPE_LENGTHS}+ lengths)'
  error = slope['stderr']
  decimals = 2 if error <= 0 else int(min(2, max(0, -np.floor(np.log10(error)))))
  return f'{slope["slope"]:.{decimals}f} ± {error:.{decimals}f}'


def noisy_points(points) -> list[dict]:
  """Timed points whose step times spread more than SPREAD_WARNING over the repeats."""
  return [p for p in points if (p.get('spread') or 0) > SPREAD_WARNING]


def spread_note(points) -> str:
  """What the speeds rest on: repeats per point, the widest spread, and the noisy points."""
  timed = [p for p in points if p.get('spread') is not None]
  if not timed:
    return 'No step was timed.'
  widest = max(p['spread'] for p in timed)
  note = (f'Speeds are medians of the timed repeats; widest spread (max - min) / median: '
          f'{widest:.0%}.')
  noisy = noisy_points(points)
  if noisy:
    note += (f' WARNING: {len(noisy)} points spread over {SPREAD_WARNING:.0%} ('
             + ', '.join(f'{p["model"]} @ {length_label(p["length"])} {p["spread"]:.0%}'
                         for p in noisy)
             + '): the machine was busy; rerun on an idle one or with more --repeats before '
             'quoting their ratios.')
  return note


def absolute_note(results: dict) -> str:
  """The Transformer's own numbers, which the relative cells divide by."""
  memory = memory_key(results['points'])
  parts = []
  for p in results['points']:
    if p['model'] == BASELINE:
      speed = '' if p.get('steps_per_s') is None else f'{rate(p["steps_per_s"])} steps/s, '
      value = ('OOM' if p['status'] == 'oom' else f'skipped ({p["reason"]})'
               if p['status'] == 'skipped' else f'{speed}{mib(p[memory])} MiB')
      parts.append(f'{length_label(p["length"])}: {value}')
  return (f'Transformer ({BASELINE}) absolute: ' + '; '.join(parts)) if parts else (
      f'No {BASELINE} points in this sweep: relative cells are empty.')


def setting_line(results: dict) -> str:
  return (f'Task {results["task"]}, batch {results["batch_size"]}, {results["dtype"]}, '
          f'{results["device"]["device_kind"]} ({results["device"]["platform"]}), '
          f'jax {results["device"]["jax_version"]}; memory = '
          f'{MEMORY_LABELS[memory_key(results["points"])]}.'
          + (' Compiled only (--memory_only): no step ran, speed not timed.'
             if results.get('memory_only') else ''))


def markdown_table(results: dict) -> str:
  lengths = results['lengths']
  headers = ([f'steps/s {length_label(n)}' for n in lengths]
             + [f'memory {length_label(n)}' for n in lengths])
  lines = ['# Table 2: training speed and peak memory relative to the Transformer', '',
           setting_line(results) + ' Higher steps/s and lower memory are better.', '',
           '| Model | ' + ' | '.join(headers) + ' |', '|---' * (len(headers) + 1) + '|']
  for label, cells in relative_rows(results):
    lines.append(f'| {label} | ' + ' | '.join(format_cell(c) for c in cells) + ' |')
  lines += ['', absolute_note(results), '', spread_note(results['points']), '',
            '## Fitted log-log slopes against length (1 = linear, 2 = quadratic)', '',
            f'From {MIN_SLOPE_LENGTHS} or more lengths; ± its standard error (the fit\'s '
            'residuals, or the repeats\' spread for step time, whichever is larger).', '',
            '| Model | step time | memory |', '|---|---|---|']
  time_slopes, memory_slopes = results['slopes']['step_s'], results['slopes']['memory']
  for name in results['models']:
    lines.append(f'| {registry.label(name)} | {format_slope(time_slopes.get(name))} | '
                 f'{format_slope(memory_slopes.get(name))} |')
  lines += ['', '## Every point', '',
            '| Model | length | steps/s (median) | min | max | spread | compile s | GFLOP/step '
            '| estimate MiB | device peak MiB | parameters |', '|---' * 11 + '|']
  for p in results['points']:
    if p['status'] != 'ok':
      what = 'OOM' if p['status'] == 'oom' else f'skipped: {p["reason"]}'
      lines.append(f'| {p["model"]} | {p["length"]} | {what} |' + ' |' * 8)
      continue
    timed = p.get('step_s_min') is not None
    compile_s = '-' if p['compile_s'] is None else f'{p["compile_s"]:.1f}'  # --flops_only
    lines.append(f'| {p["model"]} | {p["length"]} | {rate(p["steps_per_s"])} | '
                 f'{rate(1 / p["step_s_max"]) if timed else "-"} | '
                 f'{rate(1 / p["step_s_min"]) if timed else "-"} | '
                 f'{format(p["spread"], ".0%") if timed else "-"} | '
                 f'{compile_s} | {(p["flops_per_step"] or 0) / 1e9:.1f} | '
                 f'{mib(p["estimated_bytes"])} | {mib(p["device_peak_bytes"])} | '
                 f'{p["num_params"]} |')
  return '\n'.join(lines) + '\n'


def latex_table(results: dict) -> str:
  lengths = results['lengths']
  k = len(lengths)
  escape = lambda text: text.replace('_', r'\_').replace('%', r'\%')
  header = ' & '.join(length_label(n) for n in lengths)
  lines = [r'\begin{table}', r'\centering',
           r'\caption{Training speed and peak memory relative to the Transformer. '
           + escape(setting_line(results)) + ' ' + escape(absolute_note(results)) + '}',
           r'\label{tab:lra_efficiency_ours}',
           r'\begin{tabular}{l|' + 'c' * k + '|' + 'c' * k + '}', r'\toprule',
           rf' & \multicolumn{{{k}}}{{c|}}{{Steps per second $\uparrow$}} & '
           rf'\multicolumn{{{k}}}{{c}}{{Peak Memory Usage $\downarrow$}}\\',
           rf'Model & {header} & {header} \\', r'\midrule']
  for label, cells in relative_rows(results):
    lines.append(escape(label) + ' & ' + ' & '.join(escape(format_cell(c)) for c in cells)
                 + r' \\')
  lines += [r'\bottomrule', r'\end{tabular}', r'\end{table}']
  return '\n'.join(lines) + '\n'


def plot_scaling(results: dict, path: pathlib.Path) -> None:
  """Log-log step time and memory against length, one line per model, slope in the legend."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  memory = memory_key(results['points'])
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
  panels = ((axes[0], 'step_s', 'seconds per training step', 1.0),
            (axes[1], memory, f'{MEMORY_LABELS[memory]} (MiB)', 2.0**-20))
  for ax, key, ylabel, scale in panels:
    slopes = results['slopes']['step_s' if key == 'step_s' else 'memory']
    for name in results['models']:
      measured = sorted((p['length'], p[key] * scale) for p in results['points']
                        if p['model'] == name and p['status'] == 'ok' and p.get(key))
      if not measured:
        continue
      slope = slopes.get(name)
      label = registry.label(name) + (f' (slope {format_slope(slope)})' if slope else '')
      ax.plot(*zip(*measured), marker='o', label=label)
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xticks(results['lengths'], [length_label(n) for n in results['lengths']])
    ax.set_xticks([], minor=True)
    ax.set_xlabel('sequence length')
    ax.set_ylabel(ylabel)
    if ax.lines:
      ax.legend(fontsize=7)
    else:  # --memory_only: nothing was timed.
      ax.text(0.5, 0.5, 'not measured', ha='center', va='center', transform=ax.transAxes)
    ax.grid(True, which='both', alpha=0.3)
  fig.suptitle(setting_line(results), fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write_outputs(results: dict, out_dir: pathlib.Path) -> None:
  """profile.json, table2.md, table2.tex and scaling.png in out_dir."""
  out_dir.mkdir(parents=True, exist_ok=True)
  points = results['points']
  results['slopes'] = {'step_s': scaling_slopes(points, 'step_s'),
                       'memory': scaling_slopes(points, memory_key(points))}
  (out_dir / 'profile.json').write_text(json.dumps(results, indent=2) + '\n')
  (out_dir / 'table2.md').write_text(markdown_table(results))
  (out_dir / 'table2.tex').write_text(latex_table(results))
  plot_scaling(results, out_dir / 'scaling.png')


# ----------------------------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------------------------
def model_list(text: str) -> list[str]:
  return [part.strip() for part in text.split(',') if part.strip()]


def length_list(text: str) -> list[int]:
  """'1024,2048' or '1K,2K' (K = 1024) -> [1024, 2048]."""
  lengths = []
  for part in filter(None, (part.strip() for part in text.split(','))):
    number, kilo = (part[:-1], 1024) if part[-1] in 'kK' else (part, 1)
    if not number.isdigit() or int(number) == 0:
      raise argparse.ArgumentTypeError(
          f'{part!r} in {text!r} is no sequence length; give positive token counts, e.g. '
          '1024,2048 or 1K,2K (K = 1024).')
    lengths.append(int(number) * kilo)
  if not lengths:
    raise argparse.ArgumentTypeError(f'{text!r} names no length; e.g. 1024,2048 or 1K,2K.')
  return lengths


def parse_args(argv):
  parser = argparse.ArgumentParser(prog='python -m lra_luna.profile', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--models', type=model_list, default=None,
                      help='comma-separated models (default: Transformers, Luna, baselines) and '
                      "attention plug-ins 'path/to/file.py:Class' (lra_luna/models/plugins.py)")
  parser.add_argument('--lengths', type=length_list, default=[1024, 2048, 3072, 4096],
                      help='comma-separated sequence lengths, tokens: 1024,2048 or 1K,2K')
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--config', default=str(TEXT_CONFIG),
                      help='configs/<task>.py[:arg] (default: the Text task)')
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'))
  parser.add_argument('--out_dir', default='runs/profile')
  parser.add_argument('--repeats', type=int, default=10, help='timed steps (median reported)')
  parser.add_argument('--warmup', type=int, default=2, help='untimed steps after compiling')
  parser.add_argument('--memory_only', action=argparse.BooleanOptionalAction, default=False,
                      help='compile and report memory and FLOPs without timing any step')
  parser.add_argument('--flops_only', action=argparse.BooleanOptionalAction, default=False,
                      help="only XLA's FLOPs of the lowered step: no compile, no memory, no timing")
  parser.add_argument('--isolate', action=argparse.BooleanOptionalAction, default=None,
                      help='each point in a fresh process (default: on GPU only)')
  parser.add_argument('--host_memory_gib', type=float, default=host_memory_bytes() / 2**30,
                      help="on a CPU, points whose memory estimate exceeds this are skipped "
                      "(default: this machine's physical memory)")
  parser.add_argument('--point_output', default=None, help=argparse.SUPPRESS)  # worker mode
  args = parser.parse_args(argv)
  args.models = args.models or default_models()
  unknown = sorted(name for name in args.models
                   if name not in config_lib.MODELS and not plugins.is_plugin(name))
  if unknown:
    parser.error(f'unknown models {unknown}; valid choices: {sorted(config_lib.MODELS)} or a '
                 "plug-in 'path/to/file.py:Class'")
  try:
    # Absolute, so that worker processes (run from the repository root) find them.
    args.models = [plugins.resolved(name) for name in args.models]
    for name in filter(plugins.is_plugin, args.models):
      plugins.load_class(name)
  except (ValueError, FileNotFoundError) as e:
    parser.error(str(e))
  # Absolute, so that worker processes (run from the repository root) find it.
  _, sep, arg = args.config.partition(':')
  try:
    args.config = f'{config_lib.config_spec_path(args.config).resolve()}{sep}{arg}'
  except ValueError as e:
    parser.error(str(e))
  return args


def main(argv=None) -> dict | None:
  steps.reuse_freed_host_memory()  # Before JAX starts its threads (see there).
  args = parse_args(argv)
  if args.point_output:
    # Worker: one point in this fresh process, written where the parent reads it.
    point = profile_point(args, args.models[0], args.lengths[0], fresh_process=True)
    pathlib.Path(args.point_output).write_text(json.dumps(point))
    return None
  # A parent that may isolate must not claim the accelerator itself: it asks a fresh process.
  device = device_info() if args.isolate is False else probe_device_info()
  isolate = device['platform'] == 'gpu' if args.isolate is None else args.isolate
  config = load_config(args.config, args.models[0])
  results = {'device': device, 'task': config.task, 'config': args.config,
             'batch_size': args.batch_size, 'dtype': args.dtype,
             'models': [plugins.label(name) for name in args.models],
             'lengths': args.lengths, 'repeats': args.repeats, 'warmup': args.warmup,
             'memory_only': args.memory_only, 'flops_only': args.flops_only,
             'host_memory_gib': args.host_memory_gib,
             'isolated': isolate, 'points': []}
  out_dir = pathlib.Path(args.out_dir)
  print(setting_line(results), flush=True)
  for model_name in args.models:
    for length in args.lengths:
      point = (profile_point_isolated(args, model_name, length) if isolate
               else profile_point(args, model_name, length))
      results['points'].append(point)
      print(describe(point), flush=True)
      write_outputs(results, out_dir)  # After every point, so an interrupted sweep keeps its data.
  if noisy_points(results['points']):
    print(spread_note(results['points']), flush=True)
  print(f'Wrote profile.json, table2.md, table2.tex and scaling.png to {out_dir}.')
  return results


if __name__ == '__main__':
  try:
    main()
  except ValueError as e:  # a bad --config or field: one line, no traceback
    sys.exit(f'error: {e}')
