"""No run trains on data the user did not mean, and bad input gets one clear line (issue 12).

Through the command line where the user meets it: a data root that is the unpacked release's
outer folder, truncation, unknown config keys and models, a data root or workdir that is no
folder, non-UTF-8 files, a failed start in a workdir; and through the loaders: stale arrays
behind an imported (linked) release, generated sets that do not match their config.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from lra_luna.datasets import base
from lra_luna.datasets import listops
from lra_luna.datasets import pathfinder
from lra_luna.datasets import pathfinder_generator
import test_train  # run_cli's environment
import tiny  # the shared tiny run (tests/tiny.py)

REPO = pathlib.Path(__file__).resolve().parents[1]
SHORT = '( ( ( [MAX 2 ) 9 ) ] )\t9\n'  # a release-format row of 4 tokens


def long_row(value: int) -> str:
  """[MAX [SM 1 ] ... value ]: 3 * 13 + 3 = 42 tokens (more than TINY's max_length 30)."""
  return '( [MAX ' + ' '.join(['[SM 1 ]'] * 13) + f' {value} ] )\t{max(1, value)}\n'


def write_listops_release(root: pathlib.Path, rows_per_file: str) -> pathlib.Path:
  folder = root / 'listops-1000'
  folder.mkdir(parents=True)
  for name in listops.SPLIT_FILES.values():
    (folder / name).write_text('Source\tTarget\n' + rows_per_file, encoding='utf-8')
  return folder


def run_cli(data_dir, workdir, config='listops.py:luna16,quick', extra=(), **overrides):
  args = test_train.cli_args(data_dir, workdir, **overrides)
  args[args.index('--config') + 1] = f'{REPO}/configs/{config}'
  return subprocess.run([*args, *extra], env=test_train.run_env(), capture_output=True,
                        text=True, timeout=600)


def assert_one_line_error(proc, *fragments):
  assert proc.returncode != 0, proc.stdout[-2000:]
  assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1, proc.stderr[-3000:]
  for fragment in fragments:
    assert fragment in errors[0], errors[0]
  return errors[0]


def files_under(folder: pathlib.Path) -> list:
  return sorted(str(p.relative_to(folder)) for p in folder.rglob('*'))


# ----------------------------------------------------------------------------------------------
# Wrong data: a release's outer folder, truncation, a failed start that blocks the rerun.
# ----------------------------------------------------------------------------------------------
def test_outer_release_folder_is_refused_then_the_inner_one_trains_with_its_source(tmp_path):
  outer = tmp_path / 'download' / 'lra_release'
  inner = outer / 'lra_release'
  rows = SHORT + long_row(3) + SHORT + long_row(4)
  write_listops_release(inner, rows)
  before = files_under(outer)
  workdir = tmp_path / 'run'
  # The full config (data_source 'auto') and the quick one ('generated') would have generated
  # synthetic data inside the release, under its own names, and trained on it.
  for config in ('listops.py:luna16', 'listops.py:luna16,quick'):
    proc = run_cli(outer, workdir, config=config)
    assert_one_line_error(proc, 'not generating synthetic data',
                          f'Found {inner / "listops-1000"}', f'--config.data_dir at {inner}')
  assert files_under(outer) == before
  assert not (workdir / 'config.json').exists()  # a failed start leaves no config behind

  # The inner folder holds the release: half of its examples are longer than max_length 30.
  proc = run_cli(inner, workdir, config='listops.py:luna16', num_train_steps=2)
  assert_one_line_error(proc, '2 of 4 train examples (50.0%)', 'config.max_length = 30',
                        'max_truncated_fraction')
  # Allowed explicitly, the corrected rerun starts in the same workdir and reports the cut.
  proc = run_cli(inner, workdir, config='listops.py:luna16', num_train_steps=2,
                 max_truncated_fraction=1.0)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'cut to max_length 30: train 2 of 4' in proc.stdout
  data = json.loads((workdir / 'results.json').read_text())['data']
  assert data['source'] == 'release'
  assert data['path'] == str((inner / 'listops-1000').resolve())
  assert data['truncated'] == {'train': 2, 'validation': 2, 'test': 2}
  assert data['examples'] == {'train': 4, 'validation': 4, 'test': 4}


def test_release_source_never_falls_back_to_generated(tmp_path):
  proc = run_cli(tmp_path / 'empty', tmp_path / 'run', data_source='release')
  assert_one_line_error(proc, 'ListOps release files', 'data/import_lra_release.py',
                        '--config.data_source=generated')
  assert not (tmp_path / 'empty').exists()


def test_non_utf8_listops_file_names_file_and_line(tmp_path):
  folder = write_listops_release(tmp_path, SHORT * 3)
  path = folder / 'basic_train.tsv'
  path.write_bytes(path.read_bytes().replace(b'[MAX 2 ) 9', b'[MAX 2 ) \xff', 1))  # line 2
  proc = run_cli(tmp_path, tmp_path / 'run', data_source='release')
  assert_one_line_error(proc, f'{path}, line 2: not UTF-8')


# ----------------------------------------------------------------------------------------------
# Config keys and models, data roots and workdirs that are not folders.
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('flag, fragments', [
    ('--config.batchsize=3', ('config.batchsize is no config field',
                              'Did you mean config.batch_size')),
    ('--config.model.dmi=3', ('config.model.dmi is no config field', 'config.model.dim')),
    ('--config.nope=1', ('config.nope is no config field', 'The fields of config are:',
                         'max_truncated_fraction')),
    ('--config.model.dim=abc', ('--config.model.dim=abc', 'invalid literal for int()')),
    ('--config.data_source=tfds', ("config.data_source = 'tfds' is not valid",
                                   "['auto', 'release', 'generated']")),
])
def test_bad_config_flags_get_one_line(tmp_path, flag, fragments):
  proc = run_cli(tmp_path / 'data', tmp_path / 'run', extra=[flag])
  assert_one_line_error(proc, *fragments)
  assert not (tmp_path / 'data').exists()


def test_a_misspelt_config_key_is_answered_before_jax_loads(tmp_path):
  """The config is read before the training libraries load (JAX: seconds), so its mistakes are
  answered at once."""
  args = [*test_train.cli_args(tmp_path / 'data', tmp_path / 'run')[1:], '--config.batchsize=3']
  proc, loaded = tiny.libraries_loaded(
      f"import runpy, sys; sys.argv = {args!r}; runpy.run_path(sys.argv[0], run_name='__main__')",
      env=test_train.run_env(), timeout=600)
  assert_one_line_error(proc, 'config.batchsize is no config field')
  assert loaded == [], loaded


def test_unknown_model_and_config_file_get_one_line(tmp_path):
  proc = run_cli(tmp_path, tmp_path / 'run', config='listops.py:lunax,quick')
  assert_one_line_error(proc, "Unknown model 'lunax'", 'luna16')
  proc = run_cli(tmp_path, tmp_path / 'run', config='listopz.py:luna16')
  assert_one_line_error(proc, 'listopz.py not found', 'configs/listops.py')


def test_missing_plugin_file_gets_one_line(tmp_path):
  """An OSError our code raises with its own message is shown as it is, before any data."""
  proc = run_cli(tmp_path / 'data', tmp_path / 'run', config='listops.py:transformer,quick',
                 **{'model.attention': 'absent.py:MyAttention'})
  error = assert_one_line_error(proc, "Attention plug-in 'absent.py:MyAttention'", 'no file')
  assert not error.startswith('error: :'), error
  assert not (tmp_path / 'data').exists()


def test_data_root_or_workdir_that_is_a_file(tmp_path):
  not_a_folder = tmp_path / 'file'
  not_a_folder.write_text('')
  proc = run_cli(not_a_folder, tmp_path / 'run')
  assert_one_line_error(proc, f'The data root {not_a_folder}', 'is a file, not a folder')
  proc = run_cli(tmp_path / 'data', not_a_folder)
  assert_one_line_error(proc, f'--workdir {not_a_folder} is a file')


def read_only_root() -> pathlib.Path | None:
  """A folder no process may create entries in, even as root (sysfs is read-only)."""
  probe = pathlib.Path('/sys/lra_luna_probe')
  try:
    probe.mkdir()
  except OSError:
    return probe
  probe.rmdir()
  return None


def test_unwritable_data_root_names_the_folder(tmp_path):
  root = read_only_root()
  if root is None:
    pytest.skip('no read-only folder on this machine')
  proc = run_cli(root, tmp_path / 'run')
  assert_one_line_error(proc, f'Cannot create {root / "listops-quick"}', '--config.data_dir')


# ----------------------------------------------------------------------------------------------
# Loaders: stale arrays behind links, generated sets that do not match the config.
# ----------------------------------------------------------------------------------------------
def load_module(path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(path.stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_imported_release_changes_are_seen_through_its_links(tmp_path):
  """The import links imgs/ and metadata/ as folders; the cache must see what is behind them."""
  inner = tmp_path / 'download' / 'lra_release' / 'lra_release'
  folder = pathfinder_generator.generate_pathfinder(
      inner, resolution=32, difficulty='hard', num_images=20, images_per_batch=10,
      num_workers=1, progress=False)
  (folder / pathfinder_generator.RECORD_FILE).unlink()  # as the release: no record of ours
  root = tmp_path / 'store'
  importer = load_module(REPO / 'data' / 'import_lra_release.py')
  importer.import_release(tmp_path / 'download' / 'lra_release', root, tasks=['pathfinder'])
  assert (root / 'pathfinder32' / 'curv_contour_length_14' / 'metadata').is_symlink()
  config = load_module(REPO / 'configs' / 'pathfinder.py').get_config('luna16')
  config.data_dir = str(root)
  first = pathfinder.load_pathfinder(config)
  assert first.source['source'] == 'release'
  # Flip every label in the release itself (same sizes: only the mtimes tell).
  for path in (folder / 'metadata').glob('*.npy'):
    lines = [line.split() for line in path.read_text().splitlines()]
    for fields in lines:
      fields[3] = str(1 - int(fields[3]))
    path.write_text('\n'.join(' '.join(fields) for fields in lines) + '\n')
  second = pathfinder.load_pathfinder(config)
  for split in ('train', 'validation', 'test'):
    np.testing.assert_array_equal(second.splits[split]['targets'],
                                  1 - first.splits[split]['targets'])


def quick_listops(root, **overrides):
  return tiny.config(root, **overrides)


def test_generated_listops_must_match_its_config(tmp_path):
  listops.load_listops(quick_listops(tmp_path))
  with pytest.raises(base.DataError, match='was generated with .* but the config asks for'):
    listops.load_listops(quick_listops(tmp_path, **{'listops.seed': 1}))
  # Files without our marker (made elsewhere, or by a version before markers) are not
  # reported as generated.
  (tmp_path / 'listops-quick' / base.GENERATED_MARKER).unlink()
  with pytest.raises(base.DataError, match='did not mark as its own'):
    listops.load_listops(quick_listops(tmp_path))


def test_generation_never_uses_a_release_folder_name(tmp_path):
  with pytest.raises(base.DataError, match='listops-1000 is a folder name of the LRA release'):
    listops.load_listops(quick_listops(tmp_path, dataset_name='listops-1000'))
  assert not (tmp_path / 'listops-1000').exists()
  config = load_module(REPO / 'configs' / 'pathfinder.py').get_config('luna16,quick')
  config.update(data_dir=str(tmp_path), dataset_name='pathfinder32')
  with pytest.raises(base.DataError, match='pathfinder32 is a folder name of the LRA release'):
    pathfinder.load_pathfinder(config)
  config.update(dataset_name='')
  with pytest.raises(base.DataError, match='config.dataset_name is empty'):
    pathfinder.load_pathfinder(config)
  assert not (tmp_path / 'pathfinder32').exists()


def test_generator_scripts_refuse_a_release(tmp_path):
  (tmp_path / 'lra_release' / 'lra_release').mkdir(parents=True)
  env = dict(os.environ, LRA_DATA_DIR=str(tmp_path / 'lra_release'))
  for script, args in (('generate_listops.py', ['--num_train', '2']),
                       ('generate_pathfinder.py', ['--num_images', '2'])):
    proc = subprocess.run([sys.executable, str(REPO / 'data' / script), *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc, 'not generating synthetic data')
  assert files_under(tmp_path) == ['lra_release', 'lra_release/lra_release']
