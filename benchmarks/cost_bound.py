"""Each model's training step against its cost: XLA's FLOP count over the machine's matmul rate.

Run from the repository root:
  python benchmarks/cost_bound.py [--models lru,s5,...] [--points quick,1K,4K] [--rounds 3] \\
      [--trees DIR,...] [--out_dir runs/cost_bound]

Points: `quick` is the quick ListOps config (`configs/listops.py:quick`: 60 tokens, batch 64,
D 64, 2 layers), `1K` / `4K` (or any token count) the Text config at that length, batch 1.
For every point and model it builds the profiler's real training step (`lra_luna.profile`'s
point_config and build_step: optimizer, loss, backward pass), compiles it ahead of time and
reads its FLOPs from `compiled.cost_analysis()`. A `matmul` worker times `jnp.dot` of two
2048 x 2048 float32 matrices in the same rounds. The bound of a step is the time its FLOP count
would take at that measured matmul rate; the table prints the median step time, the bound and
their ratio (step / bound: 1 = the step runs at the machine's matmul rate).

Every side runs in its own worker process; they compile one after another, then the rounds
interleave them (one step of each per round), so load from other work falls on all alike.
`--trees` runs each model also from other checkouts of this project (`git archive <commit> |
tar -x -C DIR`), labelled model@DIR: before / after a change in one run.
Writes cost_bound.json and cost_bound.md to --out_dir and prints the table.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import line_worker  # benchmarks/line_worker.py (this script's folder is on sys.path)

REPO = pathlib.Path(__file__).resolve().parent.parent
TREE = pathlib.Path(os.environ.get('LRA_LUNA_TREE', REPO))  # a worker's checkout
sys.path.insert(0, str(TREE))
MATMUL_SIZE = 2048
QUICK = 'quick'


def point_spec(point: str) -> tuple[str, int, int]:
  """(config spec, tokens, batch size) of a point name: quick ListOps, or Text at N / NK tokens."""
  if point == QUICK:
    return f'{TREE}/configs/listops.py:quick', 60, 64
  tokens = int(point[:-1]) * 1024 if point.upper().endswith('K') else int(point)
  return f'{TREE}/configs/text.py', tokens, 1


def build(side: str, point: str):
  """(run one step, FLOPs per step) of a model's step at a point, or of the matmul."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if side == 'matmul':
    a = jnp.ones((MATMUL_SIZE, MATMUL_SIZE), jnp.float32)
    compiled = jax.jit(jnp.dot).lower(a, a).compile()
    return lambda: jax.block_until_ready(compiled(a, a)), 2.0 * MATMUL_SIZE**3
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  spec, tokens, batch_size = point_spec(point)
  config = profile.point_config(spec, side, tokens, batch_size, 'float32')
  step, state, batch, key, _ = profile.build_step(config)
  compiled = step.lower(state, batch, key).compile()
  holder = {'state': state}

  def run():
    holder['state'], metrics = compiled(holder['state'], batch, key)
    jax.block_until_ready((holder['state'], metrics))
  return run, profile.compiled_flops(compiled)


def worker(side: str, point: str, warmup: int) -> None:
  run, flops = build(side, point)
  for _ in range(warmup):
    run()
  print(json.dumps({'flops': flops}), flush=True)
  for line in sys.stdin:
    if line.strip() != 'step':
      break
    start = time.perf_counter()
    run()
    print(json.dumps({'step_s': time.perf_counter() - start}), flush=True)


class Worker(line_worker.LineWorker):
  """A side's worker process (`model[@tree]` or `matmul`) at one point."""

  def __init__(self, side: str, point: str, warmup: int):
    model, _, tree = side.partition('@')
    super().__init__(side, [sys.executable, __file__, '--worker', model, '--point', point,
                            '--warmup', str(warmup)], tree or str(REPO))
    self.flops = self.read()['flops']

  def step(self) -> float:
    self.send('step')
    return self.read()['step_s']

  def stop(self) -> None:
    self.send('stop')
    self.process.wait()


def measure(point: str, sides: list[str], rounds: int, warmup: int) -> dict:
  """{side: {'step_s': median, 'step_times_s', 'flops'}} of interleaved rounds; 'matmul' too."""
  workers = []
  try:
    for side in ['matmul', *sides]:
      print(f'  {point}: building {side}', file=sys.stderr, flush=True)
      workers.append(Worker(side, point, warmup))
    times = {w.side: [] for w in workers}
    for _ in range(rounds):
      for w in workers:
        times[w.side].append(w.step())
    result = {w.side: {'step_s': statistics.median(times[w.side]),
                       'step_times_s': times[w.side], 'flops': w.flops} for w in workers}
    for w in workers:
      w.stop()
    return result
  finally:
    for w in workers:
      if w.process.poll() is None:
        w.process.kill()


def rows(point: str, result: dict) -> list[dict]:
  """One row per model side: step time, FLOPs, the bound at this point's matmul rate, ratio."""
  matmul = result['matmul']
  rate = matmul['flops'] / matmul['step_s']
  out = []
  for side, r in result.items():
    if side == 'matmul':
      continue
    bound = r['flops'] / rate if r['flops'] else None
    out.append({'point': point, 'side': side, 'step_s': r['step_s'],
                'spread': (max(r['step_times_s']) - min(r['step_times_s'])) / r['step_s'],
                'gflop': r['flops'] / 1e9 if r['flops'] else None,
                'matmul_gflops': rate / 1e9, 'bound_s': bound,
                'step_over_bound': r['step_s'] / bound if bound else None})
  return out


FAR_ABOVE = 3.0  # bold in the table: a step more than 3x its bound


def table(all_rows: list[dict]) -> str:
  lines = ['| point | model | step s (spread) | GFLOP / step | matmul GFLOP/s | bound s | '
           'step / bound |', '|---|---|---:|---:|---:|---:|---:|']
  for r in all_rows:
    bound = f"{r['bound_s']:.4f}" if r['bound_s'] else ''
    ratio = f"{r['step_over_bound']:.1f}" if r['step_over_bound'] else ''
    if r['step_over_bound'] and r['step_over_bound'] > FAR_ABOVE:
      ratio = f'**{ratio}**'
    gflop = f"{r['gflop']:.2f}" if r['gflop'] is not None else ''
    lines.append(f"| {r['point']} | {r['side']} | {r['step_s']:.4f} ({100 * r['spread']:.0f}%) | "
                 f"{gflop} | {r['matmul_gflops']:.0f} | {bound} | {ratio} |")
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--models', default='', help='default: every model of the registry')
  parser.add_argument('--points', default='quick,1K,4K')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--warmup', type=int, default=1)
  parser.add_argument('--trees', default='', help='other checkouts; each model runs from each')
  parser.add_argument('--out_dir', default='runs/cost_bound')
  parser.add_argument('--worker', help=argparse.SUPPRESS)
  parser.add_argument('--point', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    worker(args.worker, args.point, args.warmup)
    return
  if args.models:
    models = args.models.split(',')
  else:
    from lra_luna import config_lib  # pylint: disable=g-import-not-at-top
    models = list(config_lib.MODELS)
  trees = [t for t in args.trees.split(',') if t]
  sides = [m for model in models for m in [model, *(f'{model}@{t}' for t in trees)]]
  all_rows = []
  out_dir = pathlib.Path(args.out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  for point in args.points.split(','):
    for model in models:  # one model (and its --trees versions) at a time: memory stays small
      model_sides = [s for s in sides if s.partition('@')[0] == model]
      all_rows += rows(point, measure(point, model_sides, args.rounds, args.warmup))
      print(table(all_rows[-len(model_sides):]), file=sys.stderr, flush=True)
      (out_dir / 'cost_bound.json').write_text(json.dumps(all_rows, indent=1))
  load = ', '.join(f'{v:.1f}' for v in os.getloadavg())
  text = (f'{os.uname().nodename}, {os.cpu_count()} cores, load average {load}\n\n'
          f'{table(all_rows)}\n')
  (out_dir / 'cost_bound.md').write_text(text)
  print(text)


if __name__ == '__main__':
  main()
