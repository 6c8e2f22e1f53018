"""What a campaign job runs on the launcher's machine: a group's seeds, in programs that fit the
device, or the profiler (Table 2 and --estimate's timings)."""

import os

from absl import logging
import jax
import submitit

from lra_luna import config_lib
from lra_luna import sweep
from lra_luna.campaign import memory
from lra_luna.campaign import plan as plan_lib
from lra_luna.training import run_folder
from lra_luna.training import steps
import lra_luna


def out_of_memory(reason: str) -> bool:
  """Whether a failed run's reason is the device running out of memory."""
  return 'RESOURCE_EXHAUSTED' in reason or 'out of memory' in reason.lower()


def train_programs(runs: list, per_program: int, run_vmapped=sweep.run_vmapped) -> list:
  """Trains runs vmapped (sweep.run_vmapped) in programs of at most per_program seeds; a program
  that runs out of device memory (RESOURCE_EXHAUSTED) is retried as two of half its seeds, down
  to one. Returns (run, reason) of the runs that failed."""
  queue, failures = plan_lib.split_into_programs(runs, per_program), []
  while queue:
    program = queue.pop(0)
    failed = run_vmapped(program)
    retry = [run for run, reason in failed if out_of_memory(reason)]
    if len(retry) > 1:
      half = (len(retry) + 1) // 2
      print(f'{retry[0].name.rsplit("/", 1)[0]}: out of device memory with {len(retry)} seeds '
            f'in one program; retrying them {half} at a time.', flush=True)
      queue[:0] = plan_lib.split_into_programs(retry, half)
      failed = [(run, reason) for run, reason in failed if run not in retry]
    failures += failed
  return failures


class GroupJob(submitit.helpers.Checkpointable):
  """One (task, model, head) group: its unfinished seeds trained vmapped, as `sweep --mode vmap`,
  as many per program as fit the device's memory. Checkpointable: on a time limit or preemption
  submitit requeues this same call, which resumes from the runs' orbax checkpoints."""

  def __init__(self, config: str, head: str, seeds: list, overrides: list, campaign_dir: str,
               device_memory_gib: float | None = None):
    self.config, self.head, self.seeds = config, head, seeds
    self.overrides, self.campaign_dir = overrides, campaign_dir
    self.device_memory_gib = device_memory_gib

  def __call__(self) -> list:
    logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every save at INFO.
    # Before the memory estimate starts JAX's backend, as train.train_seeds would have.
    steps.reuse_freed_host_memory()
    runs = sweep.plan([self.config], self.seeds, [self.head], self.overrides, self.campaign_dir)
    todo = [run for run in runs if not sweep.finished(run)]
    per_program = len(todo)
    device_bytes = memory.device_memory_bytes(self.device_memory_gib) if todo else None
    if device_bytes:
      runs, todo, per_program = self.plan_programs(runs, todo, device_bytes)
    failures = train_programs(todo, per_program)
    if failures:
      raise RuntimeError('; '.join(f'{run.name}: {reason} (log {run.log})'
                                   for run, reason in failures))
    return [run.name for run in runs]

  def plan_programs(self, runs: list, todo: list, device_bytes: int) -> tuple:
    """(runs, todo, seeds per program) on this job's device: where one seed does not fit, the
    runs planned again with the fewest micro-batches that fit (plan.fitting_accumulation; the
    override grad_accumulation_steps=<k>, recorded in each run's results)."""
    config = todo[0].config
    accumulation, seed_bytes, fits = plan_lib.fitting_accumulation(
        lambda k: memory.vmapped_step_bytes(memory.with_accumulation(config, k)), device_bytes,
        config.grad_accumulation_steps, config.batch_size // jax.device_count())
    extra = plan_lib.accumulation_override(config, accumulation)
    if extra:
      runs = sweep.plan([self.config], self.seeds, [self.head], [*self.overrides, *extra],
                        self.campaign_dir)
      todo = [run for run in runs if not sweep.finished(run)]
    per_program = plan_lib.seeds_per_program(seed_bytes, device_bytes, len(todo))
    print(f'{len(todo)} seeds, {seed_bytes / memory.GIB:.2f} GiB each (compiled estimate'
          f'{f", {accumulation} micro-batches" if accumulation > 1 else ""}), on a device of '
          f'{device_bytes / memory.GIB:.1f} GiB: {per_program} per program'
          f'{"" if fits else " (one seed does not fit; it may run out of memory)"}.', flush=True)
    return runs, todo, per_program


class ProfileJob(submitit.helpers.Checkpointable):
  """lra_luna/profile.py with the given flags (Table 2, or --estimate's timings)."""

  def __init__(self, argv: list):
    self.argv = argv

  def __call__(self) -> dict:
    from lra_luna import profile  # pylint: disable=g-import-not-at-top  (the driver needs none)
    if lra_luna.CHECKOUT:
      os.chdir(lra_luna.CHECKOUT)  # Its fresh-process points (GPU) import lra_luna from here.
    return profile.main(self.argv)


def profile_argv(spec, campaign_dir) -> list:
  """profile.py's flags for the spec's Table 2, written to <campaign>/report."""
  p = spec.profile
  path, sep, arg = p.config.partition(':')
  return ['--config', str(config_lib.config_spec_path(path)) + sep + arg,
          '--models', ','.join(p.models or spec.models),
          '--lengths', ','.join(str(n) for n in p.lengths), '--batch_size', str(p.batch_size),
          '--repeats', str(p.repeats), '--warmup', str(p.warmup),
          '--out_dir', str(run_folder.report_dir(campaign_dir))]
