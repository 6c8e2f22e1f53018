"""report/recall.py: the MQAR table and figures, from one real tiny MQAR sweep (two seeds in one
vmapped program), folders of other settings made from its run folders, and records
(report/record.py) written from them or by hand."""

import csv
import itertools
import json
import pathlib
import shutil
import statistics

import pytest

from lra_luna import report
from lra_luna import sweep
from lra_luna import tables
from lra_luna.report import recall
from lra_luna.report import record
from lra_luna.training import run_folder

# ml_collections' config_flags loads config files with the deprecated load_module().
pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')

MQAR = str(pathlib.Path(__file__).resolve().parent.parent / 'configs' / 'mqar.py')
# L = 16, N = 2, D = 16, P = 4; 4 steps of batch 8 (a few seconds).
TINY = ['max_length=16', 'mqar.num_kv_pairs=2', 'mqar.vocab_size=64', 'mqar.num_train=256',
        'mqar.num_val=32', 'mqar.num_test=32', 'num_train_steps=4', 'warmup_steps=1',
        'eval_every=4', 'checkpoint_every=4', 'log_every=2', 'model.dim=16', 'model.ffn_dim=32',
        'model.classifier_dim=32', 'model.num_layers=1', 'model.pack_length=4', 'batch_size=8',
        'eval_batch_size=16', 'progress_bar=False']
# The table files every MQAR report writes: the models' and their comparisons'.
TABLE_FILES = {f'{name}.{fmt}' for name in ('mqar', 'mqar_comparisons')
               for fmt in ('md', 'tex', 'csv')}


@pytest.fixture(scope='module')
def real_sweep(tmp_path_factory):
  """A real sweep: luna16 on tiny MQAR, seeds 0 and 1."""
  sweep_dir = tmp_path_factory.mktemp('real') / 'sweep'
  assert sweep.main(['--config', f'{MQAR}:luna16,quick,bidirectional', '--seeds', '0,1',
                     '--mode', 'vmap', '--sweep_dir', str(sweep_dir), '--override', *TINY]) == 0
  return sweep_dir


def seed_runs(real_sweep) -> list[pathlib.Path]:
  return sorted(real_sweep.glob('mqar/luna16/cls/seed*'))


def derive(source: pathlib.Path, sweep_dir: pathlib.Path, accuracy: float, model='luna16',
           dim=16, lr=3e-3, pairs=2, pack=4, causal=False) -> pathlib.Path:
  """A copy of a real run's results.json and config.json in sweep_dir's layout, its setting and
  test accuracy (last checkpoint) changed; the Transformer's config gets its attention."""
  result = json.loads((source / run_folder.RESULTS_FILE).read_text())
  config = json.loads((source / run_folder.CONFIG_FILE).read_text())
  config.update(max_length=16, learning_rate=lr, model_name=model)
  config['mqar']['num_kv_pairs'] = pairs
  config['model'].update(dim=dim, pack_length=pack, causal=causal)
  if model == 'transformer':
    config['model']['attention'] = 'softmax'
  result.update(model=model, causal=causal, test_accuracy=accuracy, test_chance_rate=1 / pairs)
  result['last'] = {**result['last'], 'test_accuracy': accuracy}
  workdir = sweep_dir / 'mqar' / model / 'cls' / f"seed{result['seed']}"
  workdir.mkdir(parents=True)
  (workdir / run_folder.RESULTS_FILE).write_text(json.dumps(result))
  (workdir / run_folder.CONFIG_FILE).write_text(json.dumps(config))
  return workdir


def grid(real_sweep, root: pathlib.Path, points: dict) -> pathlib.Path:
  """root/<one sweep folder per setting>: {(model, dim, lr, pairs, pack): (acc seed 0, seed 1)}."""
  for i, ((model, dim, lr, pairs, pack), accuracies) in enumerate(points.items()):
    for source, accuracy in zip(seed_runs(real_sweep), accuracies):
      derive(source, root / f'sweep{i}', accuracy, model, dim, lr, pairs, pack)
  return root


def markdown_rows(path: pathlib.Path) -> list[dict]:
  parsed = tables.parse_markdown(path.read_text())[0]
  return [dict(zip(parsed['header'], row)) for row in parsed['rows']]


def setting_rows(root: pathlib.Path) -> list:
  """recall.Row per setting of the MQAR runs under root."""
  return recall.rows_of(recall.record_rows(report.load_results(root)), 'last', root)


def short_commit(result: dict) -> str:
  """How the tables name a results.json's commit: 7 characters, '+dirty' where it was."""
  environment = result['environment']
  return environment['commit'][:7] + ('+dirty' if environment['dirty'] else '')


def test_a_real_sweeps_row_is_the_mean_and_std_of_its_seeds(real_sweep, tmp_path, capsys):
  assert report.main([str(real_sweep), '--out_dir', str(tmp_path / 'out')]) == 0
  assert 'MQAR' in capsys.readouterr().out
  assert {p.name for p in (tmp_path / 'out').iterdir()} == TABLE_FILES
  results = [json.loads((w / run_folder.RESULTS_FILE).read_text()) for w in seed_runs(real_sweep)]
  # As the record keeps them (two decimals), so that a folder and its record give one table.
  accuracies = [round(100 * r['last']['test_accuracy'], 2) for r in results]
  [row] = markdown_rows(tmp_path / 'out' / 'mqar.md')
  assert row == {'Model': 'luna16', 'L': '16', 'N': '2', 'V': '64', 'D': '16', 'P': '4', 'lr': '0.003',
                 'Test acc. (%)': f'{statistics.mean(accuracies):.2f} ± '
                                  f'{statistics.stdev(accuracies):.2f}',
                 'n': '2', 'Chance (%)': f"{100 * results[0]['test_chance_rate']:.2f}",
                 'Steps': '4', 'Commit': short_commit(results[0])}
  assert results[0]['test_chance_rate'] == 0.5 and results[0]['causal'] is False
  text = (tmp_path / 'out' / 'mqar.md').read_text()
  assert ('vocab size 64, power_a 0.01, random_non_queries False, data seed 0; 256/32/32 '
          'train/validation/test examples') in text
  assert 'last checkpoint' in text and 'SHORTENED: quick config' in text


def test_table_and_best_learning_rate_over_several_sweep_folders(real_sweep, tmp_path):
  points = {('luna16', 16, 1e-3, 2, 4): (0.50, 0.70), ('luna16', 16, 3e-3, 2, 4): (0.80, 0.90),
            ('luna16', 32, 1e-3, 2, 4): (0.95, 0.97), ('luna16', 32, 3e-3, 2, 4): (0.60, 0.64),
            ('transformer', 16, 1e-3, 2, 4): (0.99, 1.0)}
  root = grid(real_sweep, tmp_path / 'parent', points)
  paths = report.make_report(root, out_dir=tmp_path / 'out')
  assert {p.name for p in paths} == TABLE_FILES | {recall.WIDTHS_FIGURE, recall.MODELS_FIGURE}
  rows = markdown_rows(tmp_path / 'out' / 'mqar.md')
  # Sorted by model (registry order: the Transformer first), then L, N, D, lr.
  assert [(r['Model'], r['D'], r['lr']) for r in rows] == [
      ('transformer', '16', '0.001'), ('luna16', '16', '0.001'), ('luna16', '16', '0.003 *'),
      ('luna16', '32', '0.001 *'), ('luna16', '32', '0.003')]
  for row in rows:
    lr = float(row['lr'].rstrip(' *'))
    accuracies = [100 * a for a in points[(row['Model'], int(row['D']), lr, 2, 4)]]
    assert row['Test acc. (%)'] == (f'{statistics.mean(accuracies):.2f} ± '
                                    f'{statistics.stdev(accuracies):.2f}')
    assert (row['n'], row['Chance (%)'], row['P']) == (
        '2', '50.00', '—' if row['Model'] == 'transformer' else '4')
  with (tmp_path / 'out' / 'mqar.csv').open() as f:
    best = {(r['model'], r['D'], r['lr']) for r in csv.DictReader(f) if r['best_lr'] == 'True'}
  assert best == {('transformer', '16', '0.001'), ('luna16', '16', '0.003'),
                  ('luna16', '32', '0.001')}
  # The widths figure plots each width's best learning rate.
  panels, _ = recall.width_panels(recall.best_rows(setting_rows(root)))
  lines = panels['L = 16, N = 2, V = 64']
  assert {d: round(c.mean, 6) for d, c in lines['luna16'].items()} == {16: 85.0, 32: 96.0}
  assert lines['transformer'][16].mean == pytest.approx(99.5)


def test_the_capacity_figure_needs_two_pair_counts_and_the_widths_figure_two_widths(
    real_sweep, tmp_path):
  one_n = grid(real_sweep, tmp_path / 'one', {('luna16', 16, 3e-3, 2, 4): (0.5, 0.6),
                                              ('luna16', 16, 3e-3, 2, 8): (0.7, 0.8)})
  assert {p.name for p in report.make_report(one_n, out_dir=tmp_path / 'one_out')} == (
      TABLE_FILES | {recall.MODELS_FIGURE})  # P = 4 and 8: two bars
  points = {('luna16', 16, 3e-3, 2, 4): (0.9, 1.0), ('luna16', 16, 3e-3, 4, 4): (0.5, 0.6),
            ('luna16', 16, 3e-3, 2, 8): (1.0, 1.0), ('luna16', 16, 3e-3, 4, 8): (0.8, 0.9),
            ('transformer', 16, 3e-3, 2, 4): (1.0, 1.0),
            ('transformer', 16, 3e-3, 4, 4): (1.0, 0.98),
            ('luna16', 16, 3e-3, 2, 16): (0.9, 0.9)}  # P = 16 at one N: no line
  root = grid(real_sweep, tmp_path / 'capacity', points)
  paths = report.make_report(root, out_dir=tmp_path / 'out')
  assert {p.name for p in paths} == TABLE_FILES | {recall.CAPACITY_FIGURE,
                                                   recall.MODELS_FIGURE}
  assert (tmp_path / 'out' / recall.CAPACITY_FIGURE).stat().st_size > 0
  panels, chances = recall.capacity_panels(recall.best_rows(setting_rows(root)))
  lines = panels['L = 16, V = 64, D = 16']
  assert sorted(lines) == ['Luna P=4', 'Luna P=8', 'Transformer']
  assert {n: round(c.mean, 6) for n, c in lines['Luna P=4'].items()} == {2: 95.0, 4: 55.0}
  assert chances['L = 16, V = 64, D = 16'] == {2: 50.0, 4: 25.0}


def test_the_same_setting_and_seed_twice_is_an_error(real_sweep, tmp_path):
  for name in ('a', 'b'):
    derive(seed_runs(real_sweep)[0], tmp_path / 'parent' / name, 0.5)
  with pytest.raises(ValueError, match='Two results for task/model/head/seed'):
    report.load_results(tmp_path / 'parent')
  derive(seed_runs(real_sweep)[0], tmp_path / 'causal', 0.5)
  derive(seed_runs(real_sweep)[0], tmp_path / 'causal' / 'c', 0.6, causal=True)
  [bidirectional, causal] = setting_rows(tmp_path / 'causal')
  assert (bidirectional.setting.label(), causal.setting.label()) == ('luna16', 'luna16 (causal)')


def test_an_lra_folder_gets_no_mqar_outputs_and_a_mixed_one_both(real_sweep, tmp_path):
  lra = tmp_path / 'lra'
  for seed, accuracy in enumerate((0.3, 0.4)):
    workdir = lra / 'listops' / 'luna16' / 'cls' / f'seed{seed}'
    workdir.mkdir(parents=True)
    section = {'step': 10, 'val_accuracy': accuracy, 'val_loss': 1.0,
               'test_accuracy': accuracy, 'test_loss': 1.0, 'test_examples': 10}
    (workdir / run_folder.RESULTS_FILE).write_text(json.dumps(
        {'task': 'listops', 'model': 'luna16', 'head': 'cls', 'seed': seed, 'steps': 10,
         'test_accuracy': accuracy, 'last': section, 'best': section}))
  names = {p.name for p in report.make_report(lra, out_dir=tmp_path / 'lra_out')}
  assert 'table1.md' in names and not any(name.startswith('mqar') for name in names)
  shutil.copytree(real_sweep / 'mqar', lra / 'mqar')
  names = {p.name for p in report.make_report(lra, out_dir=tmp_path / 'mixed_out')}
  assert {'table1.md', 'mqar.md'} <= names
  assert 'MQAR' not in (tmp_path / 'mixed_out' / 'table1.md').read_text()


# ----------------------------------------------------------------------------------------------
# The record: MQAR rows, their group the setting's text.
# ----------------------------------------------------------------------------------------------
def write_record(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
  """A record CSV of rows (dicts of some of record.COLUMNS; the rest empty), as if copied in."""
  with path.open('w', newline='') as f:
    writer = csv.DictWriter(f, record.COLUMNS, restval='', lineterminator='\n')
    writer.writeheader()
    writer.writerows(rows)
  return path


def mqar_row(group: str, seed: int, last: float, commit='abc1234', size='quick') -> dict:
  return {'size': size, 'task': 'mqar', 'group': group, 'seed': seed, 'steps': 3000,
          'best': last, 'last': last, 'commit': commit, 'machine': 'Xeon',
          'config': 'mqar.py:luna16,quick'}


@pytest.mark.parametrize('setting, text', [
    (recall.Setting('luna16', True, 64, 4, 64, 8, 3e-3),
     'luna16 causal L=64 N=4 D=64 P=8 lr=0.003'),
    (recall.Setting('luna16', False, 16, 2, 16, 4, 1e-4),
     'luna16 bidirectional L=16 N=2 D=16 P=4 lr=0.0001'),
    (recall.Setting('transformer', True, 256, 16, 128, None, 1e-5),
     'transformer causal L=256 N=16 D=128 lr=1e-05'),
    (recall.Setting('s5', False, 64, 4, 64, None, 0.1 + 0.2),
     's5 bidirectional L=64 N=4 D=64 lr=0.30000000000000004'),
    (recall.Setting('luna16', False, 16, 2, 64, 4, 1e-3, vocab=64),
     'luna16 bidirectional L=16 N=2 V=64 D=64 P=4 lr=0.001'),
    (recall.Setting('transformer', True, 64, 4, 64, None, 3e-3, vocab=8192),
     'transformer causal L=64 N=4 D=64 lr=0.003'),  # Zoology's V goes unsaid
])
def test_a_settings_group_text_reads_back_exactly(setting, text):
  assert setting.group() == text
  assert recall.Setting.from_group(text) == setting


@pytest.mark.parametrize('text', [
    'luna16 L=64 N=4 D=64 P=8 lr=0.003',                 # neither causal nor bidirectional
    'luna16 causal L=64 N=4 D=64 P=8 lr=fast',           # a learning rate that is no number
    'luna16 causal L=64 N=0 D=64 P=8 lr=0.003',          # no pairs
    'luna16 causal L=64 N=4 D=64 P=8',                   # no learning rate
    'luna16 causal L=64 N=4 D=64 P=8 lr=0.003 extra',
    'luna16 causal L=64 N=4 D=64 V=64 P=8 lr=0.003',     # V after D
    'luna16 causal L=64 N=4 V=0 D=64 P=8 lr=0.003',      # no vocabulary
    'luna16'])
def test_a_malformed_group_is_refused_naming_the_text_and_in_a_record_its_line(
    text, tmp_path, capsys):
  with pytest.raises(ValueError, match='is not "<model> causal|bidirectional') as raised:
    recall.Setting.from_group(text)
  assert repr(text) in str(raised.value)
  rec = write_record(tmp_path / 'record.csv', [
      mqar_row('luna16 causal L=64 N=4 D=64 P=8 lr=0.003', 0, 90.0), mqar_row(text, 0, 90.0)])
  assert report.main([str(rec)]) == 1
  error = capsys.readouterr().err.strip()
  assert len(error.splitlines()) == 1 and f'{rec}, line 3: the MQAR group {text!r}' in error


def test_an_mqar_runs_record_row_gives_the_table_and_figures_of_its_folder(
    real_sweep, tmp_path, capsys):
  root = tmp_path / 'runs'
  shutil.copytree(real_sweep, root / 'luna')
  for source, accuracy in zip(seed_runs(real_sweep), (0.9, 0.7)):
    derive(source, root / 'transformer', accuracy, model='transformer', dim=16, pack=4)
  rec = tmp_path / 'record.csv'
  assert report.main([str(root), '--record', str(rec), '--out_dir', str(tmp_path / 'folder')]) == 0
  assert 'record: 4 runs merged into' in capsys.readouterr().out
  results = [json.loads((w / run_folder.RESULTS_FILE).read_text()) for w in seed_runs(real_sweep)]
  rows = list(csv.DictReader(rec.open()))
  assert rows[0] == {
      'size': 'quick', 'task': 'mqar', 'group': 'luna16 bidirectional L=16 N=2 V=64 D=16 P=4 lr=0.003',
      'seed': '0', 'steps': '4', 'best': f"{100 * results[0]['best']['test_accuracy']:.2f}",
      'last': f"{100 * results[0]['last']['test_accuracy']:.2f}",
      'commit': results[0]['environment']['commit'] + ('+dirty' if results[0]['environment'][
          'dirty'] else ''),
      'machine': results[0]['environment']['cpu'],
      'config': ' '.join(['mqar.py:luna16,quick,bidirectional', *results[0]['run']['overrides']])}
  assert [(r['group'], r['seed']) for r in rows[2:]] == [
      ('transformer bidirectional L=16 N=2 V=64 D=16 lr=0.003', '0'),
      ('transformer bidirectional L=16 N=2 V=64 D=16 lr=0.003', '1')]
  # The record alone: the same files, table rows and CSV; its notes name the record.
  assert report.main([str(rec), '--out_dir', str(tmp_path / 'record')]) == 0
  names = {p.name for p in (tmp_path / 'folder').iterdir()}
  assert names == {p.name for p in (tmp_path / 'record').iterdir()} == (
      TABLE_FILES | {recall.MODELS_FIGURE})
  from_folder = markdown_rows(tmp_path / 'folder' / 'mqar.md')
  assert markdown_rows(tmp_path / 'record' / 'mqar.md') == from_folder
  assert [row['Model'] for row in from_folder] == ['transformer', 'luna16']
  assert ((tmp_path / 'record' / 'mqar.csv').read_text()
          == (tmp_path / 'folder' / 'mqar.csv').read_text())
  text = (tmp_path / 'record' / 'mqar.md').read_text()
  assert (f'Data and training: as recorded in {rec}: presets '
          'mqar.py:luna16,quick,bidirectional' in text)
  assert f"commits {short_commit(results[0])} on {results[0]['environment']['cpu']}." in text
  assert 'vocab size 64' in (tmp_path / 'folder' / 'mqar.md').read_text()
  assert not (tmp_path / 'record' / 'groups.md').exists()  # no LRA row: no LRA table


def test_a_record_of_lra_and_mqar_rows_makes_both_reports(tmp_path):
  lra = [{'size': 'mid', 'task': 'listops', 'group': model, 'seed': seed, 'steps': 1600,
          'best': accuracy, 'last': accuracy, 'commit': 'abc1234', 'config': 'listops.py'}
         for model, values in (('s4d', (40.0, 42.0)), ('transformer', (30.0, 31.0)))
         for seed, accuracy in enumerate(values)]
  mqar = [mqar_row('luna16 causal L=64 N=4 D=64 P=16 lr=0.003', seed, value)
          for seed, value in enumerate((80.0, 90.0))]
  rec = write_record(tmp_path / 'record.csv', lra + mqar)
  names = {p.name for p in report.make_report(rec, out_dir=tmp_path / 'out')}
  assert {'groups.md', 'orderings.md', 'groups.png', 'mqar.md'} <= names
  groups = (tmp_path / 'out' / 'groups.md').read_text()
  assert 'S4D' in groups and 'mqar' not in groups and 'luna16' not in groups
  [row] = markdown_rows(tmp_path / 'out' / 'mqar.md')
  assert (row['Model'], row['P'], row['Test acc. (%)'], row['Chance (%)'], row['Steps']) == (
      'luna16 (causal)', '16', f'85.00 ± {statistics.stdev([80, 90]):.2f}', '25.00', '3000')


def test_the_models_figure_needs_two_models_at_one_length_pairs_and_width(tmp_path):
  one = write_record(tmp_path / 'one.csv', [  # one model, two learning rates
      mqar_row(f'luna16 causal L=64 N=4 D=64 P=16 lr={lr}', seed, value)
      for lr, values in ((0.001, (50.0, 60.0)), (0.003, (70.0, 80.0)))
      for seed, value in enumerate(values)])
  assert recall.MODELS_FIGURE not in {p.name for p in report.make_report(one, out_dir=tmp_path)}
  groups = {'transformer causal L=64 N=4 D=64 lr=0.001': (99.0, 97.0),
            'transformer causal L=64 N=4 D=64 lr=0.003': (40.0, 30.0),
            'luna16 causal L=64 N=4 D=64 P=8 lr=0.003': (60.0, 70.0),
            'luna16 causal L=64 N=8 D=64 P=8 lr=0.003': (50.0, 55.0)}  # alone at its (L, N, D)
  rows = [mqar_row(group, seed, value) for group, values in groups.items()
          for seed, value in enumerate(values)]
  two = write_record(tmp_path / 'two.csv', rows)
  paths = report.make_report(two, out_dir=tmp_path / 'two')
  assert recall.MODELS_FIGURE in {p.name for p in paths}
  assert (tmp_path / 'two' / recall.MODELS_FIGURE).stat().st_size > 0
  # One panel; a bar per model at its best learning rate, in the registry's order.
  panels = recall.model_panels(recall.best_rows(recall.rows_of(record.read(two), 'last', two)))
  [(title, bars)] = panels.items()
  assert title == 'L = 64, N = 4, D = 64'
  assert [(recall.bar_label(bar.setting), bar.cell.mean, bar.accuracies) for bar in bars] == [
      ('transformer (causal)', 98.0, [99.0, 97.0]), ('luna16 P=8 (causal)', 65.0, [60.0, 70.0])]
  assert recall.bar_label(recall.Setting('luna16', False, 64, 4, 64, 16, 0.003)) == 'luna16'


def test_hand_copied_rows_are_marked_and_two_sizes_of_a_seed_need_size(tmp_path, capsys):
  group = 'transformer causal L=64 N=4 D=64 lr=0.003'
  rec = write_record(tmp_path / 'record.csv', [mqar_row(group, 0, 99.0, commit=''),
                                               mqar_row(group, 1, 97.0)])
  report.make_report(rec, out_dir=tmp_path / 'out')
  [row] = markdown_rows(tmp_path / 'out' / 'mqar.md')
  assert row['Commit'] == 'not recorded (1), abc1234 (1)'
  assert 'Commit not recorded: a results.json from before commits were recorded, or a record row ' \
         'copied in by hand' in (tmp_path / 'out' / 'mqar.md').read_text()
  recorded = write_record(tmp_path / 'recorded.csv', [mqar_row(group, 0, 99.0)])
  report.make_report(recorded, out_dir=tmp_path / 'recorded')
  assert 'Commit not recorded' not in (tmp_path / 'recorded' / 'mqar.md').read_text()
  # The same setting and seed at two sizes would count the seed twice.
  sizes = write_record(tmp_path / 'sizes.csv', [mqar_row(group, 0, 99.0),
                                                mqar_row(group, 0, 90.0, size='full')])
  assert report.main([str(sizes)]) == 1
  assert (f'{sizes}: {group} seed 0 ran at sizes full and quick; choose one with --size.'
          in capsys.readouterr().err)
  assert report.main([str(sizes), '--size', 'full', '--out_dir', str(tmp_path / 'full')]) == 0
  assert markdown_rows(tmp_path / 'full' / 'mqar.md')[0]['Test acc. (%)'] == '90.00'


def test_comparisons_are_welch_and_one_sample_intervals_at_each_sides_best_rate(tmp_path):
  """mqar_comparisons: each model's best rate against the Transformer's, against chance, causal
  against bidirectional and the best rate against the other, with intervals as scipy's tests
  give them; one seed gets no interval, and a model without a Transformer at its setting no row
  against it."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  groups = {
      'transformer causal L=64 N=4 D=64 lr=0.003': [99.0, 99.5, 98.8],
      'luna16 causal L=64 N=4 D=64 P=16 lr=0.003': [24.0, 25.0, 24.5],
      'luna16 causal L=64 N=4 D=64 P=16 lr=0.001': [30.0, 31.0, 29.0],
      'luna16 bidirectional L=64 N=4 D=64 P=16 lr=0.003': [20.0, 21.0, 19.5],
      's4d causal L=64 N=4 D=64 lr=0.003': [50.0],
      # Another vocabulary is another task: compared with its own Transformer only.
      'transformer causal L=64 N=4 V=64 D=64 lr=0.003': [50.0, 60.0, 55.0],
      'luna16 causal L=64 N=4 V=64 D=64 P=16 lr=0.003': [40.0, 41.0, 42.0]}
  rec = write_record(tmp_path / 'record.csv', [
      mqar_row(group, seed, accuracy) for group, accuracies in groups.items()
      for seed, accuracy in enumerate(accuracies)])
  assert report.main([str(rec), '--out_dir', str(tmp_path / 'out')]) == 0
  rows = {(r['comparison'], r['first'], r['second']): r
          for r in csv.DictReader((tmp_path / 'out' / 'mqar_comparisons.csv').open())}

  def welch(first, second):
    interval = stats.ttest_ind(groups[first], groups[second],
                               equal_var=False).confidence_interval()
    return statistics.fmean(groups[first]) - statistics.fmean(groups[second]), interval

  def check(key, difference, low, high, verdict):
    row = rows.pop(key)
    assert float(row['difference']) == pytest.approx(difference, abs=1e-4)
    assert float(row['low']) == pytest.approx(low, abs=1e-4)
    assert float(row['high']) == pytest.approx(high, abs=1e-4)
    assert row['verdict'] == verdict

  transformer = 'transformer causal L=64 N=4 D=64 lr=0.003'
  luna_best, luna_other = (f'luna16 causal L=64 N=4 D=64 P=16 lr={lr}' for lr in ('0.001', '0.003'))
  luna_bidirectional = 'luna16 bidirectional L=64 N=4 D=64 P=16 lr=0.003'
  difference, interval = welch(luna_best, transformer)
  check(('model − Transformer', luna_best, transformer), difference, *interval, 'lower')
  difference, interval = welch(luna_best, luna_bidirectional)
  check(('causal − bidirectional', luna_best, luna_bidirectional), difference, *interval,
        'higher')
  difference, interval = welch(luna_best, luna_other)
  check(('best lr − other lr', luna_best, luna_other), difference, *interval, 'higher')
  for group, verdict in ((transformer, 'higher'), (luna_best, 'higher'),
                         (luna_bidirectional, 'lower')):
    low, high = stats.ttest_1samp(groups[group], 25.0).confidence_interval()
    check(('model − chance', group, 'chance'), statistics.fmean(groups[group]) - 25.0,
          low - 25.0, high - 25.0, verdict)
  small = ('luna16 causal L=64 N=4 V=64 D=64 P=16 lr=0.003',
           'transformer causal L=64 N=4 V=64 D=64 lr=0.003')
  difference, interval = welch(*small)
  check(('model − Transformer', *small), difference, *interval, 'lower')
  for group in small:
    low, high = stats.ttest_1samp(groups[group], 25.0).confidence_interval()
    check(('model − chance', group, 'chance'), statistics.fmean(groups[group]) - 25.0,
          low - 25.0, high - 25.0, 'higher')
  one_seed = rows.pop(('model − Transformer', 's4d causal L=64 N=4 D=64 lr=0.003', transformer))
  assert (one_seed['difference'], one_seed['low'], one_seed['verdict']) == ('-49.1000', '',
                                                                          'needs 2+ seeds')
  assert rows.pop(('model − chance', 's4d causal L=64 N=4 D=64 lr=0.003', 'chance'))[
      'verdict'] == 'needs 2+ seeds'
  assert rows == {}  # the bidirectional Luna has no bidirectional Transformer to face
  shown = markdown_rows(tmp_path / 'out' / 'mqar_comparisons.md')
  assert [(row['V'], row['first']) for row in shown[:2]] == [
      ('64', 'luna16 P=16 (causal) lr 0.003: 41.00 ± 1.00, n = 3'),
      ('8192', 'luna16 P=16 (causal) lr 0.001: 30.00 ± 1.00, n = 3')]


def test_the_documented_mqar_table_and_figure_are_what_the_record_gives(tmp_path):
  """docs/mqar.md's table is report's, line for line, on docs/mqar_results.csv (the command the
  page gives), its rows at L >= 64 there and the 16-token capacity rows in docs/mqar_evidence.md;
  the figure it shows is that report's mqar_models.png, and docs/mqar_evidence.md's comparisons
  are that report's mqar_comparisons.md, line for line."""
  docs = pathlib.Path(__file__).resolve().parent.parent / 'docs'
  paths = report.make_report(docs / 'mqar_results.csv', 'last', out_dir=tmp_path)
  text = (docs / 'mqar.md').read_text()
  evidence = (docs / 'mqar_evidence.md').read_text()
  header, *rows = [line for line in (tmp_path / 'mqar.md').read_text().splitlines()
                   if line.startswith('|')]
  short = [row for row in rows[1:] if int(row.split('|')[2]) < 64]
  assert header in text and header in evidence and len(short) > 10
  assert [row for row in rows if row not in (evidence if row in short else text)] == []
  assert 'python -m lra_luna.report docs/mqar_results.csv' in text
  assert recall.MODELS_FIGURE in {path.name for path in paths}
  assert f']({recall.MODELS_FIGURE})' in text and (docs / recall.MODELS_FIGURE).is_file()
  comparisons = [line for line in (tmp_path / 'mqar_comparisons.md').read_text().splitlines()
                 if line.startswith('|')]
  assert len(comparisons) > 10 and [line for line in comparisons if line not in evidence] == []


def test_the_documented_capacity_summary_is_the_records_best_rate_rows(tmp_path):
  """docs/mqar.md's capacity summary (16 tokens, a row per N and width D, a column per P and the
  Transformer) gives, in each filled cell, the record's mean ± std at that setting's best rate, and
  the width and capacity figures it shows are ones report draws from that record."""
  docs = pathlib.Path(__file__).resolve().parent.parent / 'docs'
  paths = report.make_report(docs / 'mqar_results.csv', 'last', out_dir=tmp_path)
  best = {}
  for row in markdown_rows(tmp_path / 'mqar.md'):
    if row['L'] != '16' or '(causal)' in row['Model']:
      continue
    column = 'Transformer' if row['Model'] == 'transformer' else f'P = {row["P"]}'
    key = (row['N'], row['D'], column)
    if key not in best or row['lr'].endswith('*'):
      best[key] = row['Test acc. (%)']
  text = (docs / 'mqar.md').read_text()
  lines = text.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith('| N (chance) | D |'))
  header = [cell.strip() for cell in lines[start].strip('|').split('|')]
  cells = 0
  for line in itertools.takewhile(lambda line: line.startswith('|'), lines[start + 2:]):
    values = dict(zip(header, (cell.strip() for cell in line.strip('|').split('|'))))
    n = values['N (chance)'].split()[0]
    for column in header[2:]:
      if values[column] != '—':
        assert values[column] == best[(n, values['D'], column)], (n, values['D'], column)
        cells += 1
  assert cells > 20
  names = {path.name for path in paths}
  for figure in (recall.WIDTHS_FIGURE, recall.CAPACITY_FIGURE):
    assert figure in names and f']({figure})' in text and (docs / figure).is_file()
