"""Where one training step's time goes: XLA's CPU ops of our real step, grouped, with matmul rates.

Run from the repository root:
  python benchmarks/op_profile.py [--model luna16] [--length 4096] [--batch_size 1] [--steps 3] \\
      [--cores 1] [--config configs/text.py] [--out_dir runs/op_profile]

It builds the profiler's own step (`lra_luna.profile.build_step`, the Text task's sizes), traces
--steps steps with `jax.profiler` after two warm-up steps, and sums the time of every XLA op
(thunk) in the trace. Matmuls are split by the library that runs them, read from the compiled HLO:
`YNNPACK` fusions (XLA's fast matmul path; it takes a dot only when the left operand contracts its
last axis) and `Eigen` dots (everything else; in our step these are the kernel gradients, which
contract the token axis). Each group gets its share of the op time and, for matmuls, its FLOPs
(from the HLO shapes) and GFLOP/s.

By default the process is pinned to one core (--cores 1): with more, XLA runs Eigen dots
asynchronously beside other ops and the trace shows only their launch, so per-op times would not
add up. One core's op times add up to the step (the table prints both), which is what lets the
rates be compared with the machine's single-core matmul rate (printed beside them).
Writes op_profile.json and op_profile.md to --out_dir and prints the table.
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # Run as a script: make lra_luna importable.
TEXT_CONFIG = REPO / 'configs' / 'text.py'
MATMUL_SIZE = 2048

# One line of compiled HLO text: `%name = f32[4097,256]{1,0} op(...)`.
INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\S* (\w[\w-]*)\((.*)$')
COMPUTATION = re.compile(r'^%(\S+) .*\{$')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--model', default='luna16')
  parser.add_argument('--length', type=int, default=4096)
  parser.add_argument('--batch_size', type=int, default=1)
  parser.add_argument('--config', default=str(TEXT_CONFIG),
                      help='task config spec, e.g. configs/listops.py:quick (default: Text)')
  parser.add_argument('--steps', type=int, default=3, help='traced steps (after 2 warm-up steps)')
  parser.add_argument('--cores', type=int, default=1,
                      help='cores to pin the process to (1: op times add up; see the docstring)')
  parser.add_argument('--out_dir', default='runs/op_profile')
  return parser.parse_args(argv)


def matmul_ops(hlo_text: str) -> dict:
  """Top-level op name -> (library, FLOPs) for every op of the compiled step that runs a dot:
  a `__ynn_fusion` (its fused computation holds the dot) or a plain `dot` (Eigen)."""
  shapes, dots_in, calls, current = {}, collections.defaultdict(float), {}, None
  for line in hlo_text.splitlines():
    header = COMPUTATION.match(line)
    if header:
      current = header.group(1)
      continue
    match = INSTRUCTION.match(line)
    if not match:
      continue
    name, _, dims, opcode, rest = match.groups()
    shapes[name] = [int(d) for d in dims.split(',') if d]
    if opcode == 'dot':
      lhs = re.match(r'%(\S+?),', rest).group(1)
      contracting = [int(d) for d in re.search(r'lhs_contracting_dims=\{([\d,]*)\}',
                                               rest).group(1).split(',') if d]
      depth = 1
      for axis in contracting:
        depth *= shapes[lhs][axis]
      size = 1
      for d in shapes[name]:
        size *= d
      dots_in[current] += 2.0 * size * depth
      dots_in[name] = 2.0 * size * depth  # A top-level dot is its own op.
    called = re.search(r'calls=%(\S+?)[,\s]', rest)
    if called:
      calls[name] = (called.group(1), '__ynn_fusion' in rest)
  ops = {}
  for name, (computation, is_ynn) in calls.items():
    if is_ynn and dots_in.get(computation):
      ops[name] = ('YNNPACK', dots_in[computation])
  for line in hlo_text.splitlines():
    match = INSTRUCTION.match(line)
    if match and match.group(4) == 'dot' and not line.lstrip().startswith('ROOT'):
      ops[match.group(1)] = ('Eigen', dots_in[match.group(1)])
  return ops


def op_times(trace_dir: str, steps: int) -> dict:
  """Op name -> milliseconds per step, summed over the XLA ops (thunks) of the trace."""
  trace = next(pathlib.Path(trace_dir).rglob('*.trace.json.gz'))
  events = json.load(gzip.open(trace))['traceEvents']
  threads = {(e['pid'], e['tid']): e['args']['name'] for e in events
             if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
  times = collections.Counter()
  for event in events:
    if event.get('ph') != 'X' or 'XLA' not in threads.get((event['pid'], event['tid']), ''):
      continue
    if event['name'].startswith(('ThunkExecutor', 'Threadpool', 'end:', 'Slinky', 'PjRt')):
      continue  # Parents of the ops, and the thread pool's own bookkeeping.
    times[event['name']] += event['dur'] / 1e3 / steps
  return dict(times)


def group_of(op: str, matmuls: dict) -> str:
  if op in matmuls:
    return f'matmul ({matmuls[op][0]})'
  if op.startswith('ynn_fusion'):
    return 'YNNPACK fusion without a dot (elementwise, reductions)'
  return re.sub(r'[._]\d+$', '', op)  # fusion kinds: copy_bitcast_fusion.13 -> copy_bitcast_fusion


def single_matmul_rate() -> float:
  """GFLOP/s of a 2048^2 float32 jnp.dot on the cores this process may use."""
  import jax
  import jax.numpy as jnp
  a = jnp.ones((MATMUL_SIZE, MATMUL_SIZE), jnp.float32)
  dot = jax.jit(jnp.dot)
  dot(a, a).block_until_ready()
  times = []
  for _ in range(5):
    start = time.perf_counter()
    dot(a, a).block_until_ready()
    times.append(time.perf_counter() - start)
  return 2 * MATMUL_SIZE**3 / sorted(times)[2] / 1e9


def time_and_trace(jax, step, state, batch, key, num_steps: int) -> tuple[float, dict]:
  """(untraced ms per step after two warm-up steps, {op: ms per step} from a profiler trace)."""
  for _ in range(2):
    state, metrics = step(state, batch, key)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(num_steps):
    state, metrics = step(state, batch, key)
  jax.block_until_ready(metrics)
  step_ms = (time.perf_counter() - start) / num_steps * 1e3
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    for _ in range(num_steps):
      state, metrics = step(state, batch, key)
    jax.block_until_ready(metrics)
    jax.profiler.stop_trace()
    return step_ms, op_times(trace_dir, num_steps)


def grouped(times: dict, matmuls: dict) -> dict:
  """{op group: {'ms', 'ops', 'gflop'}} summed over the ops of each group."""
  groups = collections.defaultdict(lambda: {'ms': 0.0, 'ops': 0, 'gflop': 0.0})
  for op, ms in times.items():
    group = groups[group_of(op, matmuls)]
    group['ms'] += ms
    group['ops'] += 1
    group['gflop'] += matmuls[op][1] / 1e9 if op in matmuls else 0.0
  return dict(groups)


def group_table(title: str, groups: dict) -> str:
  """The Markdown table of the groups over 0.5% of the ops' time, largest first."""
  total_ms = sum(g['ms'] for g in groups.values())
  lines = [title, '', '| op group | ms / step | share | ops | GFLOP | GFLOP/s |',
           '|---|---:|---:|---:|---:|---:|']
  for name, group in sorted(groups.items(), key=lambda item: -item[1]['ms']):
    if group['ms'] < 0.005 * total_ms:
      continue
    rate = f"{group['gflop'] / group['ms'] * 1e3:.0f}" if group['gflop'] else ''
    gflop = f"{group['gflop']:.2f}" if group['gflop'] else ''
    lines.append(f"| {name} | {group['ms']:.1f} | {100 * group['ms'] / total_ms:.1f}% | "
                 f"{group['ops']} | {gflop} | {rate} |")
  lines.append(f'| (groups under 0.5% each) | '
               f'{sum(g["ms"] for g in groups.values() if g["ms"] < 0.005 * total_ms):.1f} | | | | |')
  return '\n'.join(lines)


def main(argv=None):
  args = parse_args(argv)
  # Pin before JAX starts its thread pools, so XLA sizes them for these cores.
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
  import jax
  from lra_luna import profile

  config = profile.point_config(args.config, args.model, args.length, args.batch_size,
                                'float32')
  step, state, batch, key, _ = profile.build_step(config)
  matmuls = matmul_ops(step.lower(state, batch, key).compile().as_text())
  step_ms, times = time_and_trace(jax, step, state, batch, key, args.steps)
  groups = grouped(times, matmuls)
  total_ms = sum(g['ms'] for g in groups.values())
  matmul_rate = single_matmul_rate()
  title = (f'{args.model}, {args.length} tokens, batch {args.batch_size}, {args.cores} core(s): '
           f'step {step_ms:.0f} ms untraced, ops {total_ms:.0f} ms; '
           f'jnp.dot {MATMUL_SIZE}^2 on the same cores {matmul_rate:.0f} GFLOP/s '
           f'(JAX {jax.__version__}, {profile.cpu_name()})')
  table = group_table(title, groups)
  print(table)
  out_dir = pathlib.Path(args.out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / 'op_profile.md').write_text(table + '\n')
  record = {'model': args.model, 'length': args.length, 'batch_size': args.batch_size,
            'cores': args.cores, 'step_ms': step_ms, 'op_ms': total_ms,
            'matmul_gflops': matmul_rate, 'jax_version': jax.__version__,
            'groups': groups, 'ops': times}
  (out_dir / 'op_profile.json').write_text(json.dumps(record, indent=1))


if __name__ == '__main__':
  main()
