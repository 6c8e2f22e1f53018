"""Trains and evaluates one LRA model.

  python run_lra.py --config configs/listops.py:luna16,quick --workdir runs/listops_quick
Any config field can be overridden: --config.seed=3 --config.model.head=mean_p
--config.data_dir=/data/lra. Rerunning the same command on the same workdir resumes.
"""

import json
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from lra_luna import config_lib
from lra_luna.training import train

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'configs/<task>.py:<model>[,quick]',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Run folder: checkpoints, metrics, results.json.')
flags.DEFINE_bool('overwrite', False, 'Delete a previous run with another config in --workdir.')
flags.mark_flags_as_required(['config', 'workdir'])


def parse_flags(argv):
  """absl's flag parsing, with a bad --config or --config.<key> answered in one line."""
  argv = config_lib.with_resolved_config(argv)  # configs/<task>.py from any folder
  spec, overrides = config_lib.config_flags_of(argv)
  if spec:
    try:
      config_lib.load_config(spec, overrides)
    except ValueError as e:
      sys.exit(f'error: {e}')
  return FLAGS(argv)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO; --verbosity=0 shows it.
  train.maybe_initialize_distributed()
  try:
    results = train.train_and_evaluate(FLAGS.config, FLAGS.workdir, overwrite=FLAGS.overwrite)
  except (ValueError, train.TrainingError) as e:
    # Bad input gets one clear message, not a traceback.
    sys.exit(f'error: {e}')
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
