"""Where a PyTorch peer's training step spends its time: `torch.profiler`'s op table, matmuls apart.

Run from the repository root (PyTorch is needed here only, never by the package):
  python benchmarks/torch_op_profile.py [--side authors_luna16] [--length 4096] [--batch_size 1] \\
      [--steps 3] [--threads 1] [--fairseq_apollo path/to/fairseq-apollo] [--out_dir runs/torch_op_profile]

The peer's step is `benchmarks/peers.py`'s own (the Text task's sizes, AdamW, one classification
step); --threads 1 (the default) matches `benchmarks/op_profile.py`, whose one pinned core makes
op times add up to the step, so the two tables compare op group by op group. Matmuls are the ops
whose FLOPs the profiler counts (mm, addmm, bmm, matmul); their GFLOP/s is set beside the rate of
`torch.mm` of two 2048^2 float32 matrices on the same threads. Writes torch_op_profile.json and
.md to --out_dir and prints the table.
"""

import argparse
import collections
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position

MATMUL_OPS = ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm')


def matmul_rate(threads: int) -> float:
  """GFLOP/s of torch.mm of two 2048^2 float32 matrices (median of 5)."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  a = torch.ones(2048, 2048)
  times = []
  for _ in range(6):
    start = time.perf_counter()
    torch.mm(a, a)
    times.append(time.perf_counter() - start)
  return 2 * 2048**3 / sorted(times[1:])[2] / 1e9


def op_groups(run, steps: int) -> tuple[list[dict], float]:
  """(rows of op name, ms per step, share, GFLOP, GFLOP/s; step ms) from `steps` profiled steps."""
  from torch import profiler  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  with profiler.profile(activities=[profiler.ProfilerActivity.CPU], with_flops=True) as prof:
    for _ in range(steps):
      run()
  step_ms = (time.perf_counter() - start) / steps * 1e3
  totals = collections.defaultdict(lambda: [0.0, 0.0, 0])
  for event in prof.key_averages():
    name = 'matmul (' + event.key + ')' if event.key in MATMUL_OPS else event.key
    totals[name][0] += event.self_cpu_time_total / 1e3 / steps
    totals[name][1] += (event.flops or 0) / 1e9 / steps
    totals[name][2] += event.count // steps
  op_ms = sum(ms for ms, _, _ in totals.values())
  rows = [{'op': name, 'ms': ms, 'share': ms / op_ms, 'gflop': gflop, 'count': count,
           'gflops': gflop / ms * 1e3 if gflop and ms else None}
          for name, (ms, gflop, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])]
  return rows, step_ms


def table(rows, step_ms: float, rate: float, args) -> str:
  op_ms = sum(row['ms'] for row in rows)
  matmul = [row for row in rows if row['op'].startswith('matmul')]
  matmul_ms, matmul_gflop = sum(r['ms'] for r in matmul), sum(r['gflop'] for r in matmul)
  lines = [f'{args.side}, {args.length} tokens, batch {args.batch_size}, {args.threads} thread(s):'
           f' step {step_ms:.0f} ms profiled, ops {op_ms:.0f} ms; matmuls {matmul_ms:.0f} ms '
           f'({matmul_ms / op_ms:.0%}) for {matmul_gflop:.2f} GFLOP ({matmul_gflop / matmul_ms * 1e3:.0f}'
           f' GFLOP/s); torch.mm 2048^2 on the same threads {rate:.0f} GFLOP/s', '',
           '| op | ms / step | share | calls / step | GFLOP | GFLOP/s |', '|---|---:|---:|---:|---:|---:|']
  shown = [row for row in rows if row['share'] >= 0.005]
  for row in shown:
    lines.append(f"| {row['op']} | {row['ms']:.1f} | {row['share']:.1%} | {row['count']} | "
                 f"{row['gflop']:.2f} | {row['gflops']:.0f} |" if row['gflop'] else
                 f"| {row['op']} | {row['ms']:.1f} | {row['share']:.1%} | {row['count']} | | |")
  rest = rows[len(shown):]
  lines.append(f'| (ops under 0.5% each: {len(rest)}) | {sum(r["ms"] for r in rest):.1f} | | | | |')
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--side', default='authors_luna16', choices=peers.PEERS)
  parser.add_argument('--length', type=int, default=4096)
  parser.add_argument('--batch_size', type=int, default=1)
  parser.add_argument('--steps', type=int, default=3)
  parser.add_argument('--threads', type=int, default=1)
  parser.add_argument('--fairseq_apollo', default=str(peers.DEFAULT_FAIRSEQ_APOLLO))
  parser.add_argument('--out_dir', default='runs/torch_op_profile')
  args = parser.parse_args()
  sizes = peers.text_sizes()
  with tempfile.TemporaryDirectory() as fairseq_dir:
    if args.side == 'authors_luna16':
      problem = peers.fairseq_apollo_problem(pathlib.Path(args.fairseq_apollo))
      if problem:
        sys.exit(problem)
      peers.fairseq_stub(pathlib.Path(args.fairseq_apollo), pathlib.Path(fairseq_dir))
    run, _, _ = peers.torch_side(args.side, args.length, args.batch_size, args.threads,
                                 fairseq_dir, sizes)
    for _ in range(2):  # warm-up
      run()
    rows, step_ms = op_groups(run, args.steps)
  rate = matmul_rate(args.threads)
  text = table(rows, step_ms, rate, args)
  out = pathlib.Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / 'torch_op_profile.json').write_text(json.dumps(
      {'args': vars(args), 'step_ms': step_ms, 'matmul_gflops': rate, 'ops': rows}, indent=1))
  (out / 'torch_op_profile.md').write_text(text + '\n')
  print(text)


if __name__ == '__main__':
  main()
