"""Trains and evaluates one LRA model.

  python run_lra.py --config configs/listops.py:luna16,quick --workdir runs/listops_quick
Any config field can be overridden: --config.seed=3 --config.model.head=mean_p
--config.data_dir=/data/lra. Rerunning the same command on the same workdir resumes.
"""

import json
import shlex
import signal
import sys

from absl import app
from absl import flags
from absl import logging

from lra_luna import config_lib
from lra_luna.training import run_folder
from lra_luna.training import steps
from lra_luna.training import train

FLAGS = flags.FLAGS
flags.DEFINE_string('config', None, 'configs/<task>.py:<words>: a model (luna16, transformer, '
                    '...) and variant words (quick); --config.<key>=<value> sets any field.')
flags.DEFINE_string('workdir', None, 'Run folder: checkpoints, metrics, results.json.')
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
  for name in ('config', 'workdir'):
    if FLAGS[name].value is None:
      sys.exit(f'error: --{name} is required: python run_lra.py --config '
               'configs/<task>.py:<words> --workdir <run folder>.')
  try:
    CONFIG = config_lib.load_config(spec, overrides)
  except ValueError as e:
    sys.exit(f'error: {e}')
  return remaining


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO; --verbosity=0 shows it.
  steps.maybe_initialize_distributed()
  try:
    results = train.train_and_evaluate(CONFIG, FLAGS.workdir, overwrite=FLAGS.overwrite)
  except (ValueError, run_folder.TrainingError) as e:
    # Bad input gets one clear message, not a traceback.
    sys.exit(f'error: {e}')
  except train.Interrupted as e:  # SIGINT / SIGTERM: saved, one line on how to go on.
    saved = (f'checkpoint saved at step {e.saved_step}' if e.saved_step is not None
             else 'no checkpoint (no step finished)')
    print(f'{e.signal_name}: stopped at step {e.step} of {CONFIG.num_train_steps}, {saved}; '
          f'resume with: python {shlex.join(sys.argv)}', file=sys.stderr)
    sys.exit(128 + getattr(signal, e.signal_name))
  except KeyboardInterrupt:  # Before training started (data, compile): nothing to save.
    print('SIGINT: stopped before training started; nothing saved. Rerun the same command to '
          'start again.', file=sys.stderr)
    sys.exit(128 + signal.SIGINT)
  except OSError as e:
    if FLAGS.verbosity >= 1:
      raise
    if e.filename is None:  # raised by our code with its own message (e.g. a missing plug-in)
      sys.exit(f'error: {e}')
    # A file the readers did not expect to fail: name it and why.
    sys.exit(f'error: {e.filename}: {e.strerror or e} ({type(e).__name__}); check that path '
             f'(--verbosity=1 shows the traceback).')
  print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
