"""report: tables and figure from fabricated results.json files in the sweep layout."""

import csv
import json
import statistics

import pytest

import ml_collections

from lra_luna import config_lib
from lra_luna import published
from lra_luna import registry
from lra_luna import report
from lra_luna import tables
from lra_luna.training import run_folder

# (task, model, head) -> test accuracies (fractions) of the last checkpoint, one per seed.
LAST = {
    ('listops', 'luna16', 'cls'): [0.36, 0.38, 0.40],
    ('text', 'luna16', 'cls'): [0.65, 0.66],
    ('retrieval', 'luna16', 'cls'): [0.79],
    ('image', 'luna16', 'cls'): [0.46, 0.47],
    ('pathfinder', 'luna16', 'cls'): [0.78, 0.79],
    ('listops', 'luna16', 'mean_p'): [0.39, 0.41],
    ('listops', 'transformer', 'cls'): [0.30, 0.34],  # only ListOps: averages are missing
}
BEST_OFFSET = 0.01  # best = last + 1 point, to tell the two apart


def write_result(root, task, model, head, seed, last, run=None):
  workdir = root / task / model / head / f'seed{seed}'
  workdir.mkdir(parents=True)
  section = lambda acc: {'step': 100, 'val_accuracy': acc, 'val_loss': 1.0, 'test_accuracy': acc,
                         'test_loss': 1.0, 'test_examples': 500}
  result = {'task': task, 'model': model, 'head': head, 'seed': seed, 'num_params': 1000,
            'steps': 100, 'val_accuracy': last, 'val_loss': 1.0, 'test_accuracy': last,
            'test_loss': 1.0, 'test_majority_rate': 0.1,
            'last': section(last), 'best': section(last + BEST_OFFSET)}
  if run is not None:
    result['run'] = run
  (workdir / 'results.json').write_text(json.dumps(result))
  # Logged training speed, read by Figure 1 when no profile is given.
  (workdir / 'metrics.jsonl').write_text(
      ''.join(json.dumps({'step': s, 'steps_per_s': 10.0 + s}) + '\n' for s in (50, 100)))
  return workdir


@pytest.fixture
def sweep(tmp_path):
  for (task, model, head), accs in LAST.items():
    for seed, acc in enumerate(accs):
      write_result(tmp_path / 'sweep', task, model, head, seed, acc)
  return tmp_path / 'sweep'


def test_means_stds_and_averages(sweep):
  summary = report.summarize(report.load_results(sweep), 'last')
  cell = summary[('luna16', 'cls')]['listops']
  assert cell.mean == pytest.approx(38.0)
  assert cell.std == pytest.approx(2.0)  # sample std (ddof=1) of 36, 38, 40
  assert cell.n == 3
  one_seed = summary[('luna16', 'cls')]['retrieval']
  assert (one_seed.mean, one_seed.std, one_seed.n) == (pytest.approx(79.0), None, 1)

  rows = {(r.label, r.head, r.source): r for r in report.table1(summary, 'last').rows}
  ours = rows[('luna16', 'cls', 'ours')].values
  means = [38.0, 65.5, 79.0, 46.5, 78.5]
  assert ours[report.AVG].mean == pytest.approx(statistics.fmean(means))
  assert ours[report.AVG_NO_RETRIEVAL].mean == pytest.approx(
      statistics.fmean([38.0, 65.5, 46.5, 78.5]))
  # Tasks not run are missing, and so are the averages over them.
  transformer = rows[('transformer', 'cls', 'ours')].values
  assert transformer['listops'].mean == pytest.approx(32.0)
  assert all(transformer.get(k) is None for k in ('text', report.AVG, report.AVG_NO_RETRIEVAL))
  # The papers' rows sit beside ours.
  luna_paper = rows[('Luna-16', 'cls', f'{published.LUNA_PAPER}, Table 1')].values
  assert luna_paper['listops'].mean == 37.43 and luna_paper[report.AVG].mean == 61.46
  assert ('Transformer', '', f'{published.LRA_PAPER}, Table 1') in rows


def test_best_vs_last(sweep):
  results = report.load_results(sweep)
  last = report.summarize(results, 'last')[('luna16', 'cls')]['listops'].mean
  best = report.summarize(results, 'best')[('luna16', 'cls')]['listops'].mean
  assert best == pytest.approx(last + 100 * BEST_OFFSET)


def test_writes_three_formats_with_missing_cells(sweep, tmp_path):
  out = tmp_path / 'out'
  paths = report.make_report(sweep, checkpoint='best', out_dir=out)
  names = {p.name for p in paths}
  for table in ('table1', 'table3'):
    assert {f'{table}.md', f'{table}.tex', f'{table}.csv'} <= names
  md = (out / 'table1.md').read_text()
  assert 'best checkpoint' in md and '39.00 ± 2.00 (3)' in md  # best = last + 1
  transformer_line = next(l for l in md.splitlines() if l.startswith('| Transformer | cls | ours'))
  assert '—' in transformer_line and ' 0.00' not in transformer_line
  tex = (out / 'table1.tex').read_text()
  assert r'\toprule' in tex and r'\bottomrule' in tex and r'$\pm$' in tex and 'best checkpoint' in tex

  rows = list(csv.DictReader((out / 'table1.csv').open()))
  ours = {(r['model'], r['head']): r for r in rows if r['source'] == 'ours'}
  assert ours[('transformer', 'cls')]['text_mean'] == ''
  assert ours[('transformer', 'cls')]['avg_mean'] == ''
  assert ours[('luna16', 'cls')]['checkpoint'] == 'best'
  assert float(ours[('luna16', 'cls')]['listops_mean']) == pytest.approx(39.0)
  assert ours[('luna16', 'cls')]['retrieval_std'] == ''  # one seed: no sample std
  assert ours[('luna16', 'cls')]['retrieval_n'] == '1'

  # Table 3: cls vs mean_p; mean_p ran only ListOps, so its average is missing.
  rows3 = list(csv.DictReader((out / 'table3.csv').open()))
  mean_p = next(r for r in rows3 if r['source'] == 'ours' and r['head'] == 'mean_p')
  assert float(mean_p['listops_mean']) == pytest.approx(41.0)
  assert mean_p['text_mean'] == '' and mean_p['avg_mean'] == ''
  assert any(r['model'] == 'Luna-16, P' and r['listops_mean'] == '38.0600' for r in rows3)


# A bare list of points with peak memory, and what lra_luna/profile.py writes.
PROFILES = {
    'brief': [{'model': 'luna16', 'length': 1000, 'steps_per_s': 5.0, 'memory_bytes': 1e8},
              {'model': 'transformer', 'length': 1000, 'steps_per_s': 4.0, 'memory_bytes': 4e8},
              {'model': 'transformer', 'length': 4000, 'oom': True}],
    'profile.py': {'points': [
        {'model': 'luna16', 'length': 1000, 'status': 'ok', 'steps_per_s': 5.0,
         'estimated_bytes': 1e8, 'device_peak_bytes': None},
        {'model': 'transformer', 'length': 1000, 'status': 'ok', 'steps_per_s': 4.0,
         'estimated_bytes': 4e8, 'device_peak_bytes': None},
        {'model': 'transformer', 'length': 4000, 'status': 'oom', 'error': 'RESOURCE_EXHAUSTED'}]},
}


@pytest.mark.parametrize('profile_kind', [*PROFILES, None])
def test_figure_written(sweep, tmp_path, profile_kind):
  profile = None
  if profile_kind:
    profile = tmp_path / run_folder.PROFILE_FILE
    profile.write_text(json.dumps(PROFILES[profile_kind]))
  paths = report.make_report(sweep, profile=profile, out_dir=tmp_path / 'out')
  figures = [p for p in paths if p.name.startswith('figure1')]
  assert sorted(p.suffix for p in figures) == ['.pdf', '.png']
  assert all(p.stat().st_size > 0 for p in figures)


@pytest.mark.parametrize('profile_kind, memory_key', [('brief', 'memory_bytes'),
                                                      ('profile.py', 'estimated_bytes')])
def test_profile_fields_read(profile_kind, memory_key):
  points, key = report.measured_points(PROFILES[profile_kind])
  assert key == memory_key
  assert points == [
      {'model': 'luna16', 'length': 1000, 'steps_per_s': 5.0, 'memory_bytes': 1e8},
      {'model': 'transformer', 'length': 1000, 'steps_per_s': 4.0, 'memory_bytes': 4e8}]


def test_profile_length_is_longest_common_measured():
  points, _ = report.measured_points([
      {'model': 'a', 'length': 1000, 'steps_per_s': 5.0, 'memory_bytes': 1},
      {'model': 'a', 'length': 4000, 'steps_per_s': 2.0, 'memory_bytes': 3},
      {'model': 'b', 'length': 1000, 'steps_per_s': 4.0, 'memory_bytes': 2},
      {'model': 'b', 'length': 4000, 'oom': True}])
  label, speeds = report.profile_speeds(points, {'a', 'b'})
  assert '1000' in label and speeds == {'a': (5.0, 1), 'b': (4.0, 2)}


def test_duplicate_seed_is_an_error(sweep):
  write_result(sweep / 'copy', 'listops', 'luna16', 'cls', 0, 0.5)
  with pytest.raises(ValueError, match='Two results'):
    report.load_results(sweep)


def test_cli_fails_cleanly_on_empty_folder(tmp_path, capsys):
  assert report.main([str(tmp_path)]) == 1
  assert 'No results.json' in capsys.readouterr().err


def test_published_averages_match_their_rows():
  """Averages as printed equal the mean of their scores, except where a row's note says the
  paper misprinted it (Sinkhorn: 51.39 printed, its scores average 51.48)."""
  rows = registry.table1_rows() + published.TABLE3
  luna_table1 = [r for r in registry.table1_rows() if r.table == 'Table 1'
                 and r.paper in (published.LRA_PAPER, published.LUNA_PAPER)]
  assert len(luna_table1) == 15  # the Luna paper's Table 1 (other papers' rows may follow)
  for row in rows:
    values = list(row.accuracy.values())
    mean = statistics.fmean(values)
    if row.average is None:  # a paper that printed no five-task average says why
      assert row.note, row.label
    elif row.note:
      assert row.average != pytest.approx(mean, abs=0.0101) and f'{mean:.2f}' in row.note
    else:
      assert row.average == pytest.approx(mean, abs=0.0101), row.label
    if row.average_no_retrieval is not None:
      rest = [v for t, v in row.accuracy.items() if t != 'retrieval']
      assert row.average_no_retrieval == pytest.approx(statistics.fmean(rest), abs=0.0101)


def test_table1_shows_the_s5_and_lru_papers_rows(tmp_path):
  """S5 (its Table 1) and LRU (its Table 3) beside our rows; LRU's coloured sCIFAR stays out of
  the Image column, with a note. The numbers as the papers print them, written out here."""
  for seed, accuracy in enumerate([0.55, 0.57]):
    write_result(tmp_path, 'listops', 's5', 'mean', seed, accuracy)
    write_result(tmp_path, 'listops', 'lru', 'mean', seed, accuracy)
  rows = {r.label: r for r in report.table1(
      report.summarize(report.load_results(tmp_path), 'last'), 'last').rows}
  s5, lru = rows['S5'], rows['LRU']
  assert s5.source == f'{published.S5_PAPER}, Table 1' and lru.source == (
      f'{published.LRU_PAPER}, Table 3')
  assert [s5.values[t].mean for t in ('listops', 'text', 'retrieval', 'image', 'pathfinder')] == [
      62.15, 89.31, 91.40, 88.00, 95.33]
  assert s5.values[report.AVG].mean == 87.46
  assert [lru.values[t].mean for t in ('listops', 'text', 'retrieval', 'pathfinder')] == [
      60.2, 89.4, 89.9, 95.1]
  assert 'image' not in lru.values and report.AVG not in lru.values
  md = report.as_table(report.table1(report.summarize(report.load_results(tmp_path), 'last'),
                                     'last'), 'last')
  lru_line = next(row for row in md.rows if row[0] == 'LRU')
  assert lru_line[3 + 3] == '—'  # the Image cell
  assert any('coloured CIFAR-10' in note for note in md.notes)


GENERATED = {'source': 'generated', 'path': '/data/listops-generated',
             'generator': {'generator': 'lra_luna.datasets.listops',
                           'settings': {'num_train': 96000, 'seed': 0}},
             'examples': {'train': 96000, 'validation': 2000, 'test': 2000}}
RELEASE = {'source': 'release', 'path': '/data/listops-1000',
           'examples': {'train': 96000, 'validation': 2000, 'test': 2000}}


def set_field(workdir, key, value):
  """Sets one field of a run's results.json."""
  path = workdir / 'results.json'
  path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))


def test_tables_say_which_data_and_refuse_mixed_data(sweep, tmp_path):
  listops_runs = sorted(sweep.glob('listops/*/*/seed*'))
  for workdir in listops_runs:
    set_field(workdir, 'data', GENERATED)
  report.make_report(sweep, out_dir=tmp_path / 'out')
  table = (tmp_path / 'out' / 'table1.md').read_text()
  assert 'ListOps: generated (num_train 96000, seed 0)' in table
  assert 'Text: not recorded' in table
  # One seed on the release, the others on generated data: no table averages the two.
  set_field(listops_runs[0], 'data', RELEASE)
  with pytest.raises(ValueError, match='listops runs read different data'):
    report.make_report(sweep, out_dir=tmp_path / 'out2')
  # The same data at another path (another machine) is the same data.
  for workdir in listops_runs:
    set_field(workdir, 'data', {**GENERATED, 'path': f'/elsewhere/{workdir.name}'})
  report.make_report(sweep, out_dir=tmp_path / 'out3')


def test_unreadable_or_foreign_results_name_the_file(sweep, capsys):
  bad = sweep / 'text' / 'luna16' / 'cls' / 'seed0' / 'results.json'
  bad.write_text('{"task": "text"')
  assert report.main([str(sweep)]) == 1
  assert f'{bad}: not valid JSON' in capsys.readouterr().err
  bad.write_text('{"accuracy": 0.5}')
  assert report.main([str(sweep)]) == 1
  assert f'{bad}: no task, model, head, seed field' in capsys.readouterr().err
  assert report.main([str(sweep / 'nope')]) == 1
  assert 'is not a folder' in capsys.readouterr().err


QUICK = f'{config_lib.CONFIG_DIR}/listops.py:luna16,quick'


def run_record(spec=QUICK, *overrides):
  """results.json 'run' of a run of `spec` with --config.<key>=<value> `overrides`."""
  return config_lib.run_record(config_lib.load_config(spec, [f'--config.{o}' for o in overrides]))


def test_run_record_states_the_preset_full_steps_overrides_and_why_shortened():
  full = config_lib.load_config(f'{config_lib.CONFIG_DIR}/listops.py:luna16').num_train_steps
  # Where it ran, its seed and its head are no overrides of the preset.
  record = run_record(QUICK, 'num_train_steps=300', 'eval_every=100', 'seed=3',
                      'data_dir=/elsewhere', 'progress_bar=false', 'model.head=mean_p')
  assert record == {'preset': 'listops.py:luna16,quick', 'protocol': 'lra', 'model': 'luna16',
                    'steps': 300, 'full_steps': full,
                    'overrides': ['eval_every=100', 'num_train_steps=300'],
                    'shortened': ['quick config', f'300 of {full} steps']}
  # A full preset as it is: nothing shortened, nothing overridden.
  assert run_record(f'{config_lib.CONFIG_DIR}/text.py:transformer') == {
      'preset': 'text.py:transformer', 'protocol': 'lra', 'model': 'transformer',
      'steps': config_lib.load_config('configs/text.py:transformer').num_train_steps,
      'full_steps': config_lib.load_config('configs/text.py:transformer').num_train_steps,
      'overrides': [], 'shortened': []}
  # The authors' protocol is measured against its own full run.
  paper = run_record(f'{config_lib.CONFIG_DIR}/listops.py:quick=true,transformer,paper')
  paper_full = config_lib.load_config('configs/listops.py:transformer,paper').num_train_steps
  assert paper['protocol'] == 'paper' and paper['full_steps'] == paper_full
  assert paper['shortened'][0] == 'quick config'


def test_shortened_reasons_is_the_one_definition():
  config = config_lib.load_config(f'{config_lib.CONFIG_DIR}/listops.py:luna16')
  assert config_lib.shortened_reasons(config) == []
  assert config_lib.shortened_reasons(config, full_steps=config.num_train_steps + 1) == [
      f'{config.num_train_steps} of {config.num_train_steps + 1} steps']
  # A smoke test (read with .get: the field is optional) with a capped evaluation.
  smoke = ml_collections.ConfigDict({**config.to_dict(), 'smoke': True, 'max_eval_batches': 2})
  assert config_lib.shortened_reasons(smoke) == ['smoke test', 'evaluation capped at 2 batches']
  quick = config_lib.load_config(f'{config_lib.CONFIG_DIR}/listops.py:luna16,quick=false')
  assert config_lib.shortened_reasons(quick) == []  # quick=false is the full preset


def test_a_rerun_may_differ_in_its_preset_alone(tmp_path):
  config = config_lib.load_config(QUICK)
  saved = json.loads(config.to_json())
  saved.pop('preset')  # a config.json from before the run record
  assert config_lib.config_differences(saved, config) == []
  saved['eval_every'] = 7
  assert config_lib.config_differences(saved, config) == ['eval_every']


def report_lines(path, start):
  return [l for l in path.read_text().splitlines() if l.startswith(start)]


def test_tables_show_the_run_records_the_same_way_everywhere(sweep, tmp_path):
  shortened = run_record(QUICK, 'num_train_steps=300')
  full = run_record(f'{config_lib.CONFIG_DIR}/listops.py:transformer')
  for workdir in sweep.glob('listops/luna16/cls/seed*'):
    set_field(workdir, 'run', shortened)
  for workdir in sweep.glob('listops/transformer/cls/seed*'):
    set_field(workdir, 'run', full)
  out = tmp_path / 'out'
  report.make_report(sweep, out_dir=out)
  md = out / 'table1.md'
  caption = md.read_text().splitlines()[0]
  words = f'300 steps (lra); SHORTENED: quick config, 300 of {shortened["full_steps"]} steps'
  assert words in caption and 'SHORTENED: 1 of our 3 rows' in caption
  assert "full run." not in caption
  assert 'not recorded' in caption  # luna16's other tasks have no run record
  luna = report_lines(md, '| Luna-16 | cls | ours')[0]
  assert f'ListOps: {words}; overrides: num_train_steps=300; Text, Retrieval, Image, ' \
         'Pathfinder: not recorded |' in luna
  transformer = report_lines(md, '| Transformer | cls | ours')[0]
  assert f'| {full["steps"]} steps (lra) |' in transformer
  assert words in (out / 'table3.md').read_text().splitlines()[0]
  assert 'SHORTENED' in (out / 'table1.tex').read_text().split(r'\label')[0]
  rows = {(r['model'], r['head'], r['source']): r
          for r in csv.DictReader((out / 'table1.csv').open())}
  luna_row = rows[('luna16', 'cls', 'ours')]
  assert luna_row['steps'] == '300; ' and luna_row['overrides'] == 'num_train_steps=300; '
  assert luna_row['shortened'] == f'quick config, 300 of {shortened["full_steps"]} steps; '
  assert rows[('transformer', 'cls', 'ours')]['shortened'] == ''
  assert rows[('transformer', 'cls', 'ours')]['preset'] == 'listops.py:transformer'


def test_a_full_report_says_so_and_an_unrecorded_one_does_not(sweep, tmp_path):
  out = tmp_path / 'out'
  report.make_report(sweep, out_dir=out)
  caption = (out / 'table1.md').read_text().splitlines()[0]
  assert 'Ours trained: not recorded.' in caption and 'full run.' not in caption
  for path in sweep.rglob('results.json'):
    set_field(path.parent, 'run', run_record(f'{config_lib.CONFIG_DIR}/listops.py:luna16'))
  report.make_report(sweep, out_dir=out)
  caption = (out / 'table1.md').read_text().splitlines()[0]
  assert "Every row of ours trained its protocol's full run." in caption
  assert 'SHORTENED' not in caption and 'not recorded' not in caption


def test_a_single_quick_run_is_marked_shortened(tmp_path):
  write_result(tmp_path / 'sweep', 'listops', 'luna16', 'cls', 0, 0.5, run=run_record())
  report.make_report(tmp_path / 'sweep', out_dir=tmp_path / 'out')
  text = (tmp_path / 'out' / 'table1.md').read_text()
  assert 'SHORTENED: quick config' in text.splitlines()[0]
  row = report_lines(tmp_path / 'out' / 'table1.md', '| Luna-16 | cls | ours')[0]
  assert 'SHORTENED' not in row  # one way our rows trained: said once, in the caption
  assert 'full run.' not in text.splitlines()[0]


def test_every_written_markdown_table_is_well_formed(tmp_path):
  """Runs of one row that trained different steps (ListOps 300, Pathfinder 200) share the
  Training cell without a raw ' | '; without a mean_p run there is no Table 3."""
  sweep = tmp_path / 'sweep'
  for seed in (0, 1):
    write_result(sweep, 'listops', 'luna16', 'cls', seed, 0.4,
                 run=run_record(QUICK, 'num_train_steps=300'))
    write_result(sweep, 'pathfinder', 'luna16', 'cls', seed, 0.7,
                 run=run_record(f'{config_lib.CONFIG_DIR}/pathfinder.py:luna16,quick',
                                'num_train_steps=200'))
  paths = report.make_report(sweep, out_dir=tmp_path / 'out')
  written = [p for p in paths if p.suffix == '.md']
  # No mean_p run: Table 3 (the heads compared) is not written.
  assert {p.name for p in written} == {'table1.md', 'groups.md', 'orderings.md'}
  for path in written:
    for table in tables.parse_markdown(path.read_text()):
      assert all(len(row) == len(table['header']) for row in table['rows'])
      assert not any('|' in cell for row in table['rows'] for cell in row)  # not even escaped
  table1 = tables.parse_markdown((tmp_path / 'out' / 'table1.md').read_text())[0]
  assert table1['header'][-1] != 'Training'  # one row of ours: its training is in the caption
  assert '; Pathfinder: 200 steps' in (tmp_path / 'out' / 'table1.md').read_text().splitlines()[0]
  assert 'No ordering has both of its groups here.' in (tmp_path / 'out' / 'orderings.md').read_text()


def test_missing_profile_names_the_flag_says_optional_and_which_command(sweep, tmp_path, capsys):
  missing = tmp_path / 'runs' / 'profile_cpu' / 'profile.json'
  assert report.main([str(sweep), '--profile', str(missing)]) == 1
  error = capsys.readouterr().err.strip()
  assert len(error.splitlines()) == 1
  assert f'--profile {missing}: no such file' in error and 'optional' in error
  assert f'python -m lra_luna.profile --out_dir {missing.parent}' in error
  assert not (sweep / 'report').exists()  # Refused before writing anything.


def label_boxes(fig):
  renderer = fig.canvas.get_renderer()
  return [a.get_window_extent(renderer) for a in fig.axes[0].texts]


def test_figure_without_profile_puts_each_model_at_one_speed_and_labels_apart(sweep):
  # Two heads of luna16 whose runs logged different speeds: one x for the model.
  for workdir in sweep.glob('listops/luna16/mean_p/seed*'):
    (workdir / 'metrics.jsonl').write_text(
        ''.join(json.dumps({'step': s, 'steps_per_s': 99.0}) + '\n' for s in (50, 100)))
  summary = report.summarize(report.load_results(sweep), 'last')
  fig = report.figure1(summary, report.load_results(sweep), None, 'last')
  xs = {}
  for collection, text in zip(fig.axes[0].collections, fig.axes[0].texts):
    xs.setdefault(text.get_text().split(' ')[0], set()).add(collection.get_offsets()[0][0])
  assert all(len(x) == 1 for x in xs.values()), xs
  # The tables' labels (Luna-16, not the config name luna16), each head apart; whole circles.
  assert [t.get_text() for t in fig.axes[0].texts] == ['Luna-16']  # the only row with the average
  assert not any(c.get_clip_on() for c in fig.axes[0].collections)
  assert 'median logged over all runs of each model' in fig.axes[0].get_xlabel()
  # Logged speeds carry the machine's load: the axis starts at 0, not at the slowest model.
  left, right = fig.axes[0].get_xlim()
  assert left == 0 and right > max(x for v in xs.values() for x in v)

  # Labels of points at the same place do not overlap.
  results = report.load_results(sweep)
  for r in results:
    if r['model'] == 'transformer':
      r['model'] = 'local'
  summary = {('linear_transformer', 'cls'): {'listops': report.Cell(50.0)},
             ('local', 'cls'): {'listops': report.Cell(50.1)}}
  profile = {'task': 'listops', 'points': [
      {'model': m, 'length': 60, 'status': 'ok', 'steps_per_s': 5.0, 'estimated_bytes': 1e8}
      for m in ('linear_transformer', 'local')]}
  fig = report.figure1(summary, [], profile, 'last')
  boxes = label_boxes(fig)
  assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1])
  assert all(fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 for b in boxes)  # none cut off


def test_figure_states_a_task_mismatch_with_the_profile(sweep, capsys):
  results = report.load_results(sweep)
  summary = report.summarize([r for r in results if r['task'] == 'listops'], 'last')
  profile = {'task': 'text', 'points': PROFILES['profile.py']['points']}
  fig = report.figure1(summary, results, profile, 'last')
  title = fig.axes[0].get_title()
  assert 'TASK MISMATCH' in title and 'TEXT PROFILE' in title and 'LISTOPS' in title
  assert 'task mismatch' in capsys.readouterr().err
  fig = report.figure1(summary, results, {**profile, 'task': 'listops'}, 'last')
  assert 'MISMATCH' not in fig.axes[0].get_title()
