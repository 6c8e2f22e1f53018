"""report/recall.py: the MQAR table and figures, from one real tiny MQAR sweep (two seeds in one
vmapped program) and folders of other settings made from its run folders."""

import csv
import json
import pathlib
import shutil
import statistics

import pytest

from lra_luna import report
from lra_luna import sweep
from lra_luna import tables
from lra_luna.report import recall
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


def test_a_real_sweeps_row_is_the_mean_and_std_of_its_seeds(real_sweep, tmp_path, capsys):
  assert report.main([str(real_sweep), '--out_dir', str(tmp_path / 'out')]) == 0
  assert 'MQAR' in capsys.readouterr().out
  assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['mqar.csv', 'mqar.md',
                                                                  'mqar.tex']
  results = [json.loads((w / run_folder.RESULTS_FILE).read_text()) for w in seed_runs(real_sweep)]
  accuracies = [100 * r['last']['test_accuracy'] for r in results]
  [row] = markdown_rows(tmp_path / 'out' / 'mqar.md')
  assert row == {'Model': 'luna16', 'L': '16', 'N': '2', 'D': '16', 'P': '4', 'lr': '0.003',
                 'Test acc. (%)': f'{statistics.mean(accuracies):.2f} ± '
                                  f'{statistics.stdev(accuracies):.2f}',
                 'n': '2', 'Chance (%)': f"{100 * results[0]['test_chance_rate']:.2f}",
                 'Steps': '4'}
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
  assert {p.name for p in paths} == {'mqar.md', 'mqar.tex', 'mqar.csv', recall.WIDTHS_FIGURE}
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
  results = report.load_results(root)
  panels, _ = recall.width_panels(recall.best_rows(recall.rows_of(results, 'last')))
  lines = panels['L = 16, N = 2']
  assert {d: round(c.mean, 6) for d, c in lines['luna16'].items()} == {16: 85.0, 32: 96.0}
  assert lines['transformer'][16].mean == pytest.approx(99.5)


def test_the_capacity_figure_needs_two_pair_counts_and_the_widths_figure_two_widths(
    real_sweep, tmp_path):
  one_n = grid(real_sweep, tmp_path / 'one', {('luna16', 16, 3e-3, 2, 4): (0.5, 0.6),
                                              ('luna16', 16, 3e-3, 2, 8): (0.7, 0.8)})
  assert {p.name for p in report.make_report(one_n, out_dir=tmp_path / 'one_out')} == {
      'mqar.md', 'mqar.tex', 'mqar.csv'}
  points = {('luna16', 16, 3e-3, 2, 4): (0.9, 1.0), ('luna16', 16, 3e-3, 4, 4): (0.5, 0.6),
            ('luna16', 16, 3e-3, 2, 8): (1.0, 1.0), ('luna16', 16, 3e-3, 4, 8): (0.8, 0.9),
            ('transformer', 16, 3e-3, 2, 4): (1.0, 1.0),
            ('transformer', 16, 3e-3, 4, 4): (1.0, 0.98)}
  root = grid(real_sweep, tmp_path / 'capacity', points)
  paths = report.make_report(root, out_dir=tmp_path / 'out')
  assert {p.name for p in paths} == {'mqar.md', 'mqar.tex', 'mqar.csv', recall.CAPACITY_FIGURE}
  assert (tmp_path / 'out' / recall.CAPACITY_FIGURE).stat().st_size > 0
  results = report.load_results(root)
  panels, chances = recall.capacity_panels(recall.best_rows(recall.rows_of(results, 'last')))
  lines = panels['L = 16, D = 16']
  assert sorted(lines) == ['Luna P=4', 'Luna P=8', 'Transformer']
  assert {n: round(c.mean, 6) for n, c in lines['Luna P=4'].items()} == {2: 95.0, 4: 55.0}
  assert chances['L = 16, D = 16'] == {2: 50.0, 4: 25.0}


def test_the_same_setting_and_seed_twice_is_an_error(real_sweep, tmp_path):
  for name in ('a', 'b'):
    derive(seed_runs(real_sweep)[0], tmp_path / 'parent' / name, 0.5)
  with pytest.raises(ValueError, match='Two results for task/model/head/seed'):
    report.load_results(tmp_path / 'parent')
  derive(seed_runs(real_sweep)[0], tmp_path / 'causal', 0.5)
  derive(seed_runs(real_sweep)[0], tmp_path / 'causal' / 'c', 0.6, causal=True)
  [bidirectional, causal] = recall.rows_of(report.load_results(tmp_path / 'causal'), 'last')
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
