"""The package from any folder: pyproject.toml ships every package and the task configs, and
configs/<task>.py is found from any current directory (run_lra.py, the tools)."""

import pathlib
import subprocess
import sys
import tomllib

import pytest

import lra_luna
from lra_luna import config_lib

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_pyproject_ships_every_package_the_configs_and_run_lra():
  project = tomllib.loads((REPO / 'pyproject.toml').read_text())['tool']['setuptools']
  folders = {'.'.join(p.parent.relative_to(REPO).parts)
             for p in (REPO / 'lra_luna').rglob('*.py') if '__pycache__' not in p.parts}
  assert folders | {'lra_luna.configs'} == set(project['packages'])
  assert project['package-dir'] == {'lra_luna.configs': 'configs'}
  assert project['py-modules'] == ['run_lra']
  assert lra_luna.CHECKOUT == REPO and config_lib.CONFIG_DIR == REPO / 'configs'


def test_task_configs_are_found_from_any_folder(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for spec in ('configs/listops.py:luna16,quick', 'listops.py:luna16,quick'):
    assert config_lib.load_config(spec).num_train_steps == 1500
  # A file of the current folder wins over the shipped one of the same name.
  (tmp_path / 'configs').mkdir()
  (tmp_path / 'configs' / 'listops.py').write_text(
      (REPO / 'configs' / 'listops.py').read_text().replace('c.num_train_steps = 1500',
                                                            'c.num_train_steps = 7'))
  assert config_lib.load_config('configs/listops.py:luna16,quick').num_train_steps == 7
  with pytest.raises(ValueError, match=(
      rf'config file configs/lisops.py not found \(tried {tmp_path}/configs/lisops.py and '
      rf'{REPO}/configs/lisops.py\); the task configs are configs/image.py')):
    config_lib.load_config('configs/lisops.py:luna16')


def test_run_lra_finds_configs_from_another_folder(tmp_path):
  def run_lra(*args):
    done = subprocess.run([sys.executable, str(REPO / 'run_lra.py'), '--workdir',
                           str(tmp_path / 'run'), *args], cwd=tmp_path, capture_output=True,
                          text=True, env={'JAX_PLATFORMS': 'cpu', 'PATH': '/usr/bin:/bin'})
    assert done.returncode == 1
    return done.stderr.strip()

  # The config is found (the misspelt key is what stops it), before any data or training.
  error = run_lra('--config', 'configs/listops.py:luna16,quick', '--config.batchsize=3')
  assert error.startswith('error: config.batchsize is no config field. Did you mean '
                          'config.batch_size') and len(error.splitlines()) == 1
  error = run_lra('--config=configs/lisops.py:luna16')
  assert f'tried {tmp_path}/configs/lisops.py and {REPO}/configs/lisops.py' in error
