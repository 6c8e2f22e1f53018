"""Cue baselines (lra_luna/cues.py) against hand counts, the majority class from the training
labels, the command's one-line errors, and the cues under report's Table 1."""

import json

import numpy as np
import pytest

from lra_luna import cues
from lra_luna import report
from lra_luna.datasets import pathfinder_generator as pathfinder_gen
from lra_luna.training import steps

HEADER = 'Source\tTarget\n'


def write_listops(folder, train: list[str], test: list[str]) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  (folder / 'basic_train.tsv').write_text(HEADER + '\n'.join(train) + '\n')
  (folder / 'basic_test.tsv').write_text(HEADER + '\n'.join(test) + '\n')


def test_majority_class_is_the_training_labels_most_frequent_on_the_test_set():
  train = np.array([9, 9, 9, 0, 0, 3])
  test = np.array([0, 0, 0, 9, 3, 1, 0, 9])  # the test set's own majority (0) is 4 of 8
  assert steps.majority_rate(train, test) == np.mean(test == 9) == 0.25
  assert steps.majority_rate(np.array([2, 1, 1, 2]), np.array([1, 2, 2])) == pytest.approx(1 / 3)
  # A label the training set never has the most of scores what it scores, even 0.
  assert steps.majority_rate(np.array([4, 4]), np.array([1, 2])) == 0.0


def test_first_token_baseline_predicts_each_operators_most_frequent_value(tmp_path):
  train = ['( ( [MAX 9 ) 3 ] )\t9', '( ( [MAX 9 ) 1 ] )\t9', '( ( [MIN 0 ) 4 ] )\t0',
           '( ( [MIN 2 ) 4 ] )\t2', '( ( [MIN 2 ) 3 ] )\t2']
  test = ['( ( [MAX 8 ) 9 ] )\t9', '( ( [MIN 5 ) 2 ] )\t2', '( ( [MIN 1 ) 4 ] )\t1',
          '( ( [MAX 1 ) 7 ] )\t7', '( ( [SM 1 ) 1 ] )\t2']
  write_listops(tmp_path, train, test)
  majority, first = cues.first_token_scores(cues.listops_expressions(tmp_path, 'train'),
                                            cues.listops_expressions(tmp_path, 'test'))
  # The training set's most frequent value is 2 (3 of 5, against 9's 2): 2 of the 5 test values.
  assert majority == pytest.approx(40.0)
  assert first == pytest.approx(40.0)  # MAX -> 9 right once, MIN -> 2 right once, SM unseen


def test_masked_token_baselines_match_hand_counts():
  train = [['[MAX', '1', ']'], ['[MAX', '2', ']'], ['[MAX', '2', ']'], ['[MIN', '1', ']'],
           ['[MIN', '1', ']']]
  test = [['[MIN', '1', ']'], ['[MAX', '1', ']'], ['5']]
  scores = cues.masked_token_baselines(train, test)
  # Always ']' (5 of 15 training tokens): the two ']' of 7 test tokens.
  assert scores['frequency'] == pytest.approx(100 * 2 / 7)
  # Between (start, 1): [MIN (2 against 1); between ([MAX, ]): 2; between ([MIN, ]): 1; the
  # unseen (start, end) falls back to ']': [MIN 1 ] all right, [MAX 1 ] only its ']'.
  assert scores['neighbours'] == pytest.approx(100 * 4 / 7)
  # The most frequent of each kind: [MAX, 1 and ]: all but [MIN and 5.
  assert scores['kind ceiling'] == pytest.approx(100 * 5 / 7)
  with pytest.raises(ValueError, match='no test token'):
    cues.masked_token_baselines(train, [])


def test_read_prefix_closes_subtrees_and_keeps_the_open_nodes():
  tokens = ['[MAX', '3', '[MIN', '0', '5', ']', '7', ']']
  assert cues.read_prefix(tokens, 3) == ([('[MAX', [3]), ('[MIN', [])], None)
  assert cues.read_prefix(tokens, 6) == ([('[MAX', [3, 0])], None)
  assert cues.read_prefix(tokens, 8) == ([], 7)


# Children of the root are digits (depth 2 > max_depth 1), arity 2..3: [MAX 3 5 then either `]`
# (arity 2, label 5) or one uniform digit d and `]` (label max(5, d)).
_TINY = dict(max_depth=1, max_args=3, min_length=0, max_length=100)


def test_completion_labels_follow_the_generator_given_the_prefix():
  rng = np.random.default_rng(0)
  tokens = ['[MAX', '3', '5', ']']
  assert cues.completion_labels(tokens, 4, _TINY, rng, 7) == [5] * 7  # all of it seen
  labels = np.array(cues.completion_labels(tokens, 3, _TINY, rng, 4000))
  assert set(labels) <= {5, 6, 7, 8, 9}
  # P(5) = 1/2 (arity 2) + 1/2 * 6/10 (arity 3, d <= 5); each of 6..9: 1/2 * 1/10.
  assert np.mean(labels == 5) == pytest.approx(0.8, abs=0.03)
  assert np.mean(labels == 9) == pytest.approx(0.05, abs=0.015)
  # Only kept lengths (min_length < tokens): arity 2 gives 4 tokens and is dropped, so the
  # third digit is always there: P(5) = 6/10.
  labels = np.array(cues.completion_labels(tokens, 3, {**_TINY, 'min_length': 4}, rng, 4000))
  assert np.mean(labels == 5) == pytest.approx(0.6, abs=0.03)


def test_start_window_bayes_predicts_the_most_likely_label():
  rows = [(['[MAX', '3', '5', ']'], 5), (['[MAX', '3', '5', '9', ']'], 9)]
  (_, whole, whole_half, whole_top), (_, prefix, prefix_half, prefix_top) = (
      cues.start_window_bayes(rows, (5, 3), _TINY, samples=2000))
  assert whole == 100 and whole_half == 0 and whole_top == 100
  assert prefix_half == pytest.approx(100 * 1.96 * (0.5 * 0.5 / 2) ** 0.5)
  # From [MAX 3 5 the rule says 5 (P = 0.8): right for the first expression only.
  assert prefix == 50 and prefix_top == pytest.approx(80, abs=3)


def test_the_listops_command_prints_every_cue_and_refuses_bad_sets_in_one_line(tmp_path, capsys):
  write_listops(tmp_path, ['( ( [MAX 9 ) 3 ] )\t9'], ['( ( [MAX 8 ) 9 ] )\t9'])
  assert cues.main(['--listops', str(tmp_path), '--start_windows']) == 0
  out = capsys.readouterr().out
  assert '| listops | the first token (the outermost operator) alone | 100.0 |' in out
  # Training tokens [MAX 9 3 ] once each: the first, [MAX, is the most frequent and the value
  # 9; of the test tokens [MAX 8 9 ] always [MAX gets 1, the kinds' [MAX 9 ] get 3.
  assert 'always the most frequent token | 25.0 |' in out and "each token's kind | 75.0 |" in out
  # No generation record: LRA's settings; windows 1, 1 and 2000 / 8 (all of it).
  assert 'the best reader of the first 250 tokens (± 0.0; mean top share 100.0%) | 100.0 |' in out
  with pytest.raises(SystemExit, match='--listops') as error:
    cues.main(['--listops', str(tmp_path / 'missing')])
  assert '\n' not in str(error.value)
  (tmp_path / 'basic_test.tsv').write_text(HEADER + '( [MAX 8 ] )\t8\n( [MAX 9 ] )\n')
  with pytest.raises(SystemExit, match=r'basic_test.tsv, line 3: expected') as error:
    cues.main(['--listops', str(tmp_path)])
  assert '\n' not in str(error.value)
  for row, message in [('( ( [MAX 8 ) 9 ] )\t8', 'evaluates to 9, its label is 8'),
                       ('( ( [MAX 8 ) 9 )\t9', 'is not one complete tree'),
                       ('( ( [MAX 8 ) 9 ] ) ]\t9', 'is not one complete tree'),
                       ('( ( [MAX 8 ) x ] )\t9', "unknown token\\(s\\) \\['x'\\]")]:
    (tmp_path / 'basic_test.tsv').write_text(HEADER + row + '\n')
    with pytest.raises(SystemExit, match=r'basic_test.tsv, line 2: .*' + message) as error:
      cues.main(['--listops', str(tmp_path)])
    assert '\n' not in str(error.value)
  (tmp_path / 'basic_test.tsv').write_text(HEADER)
  with pytest.raises(SystemExit, match=r'basic_test.tsv holds no expression') as error:
    cues.main(['--listops', str(tmp_path)])
  assert '\n' not in str(error.value)


def test_circle_distances_match_the_generators_circle_centres():
  samples = [pathfinder_gen.make_pathfinder_image(32, 'easy', seed=s) for s in range(12)]
  measured = cues.circle_distances(np.stack([s.image.reshape(-1) for s in samples]), 32)
  drawn = [np.hypot(*(s.circles[0] - s.circles[1])) for s in samples]
  np.testing.assert_allclose(measured, drawn, atol=0.5)  # centroids of antialiased discs
  one_disc = np.zeros((1, 32 * 32), np.uint8)
  one_disc[0, 5 * 32 + 5] = 255
  assert np.isnan(cues.circle_distances(one_disc, 32)[0])


def test_circle_distance_baseline_and_its_command(tmp_path, capsys):
  pathfinder_gen.generate_pathfinder(tmp_path / 'set', resolution=32, difficulty='easy',
                                     num_images=40, images_per_batch=20, num_workers=1,
                                     progress=False)
  majority, by_distance = cues.circle_distance_baseline(tmp_path / 'set', 32, 'easy')
  assert 0.0 <= majority.accuracy <= 100.0 and 0.0 <= by_distance.accuracy <= 100.0
  # 4 test images: multiples of 25%.
  assert by_distance.accuracy / 25 == pytest.approx(round(by_distance.accuracy / 25))
  assert cues.main(['--pathfinder', str(tmp_path / 'set')]) == 0
  assert 'one threshold on the distance between the two circles' in capsys.readouterr().out
  with pytest.raises(SystemExit, match='--pathfinder') as error:
    cues.main(['--pathfinder', str(tmp_path / 'missing')])
  assert '\n' not in str(error.value)


def test_threshold_accuracy_fits_on_train_and_scores_test():
  train_d = np.array([3.0, 5.0, 8.0, 20.0, 22.0, np.nan])
  train_y = np.array([1, 1, 1, 0, 0, 0])  # a tie: the majority class is the lower one, 0
  # Best train threshold: 20, the first distance above every positive: all six pairs right.
  test_d = np.array([4.0, 19.0, 21.0, np.nan])
  test_y = np.array([1, 1, 0, 1])
  # 4 -> 1 right, 19 -> 1 right, 21 -> 0 right, NaN -> majority 0 wrong: 3 of 4.
  assert cues.threshold_accuracy(train_d, train_y, test_d, test_y) == 0.75


def test_report_shows_the_cues_of_its_data_under_table_1(tmp_path):
  data = tmp_path / 'listops-set'
  write_listops(data, ['( [MAX 9 3 ] )\t9', '( [MAX 9 1 ] )\t9', '( [MIN 0 4 ] )\t0'],
                ['( [MAX 8 9 ] )\t9', '( [MIN 5 2 ] )\t2', '( [MIN 1 4 ] )\t1',
                 '( [MIN 0 3 ] )\t0'])
  run = tmp_path / 'sweep' / 'listops' / 'luna16' / 'cls' / 'seed0'
  run.mkdir(parents=True)
  section = {'test_accuracy': 0.5}
  (run / 'results.json').write_text(json.dumps({
      'task': 'listops', 'model': 'luna16', 'head': 'cls', 'seed': 0, 'best': section,
      'last': section, 'data': {'source': 'generated', 'path': str(data)}}))
  report.make_report(tmp_path / 'sweep', out_dir=tmp_path / 'out')
  table1 = (tmp_path / 'out' / 'table1.md').read_text()
  # Training majority 9: 1 of 4 test values; first token MAX -> 9 (right once), MIN -> 0 (once).
  assert (f'Cue baseline (listops; lra_luna/cues.py on ListOps set {data}): majority class (the '
          "training set's most frequent label): 25.00%.") in table1
  assert 'the first token alone: 50.00%.' in table1
