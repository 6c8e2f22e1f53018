"""Our training step against its peers, timed side by side in one run on this machine.

Run from the repository root (PyTorch is needed for the peer rows only, never by the package):
  pip install torch==2.13.0
  python benchmarks/peers.py [--lengths 1024,2048,4096] [--batch_sizes 1,8] [--rounds 5] \\
      [--fairseq_apollo path/to/fairseq-apollo] [--out_dir runs/peers]
(a checkout of github.com/XuezheMax/fairseq-apollo, or $FAIRSEQ_APOLLO; read at run time, never copied)

Sides, all with the Text task's sizes (D 256, FFN 1024, 4 heads, 4 layers, Luna l = 16), its
dropout (0.3 on activations and attention probabilities), AdamW and one classification step:
- ours: `luna16`, `transformer_fused`, `transformer` (vanilla), the profiler's real step
  (`lra_luna.profile.build_step`), compiled ahead of time; `luna16_all_rows`: luna16 with
  ModelConfig.prune_last_layer off (its last layer computes every row, as the peers do);
- `torch_transformer`: PyTorch's `nn.TransformerEncoder` (post-LN, GELU, SDPA) with the same
  embedding, positions and classifier head;
- `authors_luna16`: `LunaLRAEncoder` of the authors' fairseq-apollo, read at run time from
  --fairseq_apollo (a checkout or a bare git dir; their code is never copied into this project)
  and loaded with the small stub of the fairseq helpers it imports that `fairseq_stub` writes;
- `matmul`: jnp.dot of two 2048 x 2048 float32 matrices, the machine's own limit.

Every side runs in its own worker process (so each has its own peak resident memory, ru_maxrss,
measured the same way) with the same thread count; workers compile and warm up one after
another, then the rounds interleave them (one step of each side per round, ABAB...), so load from
other work on the machine falls on every side alike. The table gives the median step rate and
its spread (min-max over rounds), GFLOP/s with one FLOP count for both sides of a comparison
(XLA's cost analysis of our step; a peer's is that of our step computing every row, the work the
peer does), the percentage of the matmul rate of
the same run, the CPU seconds per step (all threads of the worker; a steadier figure than wall
time when other work shares the CPU), peak RSS, and the ratios ours / peer of steps/s, of steps
per CPU second and of RSS. The Transformers run at --transformer_batch_sizes only (batch 8 at 4K
forms 2 GB attention matrices per layer: more than this machine holds).
Every worker runs with glibc's allocator set as run_lra.py sets it (one heap for every thread,
freed blocks kept in it: --peer_allocator ours; glibc's defaults for the PyTorch workers and
the thresholds alone for ours with `default`), and OpenMP's wait policy is the caller's (see
Worker).
Writes peers.json (with page faults per step) and peers.md to --out_dir and prints the table.

Before / after a change, in one interleaved run: `git worktree add /tmp/before <commit>`, then
  python benchmarks/peers.py --sides luna16 --trees /tmp/before --lengths 4096 --batch_sizes 1
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import line_worker  # benchmarks/line_worker.py (this script's folder is on sys.path)

REPO = pathlib.Path(__file__).resolve().parent.parent
# The lra_luna to time: this checkout, or in a worker of --trees another version of it.
TREE = pathlib.Path(os.environ.get('LRA_LUNA_TREE', REPO))
sys.path.insert(0, str(TREE))  # Run as a script: make lra_luna importable.
DEFAULT_FAIRSEQ_APOLLO = pathlib.Path(os.environ.get('FAIRSEQ_APOLLO', 'fairseq-apollo'))
FAIRSEQ_FILES = {  # Their file -> where it goes in the stub package.
    'fairseq/modules/luna_attention.py': 'fairseq/modules/luna_attention.py',
    'fairseq/modules/luna_sentence_encoder.py': 'fairseq/modules/luna_sentence_encoder.py',
    'fairseq/models/lra/luna_lra_encoder.py': 'fairseq/luna_lra_encoder.py',
}
TEXT_CONFIG = TREE / 'configs' / 'text.py'
MATMUL_SIZE = 2048
# `luna16_all_rows`: our luna16 with ModelConfig.prune_last_layer off, so that its last layer
# computes every row as the authors' code does (the like-for-like kernel comparison).
ALL_ROWS = '_all_rows'
OURS = ('luna16', 'luna16' + ALL_ROWS, 'transformer_fused', 'transformer')
# Peer -> our side it is compared with (and its `_all_rows` twin, when that side runs too).
PEERS = {'authors_luna16': 'luna16', 'torch_transformer': 'transformer_fused'}
TRANSFORMERS = ('transformer_fused', 'transformer', 'torch_transformer')


# ----------------------------------------------------------------------------------------------
# The authors' Luna: their three files plus our stub of the fairseq helpers they import.
# ----------------------------------------------------------------------------------------------
STUB_FILES = {
    'fairseq/__init__.py': '',
    'fairseq/models/__init__.py': '',
    'fairseq/utils.py': '''
import torch.nn.functional as F

def get_activation_fn(name):
  return {'relu': F.relu, 'gelu': F.gelu}[name]

def softmax(x, dim, onnx_trace=False):
  return F.softmax(x.float(), dim=dim)
''',
    'fairseq/incremental_decoding_utils.py': '''
def with_incremental_state(cls):
  return cls  # Incremental decoding is never used by the encoder.
''',
    'fairseq/modules/fairseq_dropout.py': '''
import torch.nn as nn
import torch.nn.functional as F

class FairseqDropout(nn.Module):
  def __init__(self, p, module_name=None):
    super().__init__()
    self.p = p

  def forward(self, x, inplace=False):
    return F.dropout(x, p=self.p, training=self.training, inplace=inplace)
''',
    'fairseq/modules/quant_noise.py': '''
def quant_noise(module, p, block_size):
  assert p == 0, 'the benchmark runs without quantisation noise'
  return module
''',
    'fairseq/modules/__init__.py': '''
import torch
import torch.nn as nn

def LayerNorm(dim, export=False):
  return nn.LayerNorm(dim)

LayerDropModuleList = nn.ModuleList

class PositionalEmbedding(nn.Embedding):
  """Learned positions; position i of a sequence without padding reads row padding_idx + 1 + i."""

  def __init__(self, max_len, dim, padding_idx, learned=True):
    assert learned, 'the benchmark uses learned positions'
    super().__init__(max_len + padding_idx + 1, dim, padding_idx)
    self.offset = padding_idx + 1

  def forward(self, tokens, positions=None):
    positions = torch.arange(tokens.size(1), device=tokens.device) + self.offset
    return super().forward(positions)[None]

RealNumberEmbedding = None  # Only their 'linear' (pixel) embedding uses it.

from fairseq.modules.luna_attention import LunarMultiheadAttention
''',
}


def read_their_file(source: pathlib.Path, path: str) -> str:
  """One file of fairseq-apollo from a checkout or a bare git dir (HEAD)."""
  if (source / path).is_file():
    return (source / path).read_text()
  return subprocess.run(['git', f'--git-dir={source}', 'show', f'HEAD:{path}'], check=True,
                        capture_output=True, text=True).stdout


def fairseq_stub(source: pathlib.Path, into: pathlib.Path) -> None:
  """Writes the stub package with their three files into `into` (a temporary dir)."""
  for path, text in STUB_FILES.items():
    (into / path).parent.mkdir(parents=True, exist_ok=True)
    (into / path).write_text(text)
  for path, target in FAIRSEQ_FILES.items():
    (into / target).write_text(read_their_file(source, path))


def fairseq_apollo_problem(source: pathlib.Path) -> str | None:
  """None if their files can be read from `source`, else one line saying how to get them."""
  try:
    for path in FAIRSEQ_FILES:
      read_their_file(source, path)
    return None
  except (OSError, subprocess.CalledProcessError):
    return (f'authors_luna16 skipped: no fairseq-apollo at {source}; get it with `git clone '
            'https://github.com/XuezheMax/fairseq-apollo` and pass --fairseq_apollo <that dir>')


# ----------------------------------------------------------------------------------------------
# Workers: build one side, then run one step per 'step' line read from stdin.
# ----------------------------------------------------------------------------------------------
def jax_side(name: str, length: int, batch_size: int):
  """(step function, FLOPs per step, setup seconds) of our model or the matmul."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  if name == 'matmul':
    a = jnp.ones((MATMUL_SIZE, MATMUL_SIZE), jnp.float32)
    compiled = jax.jit(jnp.dot).lower(a, a).compile()
    return (lambda: jax.block_until_ready(compiled(a, a)), 2.0 * MATMUL_SIZE**3,
            time.perf_counter() - start)
  step, state, batch, key, _ = profile.build_step(our_config(name, length, batch_size))
  compiled = step.lower(state, batch, key).compile()
  holder = {'state': state}

  def run():
    holder['state'], metrics = compiled(holder['state'], batch, key)
    jax.block_until_ready((holder['state'], metrics))
  return run, profile.compiled_flops(compiled), time.perf_counter() - start


def our_config(name: str, length: int, batch_size: int):
  """The Text config of our side `name` (`luna16_all_rows`: luna16 computing every row)."""
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  config = profile.point_config(str(TEXT_CONFIG), name.removesuffix(ALL_ROWS), length, batch_size,
                                'float32')
  if name.endswith(ALL_ROWS) and 'prune_last_layer' in config.model:
    config.model.prune_last_layer = False  # Trees (--trees) from before it compute every row.
  return config


def peer_work_flops(name: str, length: int, batch_size: int) -> float:
  """XLA's FLOP count of our step of `name` computing every row of the last layer, as the
  peers do (ours computes only the rows its head reads): the work behind a peer's GFLOP/s.
  Counted on the lowered step (no compile; within 2% of the compiled count), in the driver."""
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  step, state, batch, key, _ = profile.build_step(our_config(name + ALL_ROWS, length, batch_size))
  return profile.compiled_flops(step.lower(state, batch, key))


def text_sizes() -> dict:
  """The Text config's sizes, dropout and optimizer settings that the PyTorch peers copy."""
  from lra_luna import config_lib, datasets  # pylint: disable=g-import-not-at-top
  config = config_lib.load_config(f'{TEXT_CONFIG}:luna16')
  vocab_size, num_classes = datasets.task_sizes('text')
  return {**{k: config.model[k] for k in ('dim', 'num_heads', 'num_layers', 'ffn_dim',
                                           'classifier_dim', 'dropout', 'attention_dropout',
                                           'tie_kv')},
          'vocab_size': vocab_size + 2,  # Room for the padding id 1 and a CLS id.
          'num_classes': num_classes, 'learning_rate': config.learning_rate,
          'weight_decay': config.weight_decay}


def torch_side(name: str, length: int, batch_size: int, threads: int, fairseq_dir: str,
               sizes: dict):
  """(step function, None, setup seconds) of a PyTorch peer with the Text task's `sizes`
  (text_sizes(), passed in so that this process never imports JAX: its RSS is PyTorch's)."""
  import types  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  m = types.SimpleNamespace(**sizes)
  vocab_size, num_classes = m.vocab_size, m.num_classes
  if name == 'torch_transformer':
    layer = nn.TransformerEncoderLayer(m.dim, m.num_heads, m.ffn_dim, dropout=m.dropout,
                                       activation='gelu', batch_first=True)
    encoder = nn.TransformerEncoder(layer, m.num_layers, enable_nested_tensor=False)
    embed = nn.Embedding(vocab_size, m.dim)
    positions = nn.Parameter(torch.randn(1, length, m.dim) * 0.02)
    embed_norm, embed_drop = nn.LayerNorm(m.dim), nn.Dropout(m.dropout)
    modules = nn.ModuleList([encoder, embed, embed_norm])
    extra = [positions]

    def encode(tokens):
      return encoder(embed_drop(embed_norm(embed(tokens) + positions)))[:, 0]
  else:
    sys.path.insert(0, fairseq_dir)
    from fairseq import luna_lra_encoder  # pylint: disable=g-import-not-at-top
    encoder = luna_lra_encoder.LunaLRAEncoder(
        padding_idx=1, vocab_size=vocab_size, projection_length=16,
        num_encoder_layers=m.num_layers, embedding_dim=m.dim, ffn_embedding_dim=m.ffn_dim,
        num_attention_heads=m.num_heads, num_projected_attention_heads=m.num_heads,
        dropout=m.dropout, attention_dropout=m.attention_dropout, activation_dropout=0.0,
        max_seq_len=length, layernorm_embedding=True, tie_kv=m.tie_kv, dynamic_projection=False,
        apply_bert_init=True, activation_fn='gelu', learned_pos_embedding=True)
    modules, extra = nn.ModuleList([encoder]), []

    def encode(tokens):
      return encoder(tokens, None, last_state_only=True)[1][0]
  head = nn.Sequential(nn.Linear(m.dim, m.classifier_dim), nn.ReLU(),
                       nn.Linear(m.classifier_dim, num_classes))
  modules.append(head)
  modules.train()
  params = [*modules.parameters(), *extra]
  optimizer = torch.optim.AdamW(params, lr=m.learning_rate, weight_decay=m.weight_decay)
  tokens = torch.randint(2, vocab_size, (batch_size, length))
  targets = torch.randint(0, num_classes, (batch_size,))

  def run():
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(head(encode(tokens)), targets)
    loss.backward()
    optimizer.step()
  return run, None, time.perf_counter() - start


def worker(args) -> None:
  """Builds one side, warms it up, then answers 'step' with its time and 'stop' with its RSS."""
  if args.worker in PEERS:
    if args.peer_allocator == 'ours':
      # The glibc setting our steps run with (JAX-free module: this process must not load JAX).
      # PyTorch allocates on the calling thread, so the thresholds alone reach its tensors.
      from lra_luna.training import host_memory  # pylint: disable=g-import-not-at-top
      host_memory.keep_freed_blocks_in_heap()
    run, flops, setup_s = torch_side(args.worker, args.length, args.batch_size, args.threads,
                                     args.fairseq_dir, json.loads(args.sizes))
  else:
    run, flops, setup_s = jax_side(args.worker, args.length, args.batch_size)
  for _ in range(args.warmup):
    run()
  print(json.dumps({'ready': True, 'flops': flops, 'setup_s': setup_s}), flush=True)
  for line in sys.stdin:
    if line.strip() != 'step':
      break
    start, cpu_start = time.perf_counter(), time.process_time()
    faults_start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    run()
    print(json.dumps({'step_s': time.perf_counter() - start,
                      'cpu_s': time.process_time() - cpu_start,
                      'page_faults': (resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                                      - faults_start)}), flush=True)
  # ru_maxrss is in KiB on Linux.
  print(json.dumps({'peak_rss_bytes': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}),
        flush=True)


class Worker(line_worker.LineWorker):
  """A side's worker process, driven one line at a time."""

  def __init__(self, side: str, length: int, batch_size: int, args, fairseq_dir: str,
               sizes: dict):
    name, _, tree = side.partition('@')  # 'luna16@DIR': our luna16 as the checkout DIR has it.
    # OMP_WAIT_POLICY is left as the caller's (unset: libgomp's default, a short spin, then
    # sleep), PyTorch's best here. On the idle 2-core machine PyTorch's Luna step ran at 4.3
    # steps/s with the default, 3.1 with PASSIVE (every wake-up is a futex) and, interleaved,
    # ACTIVE slowed every side (a waiting worker's threads spin through the others' steps).
    super().__init__(side, [sys.executable, __file__, '--worker', name, '--length', str(length),
                            '--batch_size', str(batch_size), '--threads', str(args.threads),
                            '--warmup', str(args.warmup), '--fairseq_dir', fairseq_dir,
                            '--peer_allocator', args.peer_allocator,
                            '--sizes', json.dumps(sizes)], tree or str(REPO))
    self.ready = self.read()

  def step(self) -> dict:
    """{'step_s': wall seconds, 'cpu_s': CPU seconds of all the worker's threads}."""
    self.send('step')
    return self.read()

  def stop(self) -> int:
    self.send('stop')
    peak = self.read()['peak_rss_bytes']
    self.process.wait()
    return peak


# ----------------------------------------------------------------------------------------------
# The driver: interleaved rounds per (length, batch), then the table.
# ----------------------------------------------------------------------------------------------
def measure(sides, length, batch_size, args, fairseq_dir, sizes) -> dict:
  """{side: {'steps_per_s': median, 'min'/'max': spread, 'flops', 'peak_rss_bytes'}}."""
  workers = []
  try:
    for side in sides:  # One after another: compilation never overlaps a timed step.
      print(f'  {side}: building at {length} tokens, batch {batch_size}', file=sys.stderr,
            flush=True)
      workers.append(Worker(side, length, batch_size, args, fairseq_dir, sizes))
    steps = {side: [] for side in sides}
    for _ in range(args.rounds):
      for w in workers:
        steps[w.side].append(w.step())
    result = {}
    for w in workers:
      rates = [1.0 / s['step_s'] for s in steps[w.side]]
      result[w.side] = {'steps_per_s': statistics.median(rates), 'min': min(rates),
                        'max': max(rates), 'step_times_s': [s['step_s'] for s in steps[w.side]],
                        'cpu_s': statistics.median(s['cpu_s'] for s in steps[w.side]),
                        'page_faults': statistics.median(s['page_faults']
                                                         for s in steps[w.side]),
                        'flops': w.ready['flops'], 'setup_s': w.ready['setup_s'],
                        'peak_rss_bytes': w.stop()}
    return result
  finally:
    for w in workers:
      if w.process.poll() is None:
        w.process.kill()


def table(points) -> str:
  """Markdown table of all points, % of the matmul rate measured in the same rounds. GFLOP/s are
  XLA's counts of our steps: each of our sides its own, a peer that of the step it is compared
  with computing every row (the work the peer does)."""
  lines = ['| tokens | batch | side | steps/s (median, min-max) | GFLOP/s | % of matmul | '
           'CPU s/step | peak RSS MiB | ours / peer (steps/s, steps per CPU s, RSS) |',
           '|---|---:|---|---|---:|---:|---:|---:|---|']
  for point in points:
    length, batch_size, sides = point['length'], point['batch_size'], point['sides']
    matmul_rate = point['matmul_gflops']
    for side, r in sides.items():
      if side in PEERS:
        flops = point['peer_work_flops'][side]
      else:
        flops = r.get('flops')
      gflops = flops * r['steps_per_s'] / 1e9 if flops else None
      ratios = []
      for name in ((PEERS[side], PEERS[side] + ALL_ROWS) if side in PEERS else ()):
        if name in sides:
          ours = sides[name]
          ratios.append(f"{name}: {ours['steps_per_s'] / r['steps_per_s']:.2f}x, "
                        f"{r['cpu_s'] / ours['cpu_s']:.2f}x, "
                        f"{ours['peak_rss_bytes'] / r['peak_rss_bytes']:.2f}x")
      ratio = '; '.join(ratios)
      if side == 'transformer' and 'luna16' in sides:
        luna = sides['luna16']
        ratio = (f"luna16 / this: {luna['steps_per_s'] / r['steps_per_s']:.2f}x, "
                 f"{r['cpu_s'] / luna['cpu_s']:.2f}x, "
                 f"{luna['peak_rss_bytes'] / r['peak_rss_bytes']:.2f}x")
      lines.append(
          f"| {length} | {batch_size} | {side} | {r['steps_per_s']:.3f} "
          f"({r['min']:.3f}-{r['max']:.3f}) | {'' if gflops is None else f'{gflops:.1f}'} | "
          f"{'' if gflops is None else f'{100 * gflops / matmul_rate:.0f}%'} | "
          f"{r['cpu_s']:.2f} | {r['peak_rss_bytes'] / 2**20:.0f} | {ratio} |")
  return '\n'.join(lines)


def machine(threads: int) -> str:
  import jax  # pylint: disable=g-import-not-at-top
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  cpu = profile.cpu_name()
  try:
    import torch  # pylint: disable=g-import-not-at-top
    torch_version = torch.__version__
  except ImportError:
    torch_version = 'not installed'
  return (f'{cpu}, {os.cpu_count()} cores, {threads} threads per side; Python '
          f'{platform.python_version()}, JAX {jax.__version__}, PyTorch {torch_version}')


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--lengths', default='1024,2048,4096')
  parser.add_argument('--batch_sizes', default='1,8')
  parser.add_argument('--transformer_batch_sizes', default='1',
                      help='batch sizes at which the three Transformers run')
  parser.add_argument('--rounds', type=int, default=5, help='interleaved timed steps per side')
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--threads', type=int, default=os.cpu_count(),
                      help="PyTorch's threads; XLA's CPU client uses every core, as this does")
  parser.add_argument('--sides', default='luna16,authors_luna16,transformer_fused,'
                      'torch_transformer,transformer')
  parser.add_argument('--fairseq_apollo', default=str(DEFAULT_FAIRSEQ_APOLLO),
                      help='a checkout or bare git dir of XuezheMax/fairseq-apollo')
  parser.add_argument('--trees', default='',
                      help='other checkouts of this project (e.g. `git worktree add DIR <commit>`)'
                      '; each of our sides also runs from each, labelled side@DIR')
  parser.add_argument('--out_dir', default='runs/peers')
  parser.add_argument('--peer_allocator', choices=('ours', 'default'), default='ours',
                      help="ours: the PyTorch workers keep freed blocks in the heap as our steps "
                      "do (the same glibc setting for every side); default: glibc's defaults")
  # Worker-only flags.
  parser.add_argument('--worker', help=argparse.SUPPRESS)
  parser.add_argument('--length', type=int, help=argparse.SUPPRESS)
  parser.add_argument('--batch_size', type=int, help=argparse.SUPPRESS)
  parser.add_argument('--fairseq_dir', default='', help=argparse.SUPPRESS)
  parser.add_argument('--sizes', default='{}', help=argparse.SUPPRESS)
  return parser.parse_args()


def chosen_sides(args) -> list[str]:
  """--sides checked (and repeated for each --trees checkout); exits in one line on a mistake."""
  sides = [s.strip() for s in args.sides.split(',') if s.strip()]
  unknown = sorted(set(sides) - set(OURS) - set(PEERS))
  if unknown:
    sys.exit(f'error: --sides: unknown {unknown}; valid: {sorted({*OURS, *PEERS})}')
  for tree in filter(None, args.trees.split(',')):
    if not (pathlib.Path(tree) / 'lra_luna').is_dir():
      sys.exit(f'error: --trees: {tree} holds no lra_luna/; give checkouts of this project')
    sides += [f'{side}@{tree}' for side in sides if side in OURS]
  if any(side in PEERS for side in sides):
    try:
      import torch  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      sys.exit('error: the PyTorch rows need torch: pip install torch==2.13.0 (or drop them '
               'with --sides)')
  return sides


def measure_points(args, sides, fairseq_dir) -> list[dict]:
  """Every (length, batch size) point: each side's steps/s, the matmul rate, the peers' work."""
  sizes = text_sizes()
  points = []
  for length in [int(v) for v in args.lengths.split(',')]:
    for batch_size in [int(v) for v in args.batch_sizes.split(',')]:
      transformer_ok = str(batch_size) in args.transformer_batch_sizes.split(',')
      point_sides = ['matmul'] + [s for s in sides
                                   if transformer_ok or s.partition('@')[0] not in TRANSFORMERS]
      result = measure(point_sides, length, batch_size, args, fairseq_dir, sizes)
      matmul = result.pop('matmul')
      work = {peer: peer_work_flops(ours, length, batch_size)
              for peer, ours in PEERS.items() if peer in result}
      points.append({'length': length, 'batch_size': batch_size, 'sides': result,
                     'matmul_gflops': matmul['flops'] * matmul['steps_per_s'] / 1e9,
                     'peer_work_flops': work})
      print(table(points[-1:]), file=sys.stderr, flush=True)
  return points


def write_outputs(args, points) -> None:
  """peers.json (every point, the arguments) and peers.md (the table with the setting)."""
  matmul_rates = ', '.join(f"{p['matmul_gflops']:.0f}" for p in points)
  text = (f'{machine(args.threads)}. Matmul ({MATMUL_SIZE}^2 float32 jnp.dot, timed in the rounds '
          f'of each point): {matmul_rates} GFLOP/s. Rounds: {args.rounds} interleaved steps per '
          f'side, after {args.warmup} warm-up steps. PyTorch workers\' glibc setting: '
          f'{args.peer_allocator}.\n\n{table(points)}\n')
  out_dir = pathlib.Path(args.out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / 'peers.json').write_text(json.dumps(
      {'machine': machine(args.threads), 'args': vars(args), 'points': points},
      indent=1))
  (out_dir / 'peers.md').write_text(text)
  print(text)


def main() -> None:
  args = parse_args()
  if args.worker:
    worker(args)
    return
  sides = chosen_sides(args)
  if args.peer_allocator == 'ours':
    from lra_luna.training import host_memory  # pylint: disable=g-import-not-at-top
    host_memory.one_heap_for_every_thread()  # In every worker's environment, as run_lra.py.
  with tempfile.TemporaryDirectory() as fairseq_dir:
    if 'authors_luna16' in sides:
      problem = fairseq_apollo_problem(pathlib.Path(args.fairseq_apollo))
      if problem:
        print(problem, file=sys.stderr)
        sides.remove('authors_luna16')
      else:
        fairseq_stub(pathlib.Path(args.fairseq_apollo), pathlib.Path(fairseq_dir))
    points = measure_points(args, sides, fairseq_dir)
  write_outputs(args, points)


if __name__ == '__main__':
  main()
