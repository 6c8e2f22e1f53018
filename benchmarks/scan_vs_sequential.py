"""S5's and LRU's training step with the parallel scan against a sequential `lax.scan` of the
same recurrence, timed side by side in one process on this machine.

Run from the repository root:
  python benchmarks/scan_vs_sequential.py [--models s5,lru] [--lengths 4096] [--batch_size 1] \\
      [--config configs/text.py] [--rounds 3] [--repeats 3]

For each model and length it builds the profiler's real training step (`lra_luna.profile`'s
point config and measure_point: optimizer, loss, backward pass) once with the block option
`scan = 'associative'` (jax.lax.associative_scan, the default) and once with 'sequential' (one
jax.lax.scan step per position), and times them in interleaved rounds (A B A B ...), so load
from other work falls on both alike. Prints per point the median step time of every timed step
of each side, their ratio, and XLA's memory estimate of each compiled step.
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

METHODS = ('associative', 'sequential')


def point(config_spec: str, model: str, length: int, batch_size: int, scan: str):
  config = measure.point_config(config_spec, model, length, batch_size, 'float32')
  config.model.attention_options.scan = scan
  return config


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--models', type=lambda text: cli.refuse_repeats(cli.list_items(text)),
                      default=['s5', 'lru'])
  parser.add_argument('--lengths', type=cli.int_list, default=[4096])
  parser.add_argument('--batch_size', type=int, default=1)
  parser.add_argument('--config', default='configs/text.py')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=3, help='timed steps per round and side')
  args = parser.parse_args()
  for model in args.models:
    for length in args.lengths:
      times = {method: [] for method in METHODS}
      memory = {}
      for round_ in range(args.rounds):
        for method in METHODS:
          result = measure.measure_point(point(args.config, model, length, args.batch_size,
                                               method), warmup=1, repeats=args.repeats)
          times[method] += result['step_times_s']
          memory[method] = result['estimated_bytes']
      medians = {m: statistics.median(t) for m, t in times.items()}
      print(json.dumps({'model': model, 'length': length, 'batch_size': args.batch_size,
                        'config': args.config,
                        **{f'{m}_step_s': round(medians[m], 4) for m in METHODS},
                        'sequential_over_associative': round(
                            medians['sequential'] / medians['associative'], 3),
                        **{f'{m}_estimated_mib': round(memory[m] / 2**20, 1) for m in METHODS}}),
            flush=True)


if __name__ == '__main__':
  main()
