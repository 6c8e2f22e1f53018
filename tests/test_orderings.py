"""report's evidence: the groups, the published orderings with their Welch intervals and verdicts,
and the record, from fabricated run folders (the sweep layout) and record CSVs."""

import csv
import json
import statistics

import numpy as np
import pytest

from lra_luna import published
from lra_luna import report
from lra_luna import tables
from lra_luna.report import orderings
from lra_luna.report import record


def write_run(root, task, model, seed, accuracy, head='cls', preset='', steps=1500,
              environment=None, best=None):
  """A finished run's results.json (accuracies as fractions; `best` defaults to `accuracy`)."""
  run = root / task / model / head / f'seed{seed}'
  run.mkdir(parents=True)
  result = {'task': task, 'model': model, 'head': head, 'seed': seed, 'steps': steps,
            'run': {'preset': preset, 'steps': steps, 'protocol': 'lra', 'shortened': []},
            'best': {'test_accuracy': accuracy if best is None else best},
            'last': {'test_accuracy': accuracy}}
  if environment:
    result['environment'] = environment
  (run / 'results.json').write_text(json.dumps(result))
  (run / 'metrics.jsonl').write_text(json.dumps({'step': steps, 'steps_per_s': 5.0}) + '\n')
  return run


def quick_sweep(root, models: dict) -> None:
  """{model: [accuracy per seed]} on quick ListOps."""
  for model, accuracies in models.items():
    for seed, accuracy in enumerate(accuracies):
      write_run(root, 'listops', model, seed, accuracy,
                preset=f'listops.py:{model},quick', environment={'commit': 'abc1234'})


HEADS = {'s4d': 'mean', 'transformer': 'cls'}  # each preset's own head


def table_rows(path) -> list[list[str]]:
  return [row for table in tables.parse_markdown(path.read_text()) for row in table['rows']]


def test_welch_interval_matches_scipys_and_the_verdicts():
  from scipy import stats  # pylint: disable=import-outside-toplevel
  a, b = [1, 2, 3, 4, 5.5], [0, 0.5, 1, 2, 1.2]
  diff, low, high = orderings.welch(a, b)
  expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
  assert diff == pytest.approx(np.mean(a) - np.mean(b))
  assert (low, high) == pytest.approx((expected.low, expected.high))
  assert orderings.verdict(0.5, 2.0) == 'reproduces'
  assert orderings.verdict(-2.0, -0.5) == 'reversed'
  assert orderings.verdict(-0.5, 2.0) == 'not distinguishable'
  assert orderings.verdict(-1.0, 2.0, within=3.0) == 'reproduces'
  assert orderings.verdict(3.5, 6.0, within=3.0) == 'reversed'
  assert orderings.verdict(1.0, 6.0, within=3.0) == 'not distinguishable'


def test_report_prints_the_orderings_of_a_quick_sweep_of_two_models(tmp_path, capsys):
  luna, transformer = [0.50, 0.52, 0.51], [0.36, 0.38, 0.37]
  quick_sweep(tmp_path / 'sweep', {'luna16': luna, 'transformer': transformer})
  assert report.main([str(tmp_path / 'sweep'), '--checkpoint', 'best']) == 0
  out = capsys.readouterr().out
  caption = next(line for line in out.splitlines() if line.startswith('Published orderings'))
  # The size, steps and checkpoint it is drawn from; published values are full size.
  assert 'size quick (ListOps 1,500 steps)' in caption and 'best checkpoint' in caption
  assert "published: the papers' full-size numbers" in caption
  diff, low, high = orderings.welch([100 * a for a in luna], [100 * t for t in transformer])
  assert diff == pytest.approx(14.0)
  # The Luna paper's claim, with its own numbers (its re-implemented Transformer) and source.
  row = (f'| listops | Luna-16 within 3 points of Transformer | 37.43 vs 37.11 | '
         f'{published.LUNA_PAPER}, Table 1 | 51.00 ± 1.00 (n = 3) | 37.00 ± 1.00 (n = 3) | '
         f'+{diff:.2f} [+{low:.2f}, +{high:.2f}] | reversed |')
  assert row in out
  assert '1 of 1 distinguishable (0 reproduce, 1 reversed).' in out
  written = tmp_path / 'sweep' / 'report'
  assert (written / 'orderings.md').read_text() in out and (written / 'groups.png').stat().st_size


def test_two_sweeps_in_one_record_give_the_orderings_between_them(tmp_path, capsys):
  """Two sweep folders (S4D, the Transformer) merged into one record; the record then gives the
  ordering the two folders give together, and a rerun replaces its row."""
  s4d, transformer = [0.40, 0.42, 0.41], [0.30, 0.31, 0.29]
  for model, accuracies in (('s4d', s4d), ('transformer', transformer)):
    for seed, accuracy in enumerate(accuracies):
      write_run(tmp_path / model, 'listops', model, seed, accuracy, HEADS[model],
                f'listops.py:{model},mid', 1600,
                environment={'commit': 'abc1234', 'dirty': True, 'cpu': 'AMD EPYC'})
  rec = tmp_path / 'record.csv'
  for model in ('s4d', 'transformer'):
    assert report.main([str(tmp_path / model), '--record', str(rec)]) == 0
  assert 'record: 3 runs merged into' in capsys.readouterr().out
  rows = list(csv.DictReader(rec.open()))
  assert len(rows) == 6 and rows[0] == {
      'size': 'mid', 'task': 'listops', 'group': 's4d', 'seed': '0', 'steps': '1600',
      'best': '40.00', 'last': '40.00', 'commit': 'abc1234+dirty', 'machine': 'AMD EPYC',
      'config': 'listops.py:s4d,mid'}
  assert report.main([str(rec), '--out_dir', str(tmp_path / 'out')]) == 0
  out = capsys.readouterr().out
  assert 'size mid (ListOps 1,600 steps)' in out
  assert ('| listops | S4D > Transformer | 60.47 vs 36.37 | '
          f'{published.S4D_PAPER}, LRA table; {published.LRA_PAPER}, Table 1 | '
          '41.00 ± 1.00 (n = 3) | 30.00 ± 1.00 (n = 3) | +11.00 [') in out
  assert '| reproduces |' in out and '1 of 1 distinguishable (1 reproduce, 0 reversed).' in out
  assert '*' not in out  # every run has its commit
  # A rerun of one seed replaces its row.
  write_run(tmp_path / 'rerun', 'listops', 's4d', 0, 0.5, 'mean', 'listops.py:s4d,mid', 1600)
  assert report.main([str(tmp_path / 'rerun'), '--record', str(rec)]) == 0
  rows = list(csv.DictReader(rec.open()))
  assert len(rows) == 6 and rows[0]['best'] == '50.00' and rows[0]['commit'] == ''


def test_rows_without_a_commit_are_marked_in_every_table(tmp_path):
  rec = tmp_path / 'record.csv'
  rec.write_text('size,task,group,seed,steps,best,last,commit,machine,config\n'
                 'mid,listops,s5,0,1600,31.90,,,,"listops.py:s5,mid"\n'
                 'mid,listops,s5,1,1600,24.40,,abc1234,Xeon,"listops.py:s5,mid"\n'
                 'mid,listops,s4d,0,1600,32.80,,abc1234,Xeon,"listops.py:s4d,mid"\n'
                 'mid,listops,s4d,1,1600,33.50,,abc1234,Xeon,"listops.py:s4d,mid"\n')
  report.make_report(rec, 'best', out_dir=tmp_path / 'out')
  groups = {row[1]: row for row in table_rows(tmp_path / 'out' / 'groups.md')}
  assert groups['S5'][-1] == 'not recorded (1), abc1234 (1)' and groups['S4D'][-1] == 'abc1234'
  assert groups['S5'][2:4] == ['31.90, 24.40', f'28.15 ± {statistics.stdev([31.9, 24.4]):.2f} (n = 2)']
  assert groups['S5'][4:6] == ['62.15', f'{published.S5_PAPER}, Table 1']
  ordering = table_rows(tmp_path / 'out' / 'orderings.md')[0]
  assert ordering[1] == 'S5 > S4D' and ordering[4].endswith('(n = 2)*')
  assert not ordering[5].endswith('*')
  assert 'no recorded commit' in (tmp_path / 'out' / 'orderings.md').read_text()


def test_the_two_pathfinder_transformer_values_name_their_papers(tmp_path):
  """LRA's Transformer (71.40) is the group's published value; the Luna paper's claim compares
  Luna-16 with its own re-implemented Transformer (71.83)."""
  for seed in range(2):
    write_run(tmp_path, 'pathfinder', 'luna16', seed, 0.5 + seed / 100, 'mean',
              preset='pathfinder.py:luna16,mid')
    write_run(tmp_path, 'pathfinder', 'transformer', seed, 0.5 - seed / 100, 'mean',
              preset='pathfinder.py:transformer,mid')
  report.make_report(tmp_path, 'last', out_dir=tmp_path / 'out')
  groups = {row[1]: row for row in table_rows(tmp_path / 'out' / 'groups.md')}
  assert groups['Transformer'][4:6] == ['71.40', f'{published.LRA_PAPER}, Table 1']
  ordering = table_rows(tmp_path / 'out' / 'orderings.md')[0]
  assert ordering[1:4] == ['Luna-16 > Transformer', '78.36 vs 71.83',
                           f'{published.LUNA_PAPER}, Table 1']


def test_a_second_head_of_a_model_is_its_own_group(tmp_path):
  preset = 'listops.py:luna16,mid'  # pools [CLS]; sweep --heads mean_p pools P instead
  for seed, (cls, mean_p) in enumerate([(0.30, 0.50), (0.32, 0.52)]):
    write_run(tmp_path, 'listops', 'luna16', seed, cls, 'cls', preset)
    write_run(tmp_path, 'listops', 'luna16', seed, mean_p, 'mean_p', preset)
  report.make_report(tmp_path, 'last', out_dir=tmp_path / 'out')
  groups = {row[1]: row for row in table_rows(tmp_path / 'out' / 'groups.md')}
  # Its published value is the Luna paper's Table 3 row of that head.
  assert groups['Luna-16, P head'][3:6] == ['51.00 ± 1.41 (n = 2)', '38.06',
                                            f'{published.LUNA_PAPER}, Table 3']
  ordering = table_rows(tmp_path / 'out' / 'orderings.md')[0]
  assert ordering[1:4] == ['Luna-16, P head > Luna-16', '38.06 vs 37.43',
                           f'{published.LUNA_PAPER}, Table 3']


def test_sizes_are_apart_and_one_is_chosen_with_size(tmp_path, capsys):
  for seed, (mid, long) in enumerate([(0.25, 0.49), (0.27, 0.51)]):
    write_run(tmp_path, 'listops', 's5', seed, mid, 'mean', 'listops.py:s5,mid', 1600)
    write_run(tmp_path / 'long', 'listops', 's5', seed, long, 'mean', 'listops.py:s5,mid,long',
              25600)
  # One seed of two sizes would count twice in Table 1: the folder needs --size.
  assert report.main([str(tmp_path)]) == 1
  assert 'They are of sizes mid and mid,long: choose one with --size.' in capsys.readouterr().err
  assert report.main([str(tmp_path), '--size', 'mid,long', '--record', str(tmp_path / 'r.csv'),
                      '--out_dir', str(tmp_path / 'o1')]) == 0
  out = capsys.readouterr().out
  assert 'size mid,long (ListOps 25,600 steps)' in out and '| listops | S5 | 49.00, 51.00 |' in out
  assert report.main([str(tmp_path), '--size', 'long']) == 1
  assert "no finished run of size 'long'; its sizes: mid, mid,long" in capsys.readouterr().err
  # A record holds both sizes: each group and ordering of its own size.
  assert report.main([str(tmp_path), '--size', 'mid', '--record', str(tmp_path / 'r.csv'),
                      '--out_dir', str(tmp_path / 'o2')]) == 0
  report.make_report(tmp_path / 'r.csv', 'last', out_dir=tmp_path / 'out')
  groups = table_rows(tmp_path / 'out' / 'groups.md')
  assert [row[:3] for row in groups] == [['mid', 'listops', 'S5'], ['mid,long', 'listops', 'S5']]
  caption = (tmp_path / 'out' / 'groups.md').read_text().splitlines()[0]
  assert 'size mid (ListOps 1,600 steps); size mid,long (ListOps 25,600 steps)' in caption


@pytest.mark.parametrize('text, message', [
    ('task,seed\nlistops,0\n', 'the columns are task, seed, not size, task'),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,forty,,,,\n', "line 2: seed 0, best 'forty'"),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,40.0,,,,\nmid,listops,s4d,0,1600,41.0,,,,\n',
     'line 3: the same run .* as line 2'),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,40.0,,,,\n', 'have no last accuracy'),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n', 'holds no run'),
])
def test_a_bad_record_is_refused_in_one_line_naming_its_line(tmp_path, capsys, text, message):
  rec = tmp_path / 'record.csv'
  rec.write_text(text)
  assert report.main([str(rec), '--checkpoint', 'last']) == 1
  error = capsys.readouterr().err.strip()
  assert len(error.splitlines()) == 1 and str(rec) in error
  assert __import__('re').search(message, error), error


def test_a_record_is_no_folder_to_record(tmp_path, capsys):
  rec = tmp_path / 'record.csv'
  rec.write_text(','.join(record.COLUMNS) + '\nmid,listops,s4d,0,1600,40.0,,,,\n')
  assert report.main([str(rec), '--record', str(tmp_path / 'other.csv')]) == 1
  assert 'is a record already; --record takes a sweep folder' in capsys.readouterr().err
  assert report.main([str(tmp_path / 'missing.csv')]) == 1
  assert 'no such record' in capsys.readouterr().err


def test_run_size_reads_the_preset_words():
  assert report.run_size({'run': {'preset': 'listops.py:s5,mid,long,spt'}}) == 'mid,long'
  assert report.run_size({'run': {'preset': 'listops.py:luna16'}}) == 'full'
  assert report.run_size({'run': {'preset': 'listops.py:luna16,quick'}}) == 'quick'
  assert report.run_size({}) == report.UNRECORDED


def test_every_ordering_has_a_source_for_its_claim():
  """Each ordering names where its claim is printed: both groups' published values (paper and
  table) or, for groups without one (SPT, rotary), the paper that claims it."""
  for ordering in orderings.ORDERINGS:
    values, source = orderings.claimed(ordering)
    assert source, ordering
    assert values or ordering.reference, ordering
