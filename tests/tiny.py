"""The one tiny run the training tests start from: the quick ListOps config shrunk to seconds
(400 generated expressions of 4 to 30 tokens, a one-layer width-16 model, 30 steps). Every test
module that trains, sweeps or runs a campaign takes its settings from here, changing only what
it tests (steps, checkpoint spacing), so a change of the tiny run is made once."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
QUICK_LISTOPS = f'{REPO}/configs/listops.py:luna16,quick'

SETTINGS = {
    'listops.num_train': 400, 'listops.num_val': 64, 'listops.num_test': 64,
    'listops.min_length': 4, 'listops.max_length': 30, 'listops.max_depth': 3,
    'listops.max_args': 4, 'max_length': 30, 'batch_size': 8, 'eval_batch_size': 16,
    'num_train_steps': 30, 'warmup_steps': 5, 'eval_every': 10, 'checkpoint_every': 10,
    'log_every': 5, 'model.dim': 16, 'model.num_heads': 2, 'model.num_layers': 1,
    'model.ffn_dim': 32, 'model.classifier_dim': 32, 'model.pack_length': 4,
    'progress_bar': False,
}


def settings(**changes) -> dict:
  """SETTINGS with `changes` ('model__dim' may be written for 'model.dim')."""
  return {**SETTINGS, **{key.replace('__', '.'): value for key, value in changes.items()}}


def config(data_dir, model: str = 'luna16', **changes):
  """The quick ListOps config of `model` with the tiny settings (unlocked, for library calls)."""
  sys.path.insert(0, str(REPO / 'configs'))
  import listops  # pylint: disable=import-outside-toplevel
  c = listops.get_config(f'{model},quick')
  c.data_dir = str(data_dir)
  for key, value in settings(**changes).items():
    section, _, field = key.rpartition('.')
    (c[section] if section else c)[field] = value
  return c


def overrides(**changes) -> list[str]:
  """The tiny settings as sweep / campaign `--override key=value` items."""
  return [f'{key}={value}' for key, value in settings(**changes).items()]


def flags(**changes) -> list[str]:
  """The tiny settings as run_lra.py `--config.key=value` flags."""
  return [f'--config.{item}' for item in overrides(**changes)]
