"""Several seeds of one config: vmapped in one program vs one run after another.

Run from the repository root:
  python benchmarks/seeds_vmap_vs_sequential.py [--config configs/listops.py:luna16,quick] \\
      [--seeds 0,1,2,3,4] [--override num_train_steps=300 ...] [--work_dir /tmp/seeds_bench]

Both modes go through lra_luna.sweep into fresh sweep folders: `sequential` starts one run_lra
process per seed (each pays start-up, data loading and compilation), `vmap` trains all seeds in
one program. Prints a Markdown table with the machine: total wall time, seed-steps/s over the
whole mode (seeds x steps / wall time) and the median logged training-loop steps/s (a vmapped
step advances every seed; the first logged interval, which holds the compilation, is left out).
"""

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # Run as a script: make lra_luna importable.

import jax  # pylint: disable=g-import-not-at-top

from lra_luna import cli  # pylint: disable=g-import-not-at-top
from lra_luna import datasets  # pylint: disable=g-import-not-at-top
from lra_luna.training import run_folder  # pylint: disable=g-import-not-at-top
from lra_luna import sweep  # pylint: disable=g-import-not-at-top


def machine(load_at_start) -> str:
  """CPU, cores, JAX and its device. Call it after the sequential runs: touching the device here
  first would claim an accelerator's memory before their processes start."""
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  cpu = profile.cpu_name()
  device = jax.devices()[0]
  load = ', '.join(f'{x:.1f}' for x in load_at_start)
  return (f'{cpu}, {os.cpu_count()} cores; JAX {jax.__version__} on {device.platform} '
          f'({device.device_kind}); load average at start {load}')


def loop_speed(workdirs) -> float | None:
  """Median logged training steps/s over the runs, each without its first (compiling) interval."""
  speeds = []
  for workdir in workdirs:
    rows = [r['steps_per_s'] for r in run_folder.read_jsonl(workdir / run_folder.METRICS_FILE)
            if 'steps_per_s' in r]
    speeds += rows[1:]
  return statistics.median(speeds) if speeds else None


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--config', default='configs/listops.py:luna16,quick')
  parser.add_argument('--seeds', type=cli.int_list, default=[0, 1, 2, 3, 4])
  parser.add_argument('--override', action='extend', nargs='+', default=[], metavar='KEY=VALUE')
  parser.add_argument('--work_dir', default='/tmp/seeds_vmap_vs_sequential')
  args = parser.parse_args()

  seeds = args.seeds
  runs = sweep.plan([args.config], seeds, [], args.override, args.work_dir)
  steps = runs[0].config.num_train_steps
  datasets.load_task(runs[0].config)  # Generate missing data before any clock starts.
  load_at_start = os.getloadavg()

  rows = []
  for mode in ('sequential', 'vmap'):
    sweep_dir = pathlib.Path(args.work_dir) / mode
    shutil.rmtree(sweep_dir, ignore_errors=True)  # Fresh: nothing to skip or resume.
    start = time.perf_counter()
    status = sweep.main(['--config', args.config, '--seeds', ','.join(map(str, seeds)),
                         '--mode', mode, '--sweep_dir', str(sweep_dir),
                         '--override', *args.override])
    wall = time.perf_counter() - start
    if status:
      sys.exit(f'{mode} sweep failed (exit status {status}); see its logs under {sweep_dir}.')
    workdirs = [r.workdir for r in sweep.plan([args.config], seeds, [], args.override, sweep_dir)]
    rows.append((mode, wall, len(seeds) * steps / wall, loop_speed(workdirs)))

  description = machine(load_at_start)
  sequential_wall = rows[0][1]
  print(f'\n{len(seeds)} seeds of {args.config} {" ".join(args.override)}, {steps} steps each.')
  print(f'Machine: {description}.\n')
  print('| mode | wall time (s) | seed-steps/s | training-loop steps/s (median logged) | '
        'speed-up (wall) |')
  print('|---|---:|---:|---:|---:|')
  for mode, wall, seed_steps, loop in rows:
    loop_text = '—' if loop is None else f'{loop:.2f}'
    print(f'| {mode} | {wall:.1f} | {seed_steps:.2f} | {loop_text} | '
          f'{sequential_wall / wall:.2f}x |')


if __name__ == '__main__':
  main()
