"""The one tiny run the training tests start from: the quick ListOps config shrunk to seconds
(400 generated expressions of 4 to 30 tokens, a one-layer width-16 model, 30 steps). Every test
module that trains, sweeps or runs a campaign takes its settings from here, changing only what
it tests (steps, checkpoint spacing), so a change of the tiny run is made once."""

import ast
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
QUICK_LISTOPS = f'{REPO}/configs/listops.py:luna16,quick'


def xla_accepts(flag: str) -> bool:
  """Whether this jaxlib's XLA knows `flag`. An unknown flag in XLA_FLAGS aborts the process that
  reads it, so a child process is asked (JAX 0.10's XLA has the emitter flag below, 0.12's not)."""
  child = subprocess.run([sys.executable, '-c', 'import jax; jax.devices()'], capture_output=True,
                         env={**os.environ, 'XLA_FLAGS': flag, 'JAX_PLATFORMS': 'cpu'}, check=False)
  return child.returncode == 0


# Every test process (conftest.py sets it; the subprocess helpers pass it on): LLVM at level 0 and,
# where XLA has them, its CPU loop emitters instead of its MLIR fusion emitters. The suite's time is
# mostly XLA compiling tiny models: the level cuts a compile by about a third, the emitters by half
# again. The programs and their buffers are XLA's own (campaign/memory.py); only the machine code
# differs, and no test times a step. Found once a session: pytest-xdist's workers inherit it.
LOOP_EMITTERS = '--xla_cpu_use_fusion_emitters=false'
XLA_FLAGS = os.environ.setdefault('LRA_TEST_XLA_FLAGS', ' '.join(
    ['--xla_backend_optimization_level=0'] + [LOOP_EMITTERS] * xla_accepts(LOOP_EMITTERS)))


# What the training path loads and the tools that only read, plan or check must not (seconds).
TRAINING_LIBRARIES = ('jax', 'flax', 'optax', 'orbax')


def libraries_loaded(code: str, libraries=TRAINING_LIBRARIES, **run_options):
  """(the process, the sorted `libraries` it had loaded when it exited) of `code` run in a fresh
  Python; a sys.exit in `code` (a one-line error) still gives the list."""
  report = ('import atexit, sys\n'
            f'atexit.register(lambda: print(sorted({{m.split(".")[0] for m in sys.modules}} & '
            f'{set(libraries)!r})))\n')
  proc = subprocess.run([sys.executable, '-c', report + code], capture_output=True, text=True,
                        check=False, **run_options)
  return proc, ast.literal_eval(proc.stdout.strip().splitlines()[-1])


def xla_flags(*extra: str) -> str:
  """XLA_FLAGS of a test's subprocess: the suite's own flags and `extra` (e.g. a device count)."""
  return ' '.join((XLA_FLAGS, *extra))

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


def model_config(model_name: str = 'luna16', **overrides):
  """A tiny ModelConfig of a registry model (width 16, two layers, vocabulary 11, 3 classes,
  length 40, dropout 0.1) with `overrides`: the model tests' one small model."""
  from lra_luna import config_lib  # pylint: disable=import-outside-toplevel
  from lra_luna.models import model_config as model_config_lib  # pylint: disable=import-outside-toplevel
  c = config_lib.set_model(config_lib.base_config(), model_name)
  c.model.update(dim=16, num_heads=2, num_layers=2, ffn_dim=32, classifier_dim=24, dropout=0.1,
                 attention_dropout=0.1, pack_length=4, vocab_size=11, num_classes=3,
                 max_length=40)
  c.model.update(overrides)
  return model_config_lib.ModelConfig.from_config(c.model)
