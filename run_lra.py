"""Trains and evaluates one LRA model.

  python run_lra.py --config configs/listops.py:luna16,quick --workdir runs/listops_quick
  python run_lra.py --config configs/listops.py:luna16 --print_config   # what it would run
Any config field can be overridden: --config.seed=3 --config.model.head=mean_p
--config.data_dir=/data/lra. Rerunning the same command on the same workdir resumes.
The run's first lines say its task, model, protocol, steps and batch, and for a full-size run
its size and a lower bound of its time on this device (a warning above 3 hours); --print_config
times a few real steps where they are cheap, and gives the training time they make.
"""

import os
import shlex
import signal
import sys


def stopped_while_loading(signum, frame):
  """SIGINT / SIGTERM while the libraries load (before main): one line, nothing has run yet."""
  del frame
  sys.stderr.write(f'{signal.Signals(signum).name}: stopped while loading, before anything ran; '
                   f'start again with: python {shlex.join(sys.argv)}\n')
  os._exit(128 + signum)  # pylint: disable=protected-access


if __name__ == '__main__':
  for _signal in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_signal, stopped_while_loading)

from lra_luna.training import host_memory  # noqa: E402  (no numpy, no JAX)

if __name__ == '__main__':
  host_memory.one_heap_for_every_thread()  # Before numpy and JAX start their threads.

import json  # noqa: E402  (after the handlers and the heap: what follows loads for a while)
import pathlib  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from lra_luna import config_lib  # noqa: E402
from lra_luna import run_size  # noqa: E402
from lra_luna.training import run_folder  # noqa: E402
from lra_luna.training import signals  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('config', None, config_lib.config_help())
flags.DEFINE_string('workdir', None, 'Run folder: checkpoints, metrics, results.json.')
flags.DEFINE_bool('print_config', False, "Print the resolved config and the run's size "
                  '(parameters, FLOPs, steps, data) and its training time on this device (a few '
                  'steps timed on a random batch where one step is cheap, else a lower bound), '
                  'and exit without training or reading data; needs no --workdir.')
flags.DEFINE_bool('overwrite', False, 'Delete a previous run with another config in --workdir.')
CONFIG = None  # The config that --config and the --config.<key> flags give (parse_flags).


def parse_flags(argv):
  """absl's flag parsing and the config built once; a mistake is answered in one line."""
  global CONFIG
  rest, spec, overrides = config_lib.split_config_flags(argv)
  try:
    remaining = FLAGS(rest)
  except flags.Error as e:
    sys.exit(f'error: {str(e).strip().splitlines()[0]} (python run_lra.py --help lists the '
             'flags).')
  for name in ('config',) + (() if FLAGS.print_config else ('workdir',)):
    if FLAGS[name].value is None:
      sys.exit(f'error: --{name} is required: python run_lra.py --config '
               'configs/<task>.py:<words> --workdir <run folder>.')
  try:
    CONFIG = config_lib.load_config(spec, overrides)
  except ValueError as e:
    sys.exit(f'error: {e}')
  return remaining


def stop_at_once(signum, frame):
  """Until training's own handlers take over: a signal stops where the program is."""
  del frame
  raise signals.StopRequested(signal.Signals(signum).name)


def print_config() -> None:
  """--print_config: the resolved config as JSON, then what the run is (run_size)."""
  config_lib.validate(CONFIG)
  print(CONFIG.to_json(indent=2, sort_keys=True))
  lines, seconds = run_size.describe(CONFIG, measure=True)
  warning = run_size.long_run_warning(CONFIG, seconds)
  print('\n'.join(lines + ([warning] if warning else [])))


def announce(workdir: str) -> None:
  """The run's first lines (stdout): what it is; for a full-size run its size and time bound,
  and a warning when that bound is long (the steps left, when it resumes)."""
  steps_left = CONFIG.num_train_steps - (run_folder.saved_step(workdir, 'latest') or 0)
  if steps_left <= 0 and (pathlib.Path(workdir) / run_folder.RESULTS_FILE).exists():
    return  # a finished run: training says `nothing to do` as its first line
  print(run_size.opening_line(CONFIG), flush=True)
  if config_lib.shortened_reasons(CONFIG) or steps_left <= 0:
    return
  lines, seconds = run_size.describe(CONFIG, steps_left)
  warning = run_size.long_run_warning(CONFIG, seconds)
  print('\n'.join(lines[1:] + ([warning] if warning else [])), flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO; --verbosity=0 shows it.
  if FLAGS.print_config:
    try:
      return print_config()
    except ValueError as e:
      sys.exit(f'error: {e}')
  resume = f'resume with: python {shlex.join(sys.argv)}'
  try:
    for signum in (signal.SIGINT, signal.SIGTERM):
      signal.signal(signum, stop_at_once)
    config_lib.validate(CONFIG)  # a bad field or plug-in in one line, before the size is built
    # The training libraries load only now (JAX: seconds): a mistake in the flags or the config is
    # answered at once.
    # pylint: disable=import-outside-toplevel
    from lra_luna.training import results as results_lib
    from lra_luna.training import steps
    from lra_luna.training import train
    steps.maybe_initialize_distributed()
    announce(FLAGS.workdir)
    results = train.train_and_evaluate(CONFIG, FLAGS.workdir, overwrite=FLAGS.overwrite)
  except (ValueError, run_folder.TrainingError) as e:
    # Bad input gets one clear message, not a traceback.
    sys.exit(f'error: {e}')
  except signals.Interrupted as e:  # SIGINT / SIGTERM: what ran, what is saved, how to go on.
    print(f'{e}; {resume}', file=sys.stderr)
    sys.exit(128 + getattr(signal, e.signal_name))
  except KeyboardInterrupt as e:  # Outside training's handlers: while starting.
    name = getattr(e, 'signal_name', 'SIGINT')
    latest = run_folder.saved_step(FLAGS.workdir, 'latest')
    saved = 'no checkpoint saved yet' if latest is None else f'latest checkpoint at step {latest}'
    print(f'{name}: stopped while starting, {saved}; {resume}', file=sys.stderr)
    sys.exit(128 + getattr(signal, name))
  except OSError as e:
    if FLAGS.verbosity >= 1:
      raise
    if e.filename is None:  # raised by our code with its own message (e.g. a missing plug-in)
      sys.exit(f'error: {e}')
    # A file the readers did not expect to fail: name it and why.
    sys.exit(f'error: {e.filename}: {e.strerror or e} ({type(e).__name__}); check that path '
             f'(--verbosity=1 shows the traceback).')
  print(json.dumps(results, indent=2, sort_keys=True))
  print(results_lib.closing_line(results))


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
