"""Training speed and memory of each model against sequence length: the paper's Table 2.

  python -m lra_luna.profile --lengths 1024,2048,3072,4096 --batch_size 32 --out_dir runs/profile

For each (model, length) it builds the model with that max_length, the real optimizer and the
real `steps.train_step`, keeps one random batch on the device, compiles ahead of time (timed on
its own), warms up and takes the median of timed steps (docs/performance.md), with their min and
max: a point whose steps spread more than 10% ((max - min) / median) gets a warning, in the
output and under table2.md, since a busy machine moves ratios by more than that.

Memory: XLA's estimate for the compiled step (argument + output - alias + temp) everywhere; on a
GPU or TPU also the device's bytes_limit, its peak after compiling and the steps' own peak (the
table compares the latter where every point has it). On every platform but the CPU each point
runs in its own process (--isolate, the default there) that gets the whole device. A point that
runs out of memory is recorded as OOM, a worker that fails otherwise as crashed (with its last
error line), and the sweep goes on. On a CPU a point whose compiled estimate exceeds the host's
memory (--host_memory_gib, default the physical memory) is skipped before it runs ("needs X GiB,
host has Y"), not left to the kernel's OOM killer. One device; the whole batch sits on it.
Fitted log-log slopes of time and memory against length need 3 or more lengths and are printed
with their standard error, to the digits it supports. --lengths takes 1024,2048 or 1K,2K.
--dtype is the models' compute dtype (float32, bfloat16, float16); the caption names it, the
matmul precision and each row's attention implementation.

`--memory_only` compiles every point and reads the estimates without running a step: the
paper's batch of 32 at 4K then gets its memory column even where the Transformer could never
run (a CPU). `--flops_only` only lowers each step and reads XLA's FLOP count (seconds a point;
what `campaign --estimate --assume_tflops` uses where no GPU can time the steps).

Writes to --out_dir: profile.json (every point), table2.md and table2.tex (speed and memory
relative to the vanilla Transformer, the paper's rows beside ours) and scaling.png.
`--objective masked|causal` measures each model's pretraining step (spt.py: the token head at
every position, docs/spt.md) beside its classification step, as its own row `<model> [masked]`.
Any task config works: --config configs/<task>.py[:arg]; the default is configs/text.py.
Your own attention joins with `--models transformer,path/to/file.py:Class`
(lra_luna/models/plugins.py; its constructor defaults, labelled by its class name).
"""

import argparse
import itertools
import json
import pathlib
import sys

from lra_luna import cli
from lra_luna import config_lib
from lra_luna.models import plugins
from lra_luna.models.model_config import DTYPES
from lra_luna.profile import isolate
from lra_luna.profile import measure
from lra_luna.profile import plot
from lra_luna.profile import slopes as slopes_lib
from lra_luna.profile import tabulate
from lra_luna.training import run_folder
from lra_luna.training import steps

PAPER_LENGTHS = tabulate.PAPER_LENGTHS


# ----------------------------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------------------------
def model_list(text: str) -> list[str]:
  """'a,b' -> ['a', 'b'], each once (cli.refuse_repeats); checked by resolve_names."""
  return cli.refuse_repeats(cli.list_items(text))


def length_list(text: str) -> list[int]:
  """'1024,2048' or '1K,2K' (K = 1024) -> [1024, 2048]."""
  lengths, parts = [], cli.list_items(text)
  for part in parts:
    number, kilo = (part[:-1], 1024) if part[-1] in 'kK' else (part, 1)
    if not number.isdigit() or int(number) == 0:
      raise argparse.ArgumentTypeError(
          f'{part!r} in {text!r} is no sequence length; give positive token counts, e.g. '
          '1024,2048 or 1K,2K (K = 1024).')
    lengths.append(int(number) * kilo)
  if not lengths:
    raise argparse.ArgumentTypeError(f'{text!r} names no length; e.g. 1024,2048 or 1K,2K.')
  return cli.refuse_repeats(lengths, parts)


def make_parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog='python -m lra_luna.profile', description=__doc__)
  parser.add_argument('--models', type=model_list, default=None,
                      help='comma-separated models (default: Transformers, Luna, baselines) and '
                      "attention plug-ins 'path/to/file.py:Class' (lra_luna/models/plugins.py)")
  parser.add_argument('--lengths', type=length_list, default=list(PAPER_LENGTHS),
                      help='comma-separated sequence lengths, tokens: 1024,2048 or 1K,2K')
  parser.add_argument('--batch_size', type=int, default=32,
                      help='examples per step (the paper: 32; on a CPU use 1)')
  parser.add_argument('--config', default=str(measure.TEXT_CONFIG),
                      help='configs/<task>.py[:arg] (default: the Text task)')
  parser.add_argument('--dtype', default='float32', choices=DTYPES,
                      help="the models' compute dtype")
  parser.add_argument('--out_dir', default='runs/profile',
                      help='where profile.json, table2.md/.tex and scaling.png go')
  parser.add_argument('--repeats', type=int, default=10, help='timed steps (median reported)')
  parser.add_argument('--warmup', type=int, default=2, help='untimed steps after compiling')
  parser.add_argument('--memory_only', action=argparse.BooleanOptionalAction, default=False,
                      help='compile and report memory and FLOPs without timing any step')
  parser.add_argument('--flops_only', action=argparse.BooleanOptionalAction, default=False,
                      help="only XLA's FLOPs of the lowered step: no compile, no memory, no timing")
  parser.add_argument('--isolate', action=argparse.BooleanOptionalAction, default=None,
                      help='each point in a fresh process (default: on every platform but the CPU)')
  parser.add_argument('--host_memory_gib', type=float,
                      default=measure.host_memory_bytes() / 2**30,
                      help="on a CPU, points whose memory estimate exceeds this are skipped "
                      "(default: this machine's physical memory)")
  parser.add_argument('--objective', default='classification', choices=measure.OBJECTIVES,
                      help='masked | causal: each model\'s pretraining step (spt.py: the token '
                      'head at every position) beside its classification step, as its own row')
  parser.add_argument('--override', action='extend', nargs='+', default=[], metavar='KEY=VALUE',
                      help='config fields of every point, as sweep --override (e.g. '
                      'model.prune_last_layer=False)')
  parser.add_argument('--point_output', default=None, help=argparse.SUPPRESS)  # worker mode
  return parser


def resolve_names(parser, args) -> None:
  """Models checked and plug-ins and the config made absolute, so that worker processes (run
  from any folder) find them; a bad one is a one-line parser error."""
  args.models = args.models or measure.default_models()
  unknown = sorted(name for name in args.models
                   if name not in config_lib.MODELS and not plugins.is_plugin(name))
  if unknown:
    parser.error(f'unknown models {unknown}; valid choices: {sorted(config_lib.MODELS)} or a '
                 "plug-in 'path/to/file.py:Class'")
  _, sep, arg = args.config.partition(':')
  try:
    args.models = [plugins.resolved(name) for name in args.models]
    for name in filter(plugins.is_plugin, args.models):
      plugins.load_class(name)
    args.config = f'{config_lib.config_spec_path(args.config).resolve()}{sep}{arg}'
    bad = [item for item in args.override if '=' not in item]
    if bad:
      raise ValueError(f'--override {bad[0]!r}: expected KEY=VALUE, e.g. model.dim=64.')
    measure.load_config(args.config, args.models[0], args.override)  # a bad key: one line now
  except (ValueError, FileNotFoundError) as e:
    parser.error(str(e))


def parse_args(argv):
  parser = make_parser()
  args = parser.parse_args(argv)
  resolve_names(parser, args)
  return args


# ----------------------------------------------------------------------------------------------
# The sweep.
# ----------------------------------------------------------------------------------------------
def write_outputs(results: dict, out_dir: pathlib.Path) -> None:
  """profile.json, table2.md, table2.tex and scaling.png in out_dir."""
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  points = results['points']
  results['slopes'] = {'step_s': slopes_lib.scaling_slopes(points, 'step_s'),
                       'memory': slopes_lib.scaling_slopes(points, tabulate.memory_key(points))}
  tabulate.write_tables(results, out_dir)
  plot.plot_scaling(results, out_dir / 'scaling.png')
  # Last and whole: a campaign takes profile.json as the sign that every file is written.
  run_folder.write_json_atomically(out_dir / run_folder.PROFILE_FILE, results)


def sweep_header(args, device: dict, isolated: bool) -> dict:
  """profile.json's fields before any point: the setting of the whole sweep."""
  config = measure.load_config(args.config, args.models[0], args.override)
  return {'device': device, 'task': config.task, 'config': args.config,
          'overrides': list(args.override),
          'batch_size': args.batch_size, 'dtype': args.dtype,
          'matmul_precision': measure.matmul_precision(config),
          'models': [measure.point_label(name, objective) for name in args.models
                     for objective in dict.fromkeys(('classification', args.objective))],
          'lengths': args.lengths, 'repeats': args.repeats, 'warmup': args.warmup,
          'memory_only': args.memory_only, 'flops_only': args.flops_only,
          'host_memory_gib': args.host_memory_gib, 'isolated': isolated,
          'worker_environment': (isolate.worker_memory_settings() if isolated else {}),
          'points': []}


def run_worker(args) -> None:
  """Worker mode (--point_output): one point in this fresh process, written where the parent
  reads it; a failure other than out of memory is written as a crash."""
  point = measure.profile_point(args, args.models[0], args.lengths[0], crash_ok=True,
                               objective=args.objective)
  pathlib.Path(args.point_output).write_text(json.dumps(point))


def main(argv=None) -> dict | None:
  """The sweep over --models x --lengths: every point, written after each; the results."""
  steps.reuse_freed_host_memory()  # Before JAX starts its threads; on a CPU only (see there).
  args = parse_args(argv)
  if args.point_output:
    return run_worker(args)
  device, isolated = isolate.sweep_device(args.isolate)
  results = sweep_header(args, device, isolated)
  out_dir = pathlib.Path(args.out_dir)
  print(tabulate.setting_line(results), flush=True)
  objectives = dict.fromkeys(('classification', args.objective))  # each model's steps
  for model_name, objective in itertools.product(args.models, objectives):
    for length in args.lengths:
      point = (isolate.profile_point_isolated(args, model_name, length, objective) if isolated
               else measure.profile_point(args, model_name, length, objective=objective))
      results['points'].append(point)
      print(tabulate.describe(point), flush=True)
      write_outputs(results, out_dir)  # After every point, so an interrupted sweep keeps its data.
  if tabulate.noisy_points(results['points']):
    print(tabulate.spread_note(results['points']), flush=True)
  print(f'Wrote {run_folder.PROFILE_FILE}, table2.md, table2.tex and scaling.png to {out_dir}.')
  return results


def cli_main() -> None:
  """`python -m lra_luna.profile`: a bad --config or field is one line, no traceback."""
  try:
    main()
  except ValueError as e:
    sys.exit(f'error: {e}')
