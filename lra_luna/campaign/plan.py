"""A campaign's plan: its groups (task, model, head) with their runs, how many seeds of a group
fit in one program on a device, and the facts report's captions state."""

import json
import shutil

from lra_luna import config_lib
from lra_luna import registry
from lra_luna import sweep
from lra_luna.campaign import spec as spec_lib
from lra_luna.training import run_folder

# The share of a device's memory a program may plan to fill: XLA's estimate of the training step
# leaves out the evaluation step, the allocator's fragmentation and the runtime's own buffers.
MEMORY_HEADROOM = 0.9


def plan(spec, campaign_dir) -> dict:
  """{group key: [sweep.Run per seed]}, every config built and validated up front; a group key is
  (task, model, head), or (cell, task, model, head) with cells: its folder's parts (group_name).
  Only the heads the spec names run (mean_p for the models with a P only)."""
  groups = {}
  for cell in cells(spec):
    for task in spec.tasks:
      for model in spec.models:
        heads = [h for h in spec.heads if h in registry.get(registry.base_name(model)).heads]
        if spec.heads and not heads:
          continue  # (no heads at all: each config's own head)
        try:
          runs = sweep.plan([spec_lib.config_spec(task, model, spec.protocol, spec.variant)],
                            list(spec.seeds), heads, run_overrides(spec, cell),
                            run_folder.cell_dir(campaign_dir, cell))
        except ValueError as e:
          raise spec_lib.CampaignError(f'cell {cell!r}: {e}' if cell else str(e)) from None
        for run in runs:
          key = (task, model, run.head)
          groups.setdefault((cell, *key) if cell else key, []).append(run)
  unpooled = [h for h in spec.heads
              if all(h not in registry.get(registry.base_name(m)).heads for m in spec.models)]
  if unpooled:  # A spec must not plan less than it names in silence.
    raise spec_lib.CampaignError(
        f'heads {unpooled[0]!r}: none of the models {list(spec.models)} can pool it (mean_p '
        'needs a Luna model); drop it from heads or add a Luna model.')
  return groups


def run_overrides(spec, cell: str) -> list[str]:
  """The overrides of a cell's runs: the spec's, then the cell's own."""
  return [*spec.overrides, *cells(spec)[cell]]


def cells(spec) -> dict:
  """{cell name: its own overrides}; a spec without cells is one cell, '' (its runs straight
  under the campaign folder)."""
  return {cell['name']: list(cell['overrides']) for cell in spec.cells} or {'': []}


def key_parts(key) -> tuple:
  """(cell, task, model, head) of a group key; the cell '' in a spec without cells."""
  return tuple(key) if len(key) == 4 else ('', *key)


def skipped_heads(spec) -> list[str]:
  """One line per spec head that some of its models cannot pool: which models it skips and why,
  so that a campaign never plans fewer groups than its spec names without saying so."""
  lines = []
  for head in spec.heads:
    skipped = [m for m in spec.models if head not in registry.get(registry.base_name(m)).heads]
    if skipped:
      pooled = registry.get(registry.base_name(skipped[0])).heads
      lines.append(f'head {head} is skipped for {", ".join(skipped)} (they pool '
                   f'{", ".join(pooled)} only; {head} needs a Luna model).')
  return lines


def group_name(key) -> str:
  """'[cell/]task/model/head': a group's job name, and its folder under the campaign's."""
  return '/'.join(key)


def group_key(name: str) -> tuple:
  return tuple(name.split('/'))


def seeds_per_program(seed_bytes, device_bytes, num_seeds: int) -> int:
  """How many seeds of a group train in one program: as many as fit MEMORY_HEADROOM of the
  device at seed_bytes each (at least one); all of them when either size is unknown."""
  if not seed_bytes or not device_bytes:
    return num_seeds
  return max(1, min(num_seeds, int(device_bytes * MEMORY_HEADROOM // seed_bytes)))


def fits(seed_bytes, device_bytes) -> bool:
  """Whether one seed fits MEMORY_HEADROOM of the device (True when either size is unknown)."""
  return not seed_bytes or not device_bytes or seed_bytes <= device_bytes * MEMORY_HEADROOM


def accumulation_steps_to_try(start: int, batch_per_device: int) -> list[int]:
  """start, 2 start, 4 start, ... while they divide the per-device batch."""
  steps = [start]
  while batch_per_device % (steps[-1] * 2) == 0:
    steps.append(steps[-1] * 2)
  return steps


def fitting_accumulation(seed_bytes_at, device_bytes, start: int,
                         batch_per_device: int) -> tuple[int, int | None, bool]:
  """(gradient accumulation steps, bytes per seed at them, whether one seed fits): the first of
  accumulation_steps_to_try at which one seed fits the device (seed_bytes_at(k): the compiled
  estimate at k micro-batches), else the last tried (least memory). Accumulation leaves the
  update as it is (up to float summation order) and divides the step's activation memory."""
  for k in accumulation_steps_to_try(start, batch_per_device):
    seed_bytes = seed_bytes_at(k)
    if fits(seed_bytes, device_bytes):
      return k, seed_bytes, True
  return k, seed_bytes, False


def accumulation_override(config, steps: int) -> list[str]:
  """['grad_accumulation_steps=<steps>'] where the plan changed config's own, else []."""
  return [] if steps == config.grad_accumulation_steps else [f'grad_accumulation_steps={steps}']


def split_into_programs(items: list, per_program: int) -> list[list]:
  """items in consecutive programs of per_program (the last may hold fewer: 5 by 2 is 2, 2, 1)."""
  return [items[i:i + per_program] for i in range(0, len(items), per_program)]


def shortened_facts(groups: dict) -> list[str]:
  """How the campaign's runs fall short of their protocol's full runs
  (config_lib.shortened_reasons): a reason every task shares once, the others with their task."""
  by_task = {}
  for key, runs in groups.items():
    task = key_parts(key)[1]
    reasons = by_task.setdefault(task, [])
    for reason in config_lib.shortened_reasons(runs[0].config):
      if reason not in reasons:
        reasons.append(reason)
  shared = [r for r in next(iter(by_task.values()), []) if all(r in rs for rs in by_task.values())]
  return shared + [f'{task} {r}' for task, reasons in sorted(by_task.items())
                   for r in reasons if r not in shared]


def facts(spec, groups: dict) -> dict:
  """What report's captions state: the protocol, each task's steps against its full run's, the
  heads run, the overrides, and how the campaign falls short (shortened runs, fewer seeds)."""
  steps = {}
  for key, runs in groups.items():
    task, config = key_parts(key)[1], runs[0].config
    steps.setdefault(task, set()).add((config.num_train_steps,
                                       config_lib.full_run_steps(config)))
  short = shortened_facts(groups)
  if len(spec.seeds) < spec_lib.PROTOCOL_SEEDS:
    short.append(f'{len(spec.seeds)} of {spec_lib.PROTOCOL_SEEDS} seeds')
  return {'name': spec.name, 'protocol': spec.protocol,
          'steps': {task: sorted(pairs, key=str) for task, pairs in steps.items()},
          'heads': sorted({key_parts(key)[3] for key in groups}),
          'overrides': list(spec.overrides),
          'cut_short': short}


def clear_stale_runs(groups: dict) -> None:
  """With --force: deletes run folders that hold another config than the spec now gives."""
  for runs in groups.values():
    for run in runs:
      saved = run.workdir / run_folder.CONFIG_FILE
      if saved.exists() and config_lib.config_differences(json.loads(saved.read_text()),
                                                          run.config):
        print(f'{run.name}: its config changed; starting it anew.', flush=True)
        shutil.rmtree(run.workdir)
