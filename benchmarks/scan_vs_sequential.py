"""S5's and LRU's training step with each of the recurrence's scans, timed side by side in one
process on this machine: the parallel scan, a sequential `lax.scan`, and the chunked scan at
several chunk sizes.

Run from the repository root:
  python benchmarks/scan_vs_sequential.py [--models s5,lru] [--lengths 4096] [--batch_size 1] \\
      [--config configs/text.py] [--chunks 16,64] [--rounds 3] [--repeats 3]

For each model and length it builds the profiler's real training step (`lra_luna.profile`'s
point config and measure_point: optimizer, loss, backward pass) with the block option
`scan = 'associative'` (jax.lax.associative_scan), 'sequential' (one jax.lax.scan step per
position) and 'chunked' with `chunk` = each of --chunks (s5.chunked_scan), and times them in
interleaved rounds (A B C A B C ...), so load from other work falls on all alike. Prints per
point the median step time of every timed step of each side, each over the sequential one, and
XLA's memory estimate of each compiled step.
"""

import argparse
import json
import pathlib
import statistics
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lra_luna import cli  # noqa: E402
from lra_luna.profile import measure  # noqa: E402

def point(config_spec: str, model: str, length: int, batch_size: int, method: str):
  """The point's config with scan `method`: 'associative', 'sequential' or 'chunked<T>'."""
  config = measure.point_config(config_spec, model, length, batch_size, 'float32')
  config.model.attention_options.scan = method.rstrip('0123456789')
  if method.startswith('chunked'):
    config.model.attention_options.chunk = int(method.removeprefix('chunked'))
  return config


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--models', type=lambda text: cli.refuse_repeats(cli.list_items(text)),
                      default=['s5', 'lru'])
  parser.add_argument('--lengths', type=cli.int_list, default=[4096])
  parser.add_argument('--batch_size', type=int, default=1)
  parser.add_argument('--config', default='configs/text.py')
  parser.add_argument('--chunks', type=cli.int_list, default=[16, 64],
                      help="chunk sizes of the 'chunked' scan")
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=3, help='timed steps per round and side')
  args = parser.parse_args()
  methods = ['associative', 'sequential', *(f'chunked{size}' for size in args.chunks)]
  for model in args.models:
    for length in args.lengths:
      times = {method: [] for method in methods}
      memory = {}
      for round_ in range(args.rounds):
        for method in methods:
          result = measure.measure_point(point(args.config, model, length, args.batch_size,
                                               method), warmup=1, repeats=args.repeats)
          times[method] += result['step_times_s']
          memory[method] = result['estimated_bytes']
      medians = {m: statistics.median(t) for m, t in times.items()}
      print(json.dumps({'model': model, 'length': length, 'batch_size': args.batch_size,
                        'config': args.config,
                        **{f'{m}_step_s': round(medians[m], 4) for m in methods},
                        **{f'{m}_over_sequential': round(medians[m] / medians['sequential'], 3)
                           for m in methods if m != 'sequential'},
                        **{f'{m}_estimated_mib': round(memory[m] / 2**20, 1) for m in methods}}),
            flush=True)


if __name__ == '__main__':
  main()
