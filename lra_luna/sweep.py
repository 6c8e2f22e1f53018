"""Trains configs over several seeds (and heads): one workdir per (task, model, head, seed).

  python -m lra_luna.sweep --config configs/listops.py:luna16,quick [--config ...] \\
      --seeds 0,1,2,3,4 [--heads cls,mean_p] --mode sequential|vmap --sweep_dir runs/sweep \\
      [--override key=value ...]
  python -m lra_luna.report runs/sweep

Layout: SWEEP_DIR/<task>/<model>/<head>/seed<k>/, each a run_lra workdir (checkpoints,
metrics, results.json); <model> is the preset, or the class name of an attention plug-in
(`--override model.attention=path/to/file.py:Class` on a transformer config, lra_luna/models/plugins.py). --override key=value sets a config field as run_lra's
--config.key=value does (seeds and heads come from --seeds and --heads). Resumable: a seed whose
workdir has results.json is skipped; an unfinished one resumes from its checkpoints.

Modes:
- sequential: one `python run_lra.py` subprocess per seed, its output in <workdir>/sweep.log;
  a failing seed does not stop the others.
- vmap: the seeds of one (config, head) train in one program (`train.train_seeds`). Seeds resume
  together only from the same step, so unfinished seeds are grouped by their latest checkpoint.
Failed seeds are listed at the end with their logs, and the exit status is then 1.
"""

from lra_luna.training import host_memory

if __name__ == '__main__':
  host_memory.one_heap_for_every_thread()  # Before numpy and JAX start their threads.

import dataclasses  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

from absl import logging  # noqa: E402

from lra_luna import cli  # noqa: E402
from lra_luna import console  # noqa: E402
from lra_luna import learning_curves  # noqa: E402
from lra_luna import config_lib  # noqa: E402
from lra_luna.models import model_config  # noqa: E402
from lra_luna.training import run_folder  # noqa: E402
from lra_luna.training import signals  # noqa: E402
import lra_luna  # noqa: E402

# run_lra: the checkout's run_lra.py, else the module `pip install .` installs beside lra_luna.
RUN_LRA = ([str(lra_luna.CHECKOUT / 'run_lra.py')] if lra_luna.CHECKOUT
           else ['-m', 'run_lra'])


@dataclasses.dataclass(frozen=True)
class Run:
  """One seed of one (config, head)."""
  spec: str                 # config file and argument, as run_lra's --config takes it
  overrides: tuple          # user overrides as run_lra flags: ('--config.key=value', ...)
  head: str
  seed: int
  workdir: pathlib.Path
  config: object            # the resulting ConfigDict

  @property
  def flags(self) -> tuple:
    return run_flags(self.overrides, self.head, self.seed)

  @property
  def log(self) -> pathlib.Path:
    return self.workdir / run_folder.SWEEP_LOG_FILE

  @property
  def name(self) -> str:
    return f'{self.config.task}/{config_lib.model_label(self.config)}/{self.head}/seed{self.seed}'


def run_flags(overrides, head: str, seed: int) -> tuple:
  """run_lra's --config.* flags of one run: the user's overrides, then its head and seed."""
  return (*overrides, f'--config.model.head={head}', f'--config.seed={seed}')


def plan(specs, seeds, heads, overrides, sweep_dir) -> list[Run]:
  """Every (config, head, seed) run, each config built and validated up front. A head that one
  config's model cannot pool is skipped for that config with its reason; a head that none can
  pool, or a plan without runs, is a ValueError (nothing is trained)."""
  for item in overrides:
    key = item.split('=', 1)[0]
    if '=' not in item or key in ('seed', 'model.head'):
      raise ValueError(f'--override {item!r}: expected key=value with a key other than seed and '
                       'model.head (use --seeds and --heads).')
  unknown = [head for head in heads if head not in model_config.HEADS]
  if unknown:
    raise ValueError(f'--heads: {unknown[0]!r} is unknown; valid choices: '
                     f'{", ".join(model_config.HEADS)}.')
  overrides = tuple(f'--config.{item}' for item in overrides)
  runs, pooled, skipped = [], set(), []
  for spec in specs:
    base = config_lib.load_config(spec, overrides)
    can_pool = model_config.heads_of(base.model.attention)
    for head in heads or [base.model.head]:
      if head not in can_pool:
        skipped.append(f'{spec}: skipping head {head}: model {config_lib.model_label(base)} '
                       f'pools {", ".join(can_pool)} only ({head} needs a Luna model).')
        continue
      pooled.add(head)
      for seed in seeds:
        config = config_lib.load_config(spec, run_flags(overrides, head, seed))
        config_lib.validate(config)
        workdir = run_folder.sweep_run_dir(sweep_dir, config.task,
                                           config_lib.model_label(config), head, seed)
        same = next((run for run in runs if run.workdir == workdir), None)
        if same is not None:
          raise ValueError(f'--config {spec} and --config {same.spec} make the same runs '
                           f'({workdir}); give each config once.')
        runs.append(Run(spec, overrides, head, seed, workdir, config))
  check_heads_pooled(heads, pooled, skipped)
  return runs


def check_heads_pooled(heads, pooled: set, skipped: list) -> None:
  """Prints the skipped (config, head) pairs when another config pools that head; ValueError
  when a requested head runs for no config (a sweep must not run less than asked in silence)."""
  unpooled = [head for head in heads if head not in pooled]
  if unpooled:
    raise ValueError(f'--heads {unpooled[0]}: no --config can pool it: {skipped[0]}')
  for line in skipped:
    print(line, flush=True)


def finished(run: Run) -> bool:
  """Whether run's workdir holds its results; ValueError if they came from another config."""
  if not (run.workdir / run_folder.RESULTS_FILE).exists():
    return False
  saved_path = run.workdir / run_folder.CONFIG_FILE
  if saved_path.exists():
    differing = config_lib.config_differences(json.loads(saved_path.read_text()), run.config)
    if differing:
      raise ValueError(f'{run.workdir} holds results of another config (fields {differing} '
                       'differ); delete it or use another --sweep_dir.')
  return True


def latest_step(workdir: pathlib.Path) -> int:
  """The step of the latest checkpoint, 0 if none."""
  return run_folder.saved_step(workdir, 'latest') or 0


# ----------------------------------------------------------------------------------------------
# Running.
# ----------------------------------------------------------------------------------------------
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_command(command: list, log_path: pathlib.Path) -> int:
  """Runs command with its output appended to log_path; returns its exit status. The run has a
  session of its own, and SIGINT or SIGTERM to the sweep is passed on to it once each (Ctrl-C
  reaches it once, not twice, which would stop it unsaved); a run stopped so stops the sweep
  (signals.StopRequested) after it has saved."""
  with log_path.open('a') as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
  previous = {s: signal.signal(s, lambda signum, _: process.send_signal(signum))
              for s in STOP_SIGNALS}
  try:
    status = process.wait()
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  if status in [128 + s for s in STOP_SIGNALS]:
    raise signals.StopRequested(signal.Signals(status - 128).name)
  return status


def run_sequential(runs: list[Run]) -> list[tuple]:
  """One run_lra subprocess per run; returns (run, reason) of the failed ones. A run stopped by
  a signal stops the sweep: signals.Interrupted with that run's own line."""
  failures = []
  for i, run in enumerate(runs, 1):
    run.workdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, *RUN_LRA, f'--config={run.spec}',
               f'--workdir={run.workdir}', *run.flags]
    print(f'[{i}/{len(runs)}] {run.name}: running (log {run.log})', flush=True)
    start = time.time()
    try:
      status = run_command(command, run.log)
    except signals.StopRequested as e:
      lines = run.log.read_text().strip().splitlines()
      said = lines[-1].partition('; resume with')[0] if lines else 'no line in its log'
      raise signals.Interrupted(e.signal_name, f'in run {run.name}',
                              f'which said: "{said}"') from None
    if status:
      failures.append((run, f'exit status {status}'))
    print(f'[{i}/{len(runs)}] {run.name}: {"FAILED" if status else "done"} in '
          f'{time.time() - start:.0f} s', flush=True)
  return failures


def run_vmapped(runs: list[Run]) -> list[tuple]:
  """train.train_seeds per (config, head, resume step); returns (run, reason) of failed ones."""
  # Only this mode trains in the sweep's own process: a sequential sweep never loads JAX.
  from lra_luna.training import train  # pylint: disable=import-outside-toplevel
  groups = {}
  for run in runs:
    key = (run.spec, run.overrides, run.head, latest_step(run.workdir))
    groups.setdefault(key, []).append(run)
  failures = []
  for group in groups.values():
    seeds = [run.seed for run in group]
    print(f'{group[0].name.rsplit("/", 1)[0]}: seeds {seeds} in one program', flush=True)
    try:
      train.train_seeds(group[0].config, seeds, [run.workdir for run in group])
    except Exception as e:  # One group's failure must not stop the others.
      for run in group:
        run.workdir.mkdir(parents=True, exist_ok=True)
        with run.log.open('a') as log:
          log.write(traceback.format_exc())
        failures.append((run, f'{type(e).__name__}: {e}'))
  return failures


def stop_at_once(signum, frame):
  del frame
  raise signals.StopRequested(signal.Signals(signum).name)


def write_learning_curves(runs: list[Run]) -> None:
  """learning_curves.png of each (task, model, head) folder of the sweep, its seeds overlaid
  (the runs that have metrics); a failure to plot is a warning."""
  groups = {}
  for run in runs:
    groups.setdefault(run.workdir.parent, []).append(run)
  for folder, group in groups.items():
    if not any((run.workdir / run_folder.METRICS_FILE).exists() for run in group):
      continue
    path = folder / run_folder.LEARNING_CURVES_FILE
    try:
      learning_curves.plot([run.workdir for run in group], path,
                           title=group[0].name.rsplit('/', 1)[0],
                           labels=[f'seed {run.seed}' for run in group])
    except Exception as e:  # pylint: disable=broad-except  (a plot never costs the sweep)
      console.say(f'warning: {path} not written: {type(e).__name__}: {e}', err=True)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.sweep', description=__doc__)
  parser.add_argument('--config', action='append', required=True,
                      help='configs/<task>.py:<model>[,quick]; repeat for several')
  parser.add_argument('--seeds', type=cli.int_list, default='0,1,2,3,4',
                      help='comma-separated training seeds')
  parser.add_argument('--heads', type=cli.choice_list(model_config.HEADS), default=[],
                      help="comma-separated heads (cls, mean, mean_p; mean_p for Luna models "
                      "only); default: the config's")
  parser.add_argument('--mode', choices=('sequential', 'vmap'), default='sequential',
                      help="sequential: a process per seed; vmap: a config's seeds in one program")
  parser.add_argument('--sweep_dir', required=True,
                      help='folder of the runs: SWEEP_DIR/<task>/<model>/<head>/seed<k>/')
  parser.add_argument('--override', action='extend', nargs='+', default=[],
                      metavar='KEY=VALUE', help='config field overrides, e.g. num_train_steps=20')
  args = parser.parse_args(argv)
  # Between runs a signal stops where the sweep is (signals.StopRequested); restored at the end.
  previous = {s: signal.signal(s, stop_at_once) for s in STOP_SIGNALS}
  try:
    return sweep(args, argv)
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


def sweep(args, argv) -> int:
  """The sweep of parsed arguments: plan, skip the finished runs, run the others, curves."""
  try:
    runs = plan(args.config, args.seeds, args.heads, args.override, args.sweep_dir)
    todo = [run for run in runs if not finished(run)]
    for run in runs:
      if run not in todo:
        results = run.workdir / run_folder.RESULTS_FILE
        console.say(f'{run.name}: nothing to do: {run.workdir} finished '
                    f'{run.config.num_train_steps} steps; results in {results}')
    console.say(f'{len(runs)} runs: {len(runs) - len(todo)} finished before, {len(todo)} to run.')
    if args.mode == 'vmap':
      logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every save at INFO.
      failures = run_vmapped(todo)
    else:
      failures = run_sequential(todo)
  except ValueError as e:  # Bad arguments: one line, no traceback.
    print(f'error: {e}', file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:  # SIGINT / SIGTERM: one line; the runs saved what they did.
    name = getattr(e, 'signal_name', 'SIGINT')
    said = str(e) if isinstance(e, signals.Interrupted) else f'{name}: stopped between runs'
    resume = shlex.join(['python', '-m', 'lra_luna.sweep', *sys.argv[1:]] if argv is None
                        else ['python', '-m', 'lra_luna.sweep', *argv])
    print(f'{said}; resume the sweep with: {resume}', file=sys.stderr)
    return 128 + getattr(signal, name)

  write_learning_curves(runs)
  if failures:
    print(f'{len(failures)} of {len(todo)} runs failed:', file=sys.stderr)
    for run, reason in failures:
      print(f'  {run.name}: {reason}; log {run.log}', file=sys.stderr)
    return 1
  print(f'All {len(runs)} runs finished. Report: python -m lra_luna.report {args.sweep_dir}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
