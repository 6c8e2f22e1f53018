"""ListOps: generator (lra.md §2), evaluator, TSV reader and loader."""

import ml_collections
import numpy as np
import pytest

from lra_luna.datasets import base
from lra_luna.datasets import listops

SMALL = dict(num_train=200, num_val=20, num_test=20, min_length=10, max_length=100,
             max_depth=6, max_args=10, progress=False)
FILES = ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv')


def read_rows(path):
  lines = path.read_text(encoding='utf-8').splitlines()
  assert lines[0] == 'Source\tTarget'
  return [tuple(line.split('\t')) for line in lines[1:]]


def ids(*tokens):
  return [listops.VOCAB.index(t) for t in tokens]


@pytest.fixture(scope='module')
def small_set(tmp_path_factory):
  out = tmp_path_factory.mktemp('listops_seed0')
  listops.generate_listops(out, seed=0, **SMALL)
  return out


def test_vocab_is_fixed():
  assert listops.VOCAB == ('<pad>', '[MIN', '[MAX', '[MED', '[SM', ']',
                           '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')


@pytest.mark.parametrize('text, value', [
    ('( ( ( [MAX 2 ) 9 ) ] )', 9),
    ('( ( ( ( [MIN 4 ) 7 ) 3 ) ] )', 3),
    ('( ( ( ( [MED 4 ) 1 ) 7 ) ] )', 4),           # odd count: middle of 1 4 7
    ('( ( ( ( ( [MED 1 ) 2 ) 8 ) 9 ) ] )', 5),     # even count: int((2 + 8) / 2)
    ('( ( ( [MED 3 ) 6 ) ] )', 4),                 # int(4.5)
    ('( ( ( ( [SM 9 ) 8 ) 7 ) ] )', 4),            # 24 mod 10
    ('( ( ( [SM 0 ) 0 ) ] )', 0),
    ('7', 7),
    # MAX(2, MIN(5, 3), SM(9, 9)) = MAX(2, 3, 8)
    ('( ( ( ( [MAX 2 ) ( ( ( [MIN 5 ) 3 ) ] ) ) ( ( ( [SM 9 ) 9 ) ] ) ) ] )', 8),
    ('[MED [SM 5 6 ] [MIN 9 2 ] 4 ]', 2),          # no parentheses: MED(1, 2, 4)
])
def test_evaluator_on_hand_computed(text, value):
  assert listops.evaluate_expression(text) == value


@pytest.mark.parametrize('text', ['( ( [MAX 2 ) 9 )', '[MAX ]', '2 3', ']', '[FOO 1 ]', ''])
def test_evaluator_rejects_malformed(text):
  with pytest.raises(ValueError):
    listops.evaluate_expression(text)


def test_generated_labels_lengths_and_uniqueness(small_set):
  all_expressions = []
  for name, count in zip(FILES, (200, 20, 20)):
    rows = read_rows(small_set / name)
    assert len(rows) == count
    for expression, label in rows:
      assert int(label) == listops.evaluate_expression(expression)
      length = sum(t not in ('(', ')') for t in expression.split())
      assert 10 < length < 100
      all_expressions.append(expression)
  assert len(set(all_expressions)) == len(all_expressions)


def test_generated_printing_is_lra_style(small_set):
  # Every token but the first is separated by single spaces; each operator opens with parentheses.
  for expression, _ in read_rows(small_set / 'basic_val.tsv'):
    assert expression.startswith('( ') and expression.endswith(' ] )')
    assert expression.count('(') == expression.count(')')
    assert '  ' not in expression


def test_generation_is_seeded(small_set, tmp_path):
  listops.generate_listops(tmp_path / 'again', seed=0, **SMALL)
  listops.generate_listops(tmp_path / 'other', seed=1, **SMALL)
  for name in FILES:
    assert (tmp_path / 'again' / name).read_bytes() == (small_set / name).read_bytes()
    assert (tmp_path / 'other' / name).read_bytes() != (small_set / name).read_bytes()


def test_generation_leaves_no_temp_files_and_marks_its_set(small_set):
  assert sorted(p.name for p in small_set.iterdir()) == sorted(FILES + ('generated.json',))
  record = listops.generation_record(small_set)
  settings = {key: value for key, value in SMALL.items() if key != 'progress'}
  assert record['settings'] == {**settings, 'seed': 0}


def test_reader_first_line_blank_is_a_bad_row(tmp_path):
  path = write(tmp_path / 'blank_first.tsv', '\n( ( ( [MIN 2 ) 9 ) ] )\t2\n')
  with pytest.raises(base.DataError, match=r'blank_first.tsv, line 1: .*found 1'):
    listops.read_listops_tsv(path, max_length=5)


def write(path, text):
  path.write_text(text, encoding='utf-8')
  return path


def test_reader_exact_ids_padding_and_truncation(tmp_path):
  path = write(tmp_path / 'basic_test.tsv',
               'Source\tTarget\n'
               '( ( ( [MAX 2 ) 9 ) ] )\t9\n'
               '( ( ( ( [SM ( ( ( [MIN 5 ) 3 ) ] ) ) 8 ) 0 ) ] )\t1\n'
               '4\t4\n')
  inputs, targets, num_truncated = listops.read_listops_tsv(path, max_length=6)
  assert num_truncated == 1  # only the second row has more than 6 tokens
  assert inputs.dtype == np.int32 and targets.dtype == np.int32
  assert inputs.shape == (3, 6)
  np.testing.assert_array_equal(targets, [9, 1, 4])
  np.testing.assert_array_equal(inputs[0], ids('[MAX', '2', '9', ']') + [0] * 2)
  # 8 tokens without parentheses, cut to the first 6.
  np.testing.assert_array_equal(inputs[1], ids('[SM', '[MIN', '5', '3', ']', '8'))
  np.testing.assert_array_equal(inputs[2], ids('4') + [0] * 5)
  assert listops.VOCAB.index('<pad>') == 0 and 0 not in ids('[MAX', ']', '0')


def test_reader_without_header(tmp_path):
  path = write(tmp_path / 'plain.tsv', '( ( ( [MIN 2 ) 9 ) ] )\t2')  # no final newline either
  inputs, targets, _ = listops.read_listops_tsv(path, max_length=5)
  np.testing.assert_array_equal(inputs, [ids('[MIN', '2', '9', ']') + [0]])
  np.testing.assert_array_equal(targets, [2])


def test_reader_round_trips_generated_files(small_set):
  inputs, targets, _ = listops.read_listops_tsv(small_set / 'basic_train.tsv', max_length=100)
  rows = read_rows(small_set / 'basic_train.tsv')
  np.testing.assert_array_equal(targets, [int(label) for _, label in rows])
  for row, (expression, _) in zip(inputs, rows):
    tokens = [listops.VOCAB[i] for i in row if i]
    assert tokens == [t for t in expression.split() if t not in ('(', ')')]


@pytest.mark.parametrize('body, line, what', [
    ('( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( ( [MAX 2 ) 9 ) ] )\n', 3, '2 tab-separated columns'),
    ('( ( ( [MAX 2 ) 9 ) ] )\t9\t1\n', 2, 'found 3'),
    ('( ( ( [MAX 2 ) 9 ) ] )\tnine\n', 2, "'nine' is not an integer"),
    ('( ( ( [MAX 2 ) 9 ) ] )\t12\n', 2, "'12' is not an integer in 0..9"),
    ('( ( ( [MAX 2 ) 9 ) ] )\t9.0\n', 2, 'not an integer'),
    ('( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( ( [MAX 2 ) 9 ) X )\t9\n', 3, "unknown token 'X'"),
    ('( ( ( [MAX 2 ) 9 ) ] )\t9\n\n( ( ( [MAX 2 ) 9 ) ] )\t9\n', 3, 'found 1'),
])
def test_reader_rejects_bad_rows(tmp_path, body, line, what):
  path = write(tmp_path / 'bad_rows.tsv', 'Source\tTarget\n' + body)
  with pytest.raises(base.DataError) as error:
    listops.read_listops_tsv(path, max_length=16)
  message = str(error.value)
  assert 'bad_rows.tsv' in message and f'line {line}' in message and what in message


@pytest.mark.parametrize('text', ['', 'Source\tTarget\n'])
def test_reader_rejects_empty_file(tmp_path, text):
  path = write(tmp_path / 'empty.tsv', text)
  with pytest.raises(base.DataError, match='empty.tsv'):
    listops.read_listops_tsv(path, max_length=16)


def test_reader_missing_file_says_how_to_fix(tmp_path):
  with pytest.raises(base.DataError) as error:
    listops.read_listops_tsv(tmp_path / 'basic_train.tsv', max_length=16)
  message = str(error.value)
  assert 'basic_train.tsv' in message and 'not found' in message
  assert 'python data/generate_listops.py' in message and '--config.data_dir' in message


def make_config(data_dir, max_length=64):
  config = ml_collections.ConfigDict()
  config.data_dir = str(data_dir)
  config.data_source = 'generated'
  config.dataset_name = 'listops-quick'
  config.max_length = max_length
  config.max_truncated_fraction = 1.0  # generated up to 100 tokens, read at 64
  config.seed = 123  # the training seed; must not matter to the data
  config.listops = ml_collections.ConfigDict(dict(
      num_train=40, num_val=8, num_test=8, min_length=10, max_length=100, max_depth=6,
      max_args=10, seed=0))
  return config


def test_load_generates_then_uses_cache(tmp_path, monkeypatch, capsys):
  config = make_config(tmp_path)
  data = listops.load_listops(config)
  assert f'ListOps: data generated now in {tmp_path / "listops-quick"}.' in capsys.readouterr().out
  folder = tmp_path / 'listops-quick'
  assert sorted(p.name for p in folder.iterdir()) == sorted(FILES + ('cache_len64.npz', 'generated.json'))
  assert (data.vocab_size, data.num_classes, data.max_length) == (16, 10, 64)
  assert set(data.splits) == {'train', 'validation', 'test'}
  for split, count in (('train', 40), ('validation', 8), ('test', 8)):
    assert data.splits[split]['inputs'].shape == (count, 64)
    assert data.splits[split]['inputs'].dtype == np.int32
    assert data.splits[split]['targets'].shape == (count,)
  np.testing.assert_array_equal(
      data.splits['test']['targets'], [int(label) for _, label in read_rows(folder / FILES[2])])

  # The second call reads the cache and not the TSVs.
  def no_reading(*args):
    raise AssertionError('the TSVs were read again')

  with monkeypatch.context() as patch:
    patch.setattr(listops, 'read_listops_tsv', no_reading)
    cached = listops.load_listops(config)
  output = capsys.readouterr().out
  assert 'generating' not in output and 'generated now' not in output
  assert f'ListOps: read previously generated data from {tmp_path / "listops-quick"}.' in output
  for split in data.splits:
    for name in ('inputs', 'targets'):
      np.testing.assert_array_equal(cached.splits[split][name], data.splits[split][name])

  # A replaced source file rebuilds the cache: stale arrays are never served.
  test_rows = read_rows(folder / FILES[2])[:3]
  write(folder / FILES[2], 'Source\tTarget\n' + ''.join(f'{x}\t{y}\n' for x, y in test_rows))
  rebuilt = listops.load_listops(config)
  np.testing.assert_array_equal(rebuilt.splits['test']['targets'], [int(y) for _, y in test_rows])
  np.testing.assert_array_equal(rebuilt.splits['train']['inputs'], data.splits['train']['inputs'])
  # And a broken replacement is reported, not hidden behind the old cache.
  write(folder / FILES[0], 'Source\tTarget\nbroken\n')
  with pytest.raises(base.DataError, match=FILES[0]):
    listops.load_listops(config)

  # The training seed does not change the data.
  other = make_config(tmp_path / 'other')
  other.seed = 7
  regenerated = listops.load_listops(other)
  np.testing.assert_array_equal(regenerated.splits['train']['inputs'],
                                data.splits['train']['inputs'])


def test_load_refuses_partial_set(tmp_path):
  folder = tmp_path / 'listops-quick'
  listops.generate_listops(folder, **SMALL)
  (folder / 'basic_val.tsv').unlink()
  (folder / 'basic_test.tsv').unlink()
  with pytest.raises(base.DataError) as error:
    listops.load_listops(make_config(tmp_path))
  message = str(error.value)
  assert 'basic_val.tsv' in message and 'basic_test.tsv' in message
  assert 'basic_train.tsv' not in message.split('lacks')[1].split('but')[0]
  assert sorted(p.name for p in folder.iterdir()) == ['basic_train.tsv', 'generated.json']
