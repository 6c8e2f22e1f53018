"""The context probe (lra_luna/probe.py): the windows it shows, that a hidden token is exactly
padding to the model, and the probe of the shared tiny run (tests/tiny.py) with its files and
one-line errors."""

import json
import pathlib
import sys

import jax
import numpy as np
import pytest

from lra_luna import probe
from lra_luna.models import classifier
from lra_luna.report import figures
from lra_luna.training import train

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests'))
import tiny  # noqa: E402  pylint: disable=wrong-import-position


# ----------------------------------------------------------------------------------------------
# Windows.


def test_default_windows_grow_by_four_up_to_the_full_length():
  assert probe.default_windows(2000) == [16, 64, 256, 1024, 2000]
  assert probe.default_windows(60) == [16, 60]
  assert probe.default_windows(10) == [10]


@pytest.mark.parametrize('windows, message', [([0], 'shows the model nothing'),
                                              ([16, 61], "beyond this run's max_length 60")])
def test_bad_windows_are_refused_in_one_line(windows, message):
  with pytest.raises(ValueError, match=message) as error:
    probe.check_windows(windows, 60)
  assert '\n' not in str(error.value)


def test_windows_sit_at_the_start_the_end_or_a_seeded_random_place():
  inputs = np.zeros((3, 12), np.int32)
  for row, length in enumerate((10, 3, 12)):
    inputs[row, :length] = 5
  see = lambda placement, seed=0: probe.visible_tokens(
      inputs, 4, placement, np.random.default_rng(seed), full_length=False)
  np.testing.assert_array_equal(see('start')[0], np.arange(12) < 4)
  np.testing.assert_array_equal(see('end')[0], (np.arange(12) >= 6) & (np.arange(12) < 10))
  np.testing.assert_array_equal(see('start')[1], np.arange(12) < 3)  # shorter: all of it
  np.testing.assert_array_equal(see('end')[1], np.arange(12) < 3)
  random = see('random')
  assert np.all(random.sum(axis=1) == [4, 3, 4])
  for row in random:  # one contiguous run
    assert np.count_nonzero(np.diff(row.astype(int)) == 1) <= 1
  np.testing.assert_array_equal(random, see('random'))
  assert any(not np.array_equal(see('random', s), random) for s in range(1, 5))


def test_pixel_windows_are_whole_rows_in_raster_order():
  inputs = np.zeros((2, 16), np.uint8)  # a 4 x 4 image; 0 is a black pixel, not padding
  visible = probe.visible_tokens(inputs, 5, 'end', np.random.default_rng(0), full_length=True,
                                 unit=4)
  np.testing.assert_array_equal(visible[0], np.arange(16) >= 8)  # 5 tokens: two whole rows


def test_retrieval_windows_both_documents():
  config = tiny.config('/nonexistent', 'transformer')
  config.task = 'retrieval'
  split = {'inputs1': np.ones((2, 30), np.int32), 'inputs2': np.ones((2, 30), np.int32),
           'targets': np.zeros(2, np.int32)}
  arrays = probe.windowed_split(split, config, 8, 'random', 0)
  assert arrays['visible1'].sum() == arrays['visible2'].sum() == 16


@pytest.mark.parametrize('model_name', ['transformer', 'luna16', 's4d', 'mega'])
def test_hidden_tokens_are_exactly_padding(model_name):
  model = classifier.build_model(tiny.model_config(model_name), 0)
  ids = np.asarray(jax.random.randint(jax.random.key(0), (2, 30), 1, 11))
  visible = np.arange(30)[None, :] < np.array([[30], [17]])
  padded = np.where(visible, ids, 0)
  np.testing.assert_allclose(model({'inputs': ids, 'visible': visible}),
                             model({'inputs': padded}), atol=1e-5)
  np.testing.assert_array_equal(model({'inputs': ids, 'visible': np.ones((2, 30), bool)}),
                                model({'inputs': ids}))


# ----------------------------------------------------------------------------------------------
# The tiny run, probed.


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp('probe')
  config = tiny.config(root / 'data', 'transformer')
  results = train.train_and_evaluate(config, root / 'sweep' / 'listops' / 'transformer' / 'cls'
                                     / 'seed0')
  return root, results


def test_probe_writes_its_files_and_the_full_window_is_the_full_input(run):
  root, results = run
  workdir = root / 'sweep' / 'listops' / 'transformer' / 'cls' / 'seed0'
  found = probe.probe_run(workdir, [4, 16, 30])
  assert found['full_accuracy'] == results['best']['test_accuracy']
  for placement in probe.PLACEMENTS:
    assert found['accuracy'][placement][-1] == found['full_accuracy']
  saved = json.loads((workdir / figures.PROBE_FILE).read_text())
  assert saved == found and (workdir / figures.PROBE_FIGURE).stat().st_size > 0
  assert 0 < found['majority_rate'] < 1 and found['test_examples'] == 64


def test_a_sweep_folder_gets_one_figure_per_task(run, capsys):
  root, _ = run
  assert probe.main([str(root / 'sweep'), '--windows', '8,30']) == 0
  assert (root / 'sweep' / 'report' / 'probe_listops.png').is_file()
  assert 'probe_listops.png' in capsys.readouterr().out


@pytest.mark.parametrize('argv, message', [
    (['--windows', '0'], 'shows the model nothing'),
    (['--windows', '16,31'], "beyond this run's max_length 30"),
])
def test_bad_input_is_one_line(run, capsys, argv, message):
  root, _ = run
  assert probe.main([str(root / 'sweep'), *argv]) == 1
  lines = capsys.readouterr().err.strip().splitlines()  # 'probing <run>' lines, then the error
  assert lines[-1].startswith('error: ') and message in lines[-1]
  assert all(line.startswith('probing ') for line in lines[:-1])


def test_a_folder_without_a_finished_run_is_one_line(tmp_path, capsys):
  (tmp_path / 'empty').mkdir()
  assert probe.main([str(tmp_path / 'empty')]) == 1
  error = capsys.readouterr().err
  assert 'holds no finished run' in error and len(error.strip().splitlines()) == 1
