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


def test_default_windows_come_from_the_inputs_lengths_and_end_at_the_longest():
  lengths = probe.length_summary([4] * 10 + [10] * 20 + [16] * 16 + [60] * 4)
  assert lengths == {'median': 10.0, 'p90': 16.0, 'max': 60, 'inputs': 50}
  # 1/16 .. 1/2 of the median 10 (1, 1, 2, 5), the median, the 90th percentile, the longest
  assert probe.default_windows(lengths) == [1, 2, 5, 10, 16, 60]
  assert probe.default_windows(probe.length_summary([1024] * 3)) == [64, 128, 256, 512, 1024]
  assert probe.default_windows(lengths, relative=True) == [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1]


def test_windows_that_all_reach_the_median_input_get_a_warning_naming_it():
  lengths = probe.length_summary([4] * 10 + [10] * 20 + [16] * 16 + [60] * 4)
  warning = probe.window_warning([16, 60], lengths)
  assert 'the smallest 16' in warning and 'median test input (10 real tokens)' in warning
  assert '--windows 1,2,5,10,16,60' in warning and '\n' not in warning
  assert probe.window_warning([9, 60], lengths) is None
  assert probe.window_warning([0.5, 1], lengths, relative=True) is None


def test_real_lengths_count_tokens_both_documents_and_every_pixel():
  config = tiny.config('/nonexistent', 'transformer')
  inputs = np.zeros((2, 6), np.int32)
  inputs[0, :4], inputs[1, :2] = 3, 3
  np.testing.assert_array_equal(probe.real_lengths({'inputs': inputs}, config), [4, 2])
  config.task = 'retrieval'
  np.testing.assert_array_equal(
      probe.real_lengths({'inputs1': inputs, 'inputs2': inputs[::-1]}, config), [4, 2, 2, 4])
  config.task, config.max_length = 'image', 16
  np.testing.assert_array_equal(probe.real_lengths({'inputs': np.zeros((3, 16))}, config),
                                [16, 16, 16])


@pytest.mark.parametrize('windows, relative, message', [
    ([0], False, 'shows the model nothing'),
    ([16, 61], False, "beyond this run's max_length 60"),
    ([2.5], False, 'no whole number of tokens; give token counts, or add --relative'),
    ([0.5, 1.5], True, '1.5 is no fraction of an input'),
])
def test_bad_windows_are_refused_in_one_line(windows, relative, message):
  with pytest.raises(ValueError, match=message) as error:
    probe.check_windows(windows, 60, relative)
  assert '\n' not in str(error.value)


def test_relative_windows_are_a_fraction_of_each_input_rounded_up():
  inputs = np.zeros((3, 12), np.int32)
  for row, length in enumerate((10, 3, 12)):
    inputs[row, :length] = 5
  for placement in probe.PLACEMENTS:
    visible = probe.visible_tokens(inputs, 0.5, placement, np.random.default_rng(0),
                                   full_length=False, relative=True)
    assert visible.sum(axis=1).tolist() == [5, 2, 6]  # ceil(0.5 x 3) = 2
    assert not np.any(visible & (inputs == 0))
  whole = probe.visible_tokens(inputs, 1.0, 'random', np.random.default_rng(0), full_length=False,
                               relative=True)
  np.testing.assert_array_equal(whole, inputs != 0)


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


@pytest.mark.parametrize('relative, column', [(False, 'window (tokens)'),
                                              (True, 'window (fraction of each input)')])
def test_the_table_names_the_unit_of_every_column(relative, column):
  found = {'task': 'listops', 'model': 's5', 'seed': 0, 'checkpoint': 'best', 'step': 40,
           'test_examples': 8, 'relative': relative, 'windows': [0.5, 1] if relative else [4, 8],
           'input_lengths': {'test': {'median': 6.0, 'p90': 8.0, 'max': 9, 'inputs': 8}},
           'accuracy': {p: [0.25, 0.5] for p in probe.PLACEMENTS}, 'full_accuracy': 0.5,
           'majority_rate': 0.125}
  lines = probe.probe_table(found).splitlines()
  assert lines[2] == (f'| {column} | ' + ' | '.join(f'{p}: accuracy (%)' for p in probe.PLACEMENTS)
                      + ' |')
  assert lines[4].endswith('| 25.0 | 25.0 | 25.0 |') and lines[5].endswith('| 50.0 | 50.0 | 50.0 |')
  assert lines[-1] == 'full input 50.0%, majority class 12.5%'


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
  real = np.sum(np.asarray(tiny_test_inputs(workdir)) != 0, axis=1)
  assert found['input_lengths'] == {'test': {'median': float(np.median(real)),
                                             'p90': float(np.percentile(real, 90)),
                                             'max': int(real.max()), 'inputs': 64}}


def tiny_test_inputs(workdir):
  from lra_luna import datasets, evaluate  # pylint: disable=import-outside-toplevel
  return datasets.load_task(evaluate.load_run_config(workdir)).splits['test']['inputs']


def test_without_windows_the_probe_derives_them_prints_its_table_and_warns_when_flat(run, capsys):
  root, _ = run
  workdir = root / 'sweep' / 'listops' / 'transformer' / 'cls' / 'seed0'
  assert probe.main([str(workdir)]) == 0
  saved = json.loads((workdir / figures.PROBE_FILE).read_text())
  lengths = saved['input_lengths']['test']
  assert saved['windows'] == probe.default_windows(lengths) and saved['warnings'] == []
  assert saved['windows'][-1] == lengths['max'] and min(saved['windows']) < lengths['median']
  out = capsys.readouterr().out.splitlines()
  assert out[1] == f"test inputs: {probe.describe_lengths(lengths)}"
  assert out[2] == ('| window (tokens) | start: accuracy (%) | end: accuracy (%) | '
                    'random: accuracy (%) |')
  rows = out[4:4 + len(saved['windows'])]
  assert [row.split(' | ')[0] for row in rows] == [f'| {w}' for w in saved['windows']]
  assert rows[-1].endswith(' | '.join([f"{100 * saved['full_accuracy']:.1f}"] * 3) + ' |')
  # Windows that all reach the median: the warning, on stderr and in probe.json.
  wide = [int(lengths['median']), lengths['max']]
  assert probe.main([str(workdir), '--windows', ','.join(map(str, wide))]) == 0
  warning = [line for line in capsys.readouterr().err.splitlines() if 'warning' in line]
  assert len(warning) == 1 and f"({lengths['median']:g} real tokens)" in warning[0]
  assert json.loads((workdir / figures.PROBE_FILE).read_text())['warnings'] == [
      warning[0].split(': ', 2)[2]]


def test_relative_windows_end_at_the_full_input(run, capsys):
  root, _ = run
  workdir = root / 'sweep' / 'listops' / 'transformer' / 'cls' / 'seed0'
  assert probe.main([str(workdir), '--relative', '--windows', '0.25,1']) == 0
  saved = json.loads((workdir / figures.PROBE_FILE).read_text())
  assert saved['relative'] and saved['windows'] == [0.25, 1.0]
  for placement in probe.PLACEMENTS:
    assert saved['accuracy'][placement][-1] == saved['full_accuracy']
  assert '| window (fraction of each input) |' in capsys.readouterr().out


def test_a_sweep_folder_gets_one_figure_per_task(run, capsys):
  root, _ = run
  assert probe.main([str(root / 'sweep'), '--windows', '8,30']) == 0
  assert (root / 'sweep' / 'report' / 'probe_listops.png').is_file()
  assert 'probe_listops.png' in capsys.readouterr().out


@pytest.mark.parametrize('argv, message', [
    (['--windows', '16,31'], "beyond this run's max_length 30"),
    (['--windows', '0.5'], 'no whole number of tokens'),
])
def test_bad_input_is_one_line(run, capsys, argv, message):
  root, _ = run
  assert probe.main([str(root / 'sweep'), *argv]) == 1
  lines = capsys.readouterr().err.strip().splitlines()  # 'probing <run>' lines, then the error
  assert lines[-1].startswith('error: ') and message in lines[-1]
  assert all(line.startswith('probing ') for line in lines[:-1])


@pytest.mark.parametrize('windows, message', [
    ('0', "'0' is no number above 0; expected comma-separated numbers such as 2,4,8,16"),
    ('abc', "'abc' is no number above 0"),
    ('4,8,4', '4 is given twice; give each entry once'),
])
def test_a_bad_windows_flag_stops_in_one_line_before_any_probe(tmp_path, capsys, windows,
                                                              message):
  with pytest.raises(SystemExit) as stop:
    probe.main([str(tmp_path), '--windows', windows])
  error = capsys.readouterr().err
  assert stop.value.code == 2 and error.count('\n') == 1
  assert error.startswith('error: argument --windows: ') and message in error


def test_a_folder_without_a_finished_run_is_one_line(tmp_path, capsys):
  (tmp_path / 'empty').mkdir()
  assert probe.main([str(tmp_path / 'empty')]) == 1
  error = capsys.readouterr().err
  assert 'holds no finished run' in error and len(error.strip().splitlines()) == 1
