"""What a campaign costs before it runs (--estimate): each group's memory per seed and how its
seeds split into programs on a device of a given size, and the device-hours.

Hours: each task's config (each cell's, with its overrides) profiled at its own length and batch,
as jobs on the launcher's device; hours = seeds x steps / (steps/s) per group. Without a device to
time on, --assume_tflops turns XLA's FLOPs of each step into time instead (profile --flops_only).
"""

import json

from lra_luna import config_lib
from lra_luna import registry
from lra_luna.campaign import memory
from lra_luna.campaign import plan as plan_lib
from lra_luna.campaign import spec as spec_lib
from lra_luna.training import run_folder


def memory_rows(groups: dict, group_memory: dict, device_bytes: int) -> list[tuple]:
  """[(group name, gradient accumulation steps, bytes per seed, seeds per program, programs,
  bytes of the largest program, whether one seed fits)] per group, from memory.group_memory."""
  rows = []
  for key, runs in groups.items():
    name = plan_lib.group_name(key)
    accumulation, per_seed, fits = group_memory[name]
    per_program = plan_lib.seeds_per_program(per_seed, device_bytes, len(runs))
    programs = len(plan_lib.split_into_programs(runs, per_program))
    rows.append((name, accumulation, per_seed, per_program, programs,
                 None if per_seed is None else per_seed * per_program, fits))
  return rows


def print_memory_plan(rows: list, device_bytes: int, platform: str) -> None:
  gib = lambda b: '-' if b is None else f'{b / memory.GIB:.2f}'  # pylint: disable=unnecessary-lambda-assignment
  print(f'MEMORY PLAN for a device of {device_bytes / memory.GIB:.1f} GiB (XLA\'s estimate of '
        f'the vmapped training step compiled on {platform}; a program plans at most '
        f'{plan_lib.MEMORY_HEADROOM:.0%} of the device; a group whose seed does not fit '
        'accumulates its gradient over 2, 4, ... micro-batches):')
  print(f'  {"group":40} {"accum":>5} {"GiB/seed":>9} {"seeds/program":>14} {"programs":>9} '
        f'{"GiB/program":>12}')
  for name, accumulation, per_seed, per_program, programs, largest, fits in rows:
    print(f'  {name:40} {accumulation:>5} {gib(per_seed):>9} {per_program:>14} {programs:>9} '
          f'{gib(largest):>12}' + ('' if fits else '  DOES NOT FIT: one seed needs more than '
                                   'the device at the most micro-batches'))
  over = [row[0] for row in rows if not row[-1]]
  accumulated = sum(row[1] > 1 for row in rows)
  print(f'  {sum(row[4] for row in rows)} programs'
        + (f'; {accumulated} groups accumulate their gradient' if accumulated else '') + (
            f'; {len(over)} groups exceed the device even with one seed at the most '
            'micro-batches (they run one seed per program and may fail: use a larger device, or '
            'shorter sequences)' if over else '; every program fits the device.'))


def profiled_models(spec) -> list[str]:
  """The registry models of a spec's models (a `+rotary` run costs what its model costs)."""
  return list(dict.fromkeys(registry.base_name(m) for m in spec.models))


def profile_name(key) -> str:
  """'[cell/]task': the config --estimate profiles for a group (its task's, with its cell's
  overrides), one estimate job each."""
  return plan_lib.group_name(key[:-2])


def profile_names(groups: dict) -> list[str]:
  return list(dict.fromkeys(profile_name(key) for key in groups))


def estimate_argv(spec, campaign_dir, key, config, assume_tflops) -> list:
  """profile.py's flags for the config of group `key` (its task's with the variant, protocol and
  cell's overrides: the cell's width) at its length and batch."""
  cell, task, _, _ = plan_lib.key_parts(key)
  words = spec_lib.config_spec(task, 'x', spec.protocol, spec.variant).partition(':')[2]
  words = words.split(',')[1:]
  overrides = plan_lib.cells(spec)[cell]
  return ['--config', f'{config_lib.CONFIG_DIR / task}.py' + (f':{",".join(words)}' if words
                                                              else ''),
          '--models', ','.join(profiled_models(spec)), '--lengths', str(config.max_length),
          '--batch_size', str(config.batch_size), '--repeats', str(spec.profile.repeats),
          '--warmup', str(spec.profile.warmup),
          '--out_dir', str(run_folder.estimate_dir(campaign_dir, task, cell)),
          *(['--override', *overrides] if overrides else []),
          *(['--flops_only'] if assume_tflops else [])]


def estimate_hours(groups: dict, campaign_dir, assume_tflops) -> list:
  """[(*group key, seeds x steps, hours or None, how)] per group, from the estimate's profiles:
  the measured steps/s, or the step's FLOPs at assume_tflops."""
  rows = []
  for key, runs in groups.items():
    cell, task, model, _ = plan_lib.key_parts(key)
    path = run_folder.estimate_profile(campaign_dir, task, cell)
    profile = json.loads(path.read_text()) if path.exists() else {'points': []}
    point = next((p for p in profile['points'] if p['model'] == registry.base_name(model)),
                 None)
    seed_steps = len(runs) * runs[0].config.num_train_steps  # vmapped seeds: each its own step
    if point is None or point['status'] != 'ok':
      rows.append((*key, seed_steps, None,
                   'not profiled' if point is None else 'out of memory'))
    elif assume_tflops:
      step_s = point['flops_per_step'] / (assume_tflops * 1e12)
      rows.append((*key, seed_steps, seed_steps * step_s / 3600,
                   f'{point["flops_per_step"] / 1e12:.3f} TFLOP/step at {assume_tflops} TFLOP/s'))
    else:
      rows.append((*key, seed_steps, seed_steps / point['steps_per_s'] / 3600,
                   f'{point["steps_per_s"]:.2f} steps/s on {profile["device"]["device_kind"]}'))
  return rows


def print_hours(rows: list, assume_tflops) -> None:
  kind = (f"XLA's FLOPs per step at an assumed {assume_tflops} TFLOP/s sustained"
          if assume_tflops else "the profiler's steps/s on the jobs' device")
  print(f'ESTIMATE of the training cost in device-hours, from {kind}; evaluation, compilation '
        'and queueing not counted:')
  for *key, seed_steps, hours, how in rows:
    cell, task, model, head = plan_lib.key_parts(key)
    print(f'  {f"{cell} " if cell else ""}{task:11} {model:19} {head:7} {seed_steps:>8} '
          f'seed-steps  {"-" if hours is None else f"{hours:9.2f} h"}  ({how})')
  total = sum(hours for *_, hours, _ in rows if hours is not None)
  missing = sum(hours is None for *_, hours, _ in rows)
  print(f'  total: {total:.2f} device-hours (estimate)'
        + (f', without the {missing} groups above that have no figure' if missing else ''))


def estimate_finished(spec, campaign_dir, key) -> bool:
  """Whether the estimate profile of group `key`'s config holds a point of every model."""
  cell, task, _, _ = plan_lib.key_parts(key)
  path = run_folder.estimate_profile(campaign_dir, task, cell)
  return path.exists() and (len(json.loads(path.read_text())['points'])
                            == len(profiled_models(spec)))


def timing_plan(spec, platform: str, assume_tflops) -> str:
  """What --estimate does after the memory plan, said before it starts: the steps it lowers or
  times, and, timing on a CPU, that this takes hours and how to plan without it."""
  grid = f'{len(spec.tasks)} tasks x {len(spec.models)} models' + (
      f' x {len(spec.cells)} cells' if spec.cells else '')
  points = len(spec.tasks) * len(spec.models) * len(plan_lib.cells(spec))
  if assume_tflops:
    return (f'NEXT: XLA\'s FLOP count of {points} full-size steps ({grid}), lowered, not compiled '
            'or run: seconds each.')
  steps = points * (spec.profile.warmup + spec.profile.repeats)
  line = (f'NEXT: the profiler compiles and times {points} full-size steps ({grid}), '
          f'{spec.profile.warmup} warm-up and {spec.profile.repeats} timed runs each ({steps} '
          'steps), as jobs on the launcher\'s device.')
  if platform == 'cpu':
    line += (' On a CPU a full-size step takes seconds to minutes, so this takes hours. The '
             'memory plan above needs no '
             'timing (--memory_only stops there); --assume_tflops <sustained TFLOP/s of the '
             'jobs\' device> turns FLOP counts into device-hours in seconds.')
  return line
