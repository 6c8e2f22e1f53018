"""The word mid (docs/mid.md): its configs build and validate for every task and model, the mid
generators' first examples are seeded and exact, the word's bad combinations are refused in one
line, --print_config's full-size bound, and the mid campaign's groups. Nothing here trains."""

import hashlib
import pathlib

import numpy as np
import pytest

from lra_luna import config_lib
from lra_luna import registry
from lra_luna import run_size
from lra_luna.campaign import plan as plan_lib
from lra_luna.campaign import spec as spec_lib
from lra_luna.datasets import listops
from lra_luna.datasets import pathfinder_generator as pathfinder_gen

pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')

MID_TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder')


@pytest.mark.parametrize('task', MID_TASKS)
def test_every_model_has_a_valid_mid_config_shorter_than_the_full_one(task):
  full = config_lib.load_config(f'configs/{task}.py:transformer')
  for model in registry.MODELS:
    config = config_lib.load_config(f'configs/{task}.py:{model},mid')
    config_lib.validate(config)
    assert config.model_name == model
    assert config.num_train_steps < full.num_train_steps
    assert config.model.num_layers == 2 and config.model.dim <= 64
    assert 'mid config' in config_lib.shortened_reasons(config)


def test_mid_inputs_are_long():
  lo = config_lib.load_config('configs/listops.py:mid')
  assert lo.data_source == 'generated' and lo.dataset_name == 'listops-mid'
  assert (lo.listops.min_length, lo.listops.max_length, lo.max_length) == (250, 600, 600)
  assert (lo.listops.max_depth, lo.listops.max_args) == (10, 10)  # LRA's generator
  pf = config_lib.load_config('configs/pathfinder.py:mid')
  assert pf.dataset_name == 'pathfinder-mid' and pf.max_length == 1024
  assert (pf.pathfinder.resolution, pf.pathfinder.difficulty) == (32, 'easy')
  for task in ('text', 'retrieval', 'image'):
    assert config_lib.load_config(f'configs/{task}.py:mid').max_length >= 1000


def test_the_first_listops_mid_examples_are_seeded_and_exact(tmp_path):
  settings = dict(config_lib.load_config('configs/listops.py:mid').listops)
  settings.update(num_train=6, num_val=2, num_test=2)
  listops.generate_listops(tmp_path / 'a', progress=False, **settings)
  listops.generate_listops(tmp_path / 'b', progress=False, **settings)
  data = (tmp_path / 'a' / 'basic_train.tsv').read_bytes()
  assert data == (tmp_path / 'b' / 'basic_train.tsv').read_bytes()
  assert hashlib.sha256(data).hexdigest() == (
      'c18c0ea19e0eb2a186c0703c7dd025ccb285f9ecfbf5f2849f7a5b1f08e30fa5')
  rows = [line.split('\t') for line in data.decode().splitlines()[1:]]
  assert [len(listops.token_ids(e)) for e, _ in rows] == [556, 578, 492, 364, 457, 510]
  assert [listops.evaluate_expression(e) for e, _ in rows] == [int(v) for _, v in rows]
  assert [int(v) for _, v in rows] == [8, 9, 3, 3, 7, 9]


def test_the_first_pathfinder_mid_images_are_seeded_and_exact():
  config = config_lib.load_config('configs/pathfinder.py:mid')
  expected = [(1, '4e8903dc4b9f8b6b'), (1, 'fd5fc824ff52118a'), (0, '3d6bd22b6790f8c3')]
  for index, (label, digest) in enumerate(expected):
    sample = pathfinder_gen.make_pathfinder_image(
        32, config.pathfinder.difficulty, seed=config.pathfinder.seed, batch=0, index=index)
    assert sample.image.shape == (32, 32) and sample.image.dtype == np.uint8
    assert sample.label == label
    assert hashlib.sha256(sample.image.tobytes()).hexdigest()[:16] == digest


@pytest.mark.parametrize('spec, message', [
    ('configs/listops.py:s4d,mid,quick', 'quick and mid'),
    ('configs/pathx.py:s4d,mid', 'configs/pathx.py has no mid size'),
    ('configs/listops.py:s4d,mid=maybe', 'expected mid=true or mid=false'),
    ('configs/listops.py:s4d,long', 'give it with mid'),
])
def test_bad_mid_combinations_are_one_line(spec, message):
  with pytest.raises(ValueError, match=message) as error:
    config_lib.load_config(spec)
  assert '\n' not in str(error.value)


def test_print_config_bounds_the_full_size_run_beside_the_mid_one(monkeypatch):
  costs = {}

  def step_cost(config):
    costs[config.preset] = config.num_train_steps
    return 2_000_000, 1e9 * config.max_length  # FLOPs grow with the length: the full run's

  monkeypatch.setattr(run_size, 'step_cost', step_cost)
  mid = config_lib.load_config('configs/listops.py:s4d,mid')
  line = run_size.full_size_line(mid, flops_per_s=1e12, device='CPU')
  assert list(costs) == ['listops.py:s4d']  # the full preset, not the mid one
  # 5000 steps x 2000 tokens x 1e9 FLOP / 1e12 FLOP/s = 10,000 s.
  assert line.startswith('full size (listops.py:s4d: 5000 steps of batch 32 x 2000 tokens, 2 M')
  assert 'at least 2:46:40 (h:mm:ss) on this CPU' in line
  full = config_lib.load_config('configs/listops.py:s4d')
  assert run_size.full_size_line(full, flops_per_s=1e12, device='CPU') is None


def test_long_is_the_mid_config_with_sixteen_times_the_steps():
  mid = config_lib.load_config('configs/listops.py:s5,mid')
  long = config_lib.load_config('configs/listops.py:s5,mid,long')
  # The same run as the mid config with the overrides of docs/mid.md's 25,600-step groups.
  overridden = config_lib.load_config('configs/listops.py:s5,mid', [
      '--config.num_train_steps=25600', '--config.eval_every=1600',
      '--config.checkpoint_every=1600'])
  assert (long.num_train_steps, long.eval_every, long.checkpoint_every) == (25600, 1600, 1600)
  assert long.warmup_steps == mid.warmup_steps and long.schedule == mid.schedule == 'cosine'
  assert config_lib.config_differences(long.to_dict(), overridden) == []
  assert 'mid config' in config_lib.shortened_reasons(long)
  spt = config_lib.load_config('configs/listops.py:s5,mid,long,spt')
  assert spt.pretraining.num_train_steps == 25600  # pretraining as long as the fine-tuning
  assert config_lib.full_preset(spt) == 'listops.py:s5,spt'
  # Every mid task: its steps times LONG_FACTOR, evaluated once per mid run's length.
  pf_mid = config_lib.load_config('configs/pathfinder.py:s4d,mid')
  pf_long = config_lib.load_config('configs/pathfinder.py:s4d,mid,long')
  assert pf_long.num_train_steps == config_lib.LONG_FACTOR * pf_mid.num_train_steps
  assert pf_long.eval_every == pf_long.checkpoint_every == pf_mid.num_train_steps


def test_the_mid_campaign_names_every_model_and_the_spt_and_rotary_runs():
  spec = spec_lib.load_spec(spec_lib.SPEC_DIR / 'mid.py')
  assert spec.variant == 'mid' and list(spec.seeds) == [0, 1, 2, 3, 4]
  assert set(registry.MODELS) <= set(spec.models)
  extra = [m for m in spec.models if m not in registry.MODELS]
  assert sorted(extra) == ['luna16+spt', 's4d+spt', 'transformer+rotary', 'transformer+spt']
  assert spec_lib.config_spec('listops', 's4d+spt', 'lra', 'mid').endswith(
      'listops.py:s4d,mid,spt')
  assert spec_lib.config_spec('listops', 'transformer+rotary', 'lra', 'mid').endswith(
      'listops.py:transformer,rotary,mid')
  assert spec_lib.config_spec('listops', 's4d+spt', 'lra', 'mid,spt').endswith(
      'listops.py:s4d,mid,spt')  # the word once


def test_the_mid_campaign_plans_spt_and_rotary_groups_with_their_words(tmp_path):
  spec = spec_lib.load_spec(spec_lib.SPEC_DIR / 'mid.py')
  spec.models = ['transformer', 'transformer+rotary', 'transformer+spt', 's4d+spt']
  groups = plan_lib.plan(spec, tmp_path)
  assert {(task, model) for task, model, _ in groups} == {
      (t, m) for t in ('listops', 'pathfinder') for m in spec.models}
  for (task, model, _), runs in groups.items():
    config = runs[0].config
    assert runs[0].workdir.parent.parent.name == model  # its own folder: no mixing with scratch
    assert config_lib.preset_word(config.preset, 'mid')
    assert bool(config.pretraining.objective) == model.endswith('+spt')
    if model.endswith('+spt'):
      assert config.pretraining.mask_rate == {'listops': 0.10, 'pathfinder': 0.50}[task]
    assert (config.model.positions == 'rotary') == (model == 'transformer+rotary')


def test_the_long_campaign_plans_its_groups_at_25600_steps(tmp_path):
  spec = spec_lib.load_spec(spec_lib.SPEC_DIR / 'mid_long.py')
  assert spec.tasks == ['listops'] and 's5+spt' in spec.models
  groups = plan_lib.plan(spec, tmp_path)
  assert {model for _, model, _ in groups} == set(spec.models)
  for (_, model, _), runs in groups.items():
    config = runs[0].config
    assert config.num_train_steps == 25600 and config_lib.preset_word(config.preset, 'long')
    assert config.pretraining.num_train_steps == (25600 if model == 's5+spt' else 0)


def test_every_ordering_names_groups_the_mid_campaign_runs():
  from lra_luna import mid_evidence
  specs = [spec_lib.load_spec(spec_lib.SPEC_DIR / name) for name in ('mid.py', 'mid_long.py')]
  for task, better, worse, _ in mid_evidence.ORDERINGS:
    for group in (better, worse):
      # A head group ('luna16/mean_p', sweep --heads): a campaign model and a head it pools.
      model, _, head = group.partition('/')
      assert any(task in spec.tasks and model in spec.models for spec in specs), (task, group)
      assert not head or head in registry.get(model).heads, group
  assert ('listops', 'transformer+rotary', 'transformer') in {
      o[:3] for o in mid_evidence.ORDERINGS}


def test_welch_interval_matches_scipys_and_the_verdicts():
  from scipy import stats  # pylint: disable=import-outside-toplevel
  from lra_luna import mid_evidence
  a, b = [1, 2, 3, 4, 5.5], [0, 0.5, 1, 2, 1.2]
  diff, low, high = mid_evidence.welch(a, b)
  expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
  assert diff == pytest.approx(np.mean(a) - np.mean(b))
  assert (low, high) == pytest.approx((expected.low, expected.high))
  assert mid_evidence.verdict(0.5, 2.0) == 'reproduces'
  assert mid_evidence.verdict(-2.0, -0.5) == 'reversed'
  assert mid_evidence.verdict(-0.5, 2.0) == 'not distinguishable'
  assert mid_evidence.verdict(-1.0, 2.0, within=3.0) == 'reproduces'
  assert mid_evidence.verdict(3.5, 6.0, within=3.0) == 'reversed'
  assert mid_evidence.verdict(1.0, 6.0, within=3.0) == 'not distinguishable'


def _result(folder, task, model, seed, accuracy, head='cls', preset=''):
  import json  # pylint: disable=import-outside-toplevel
  run = folder / task / model / head / f'seed{seed}'
  run.mkdir(parents=True)
  (run / 'results.json').write_text(json.dumps(
      {'task': task, 'model': model, 'head': head, 'seed': seed, 'run': {'preset': preset},
       'best': {'test_accuracy': accuracy}, 'last': {'test_accuracy': accuracy}}))


def test_mid_evidence_tables_and_figure(tmp_path, capsys):
  from lra_luna import mid_evidence
  for seed, (s4d, transformer) in enumerate([(0.40, 0.30), (0.42, 0.31), (0.41, 0.29)]):
    _result(tmp_path, 'listops', 's4d', seed, s4d)
    _result(tmp_path, 'listops', 'transformer', seed, transformer)
  _result(tmp_path, 'listops', 'luna16', 0, 0.3)  # one seed: in the table, in no ordering
  assert mid_evidence.main([str(tmp_path), '--figure', str(tmp_path / 'mid.png')]) == 0
  out = capsys.readouterr().out
  assert '| listops | S4D | 40.00, 42.00, 41.00 | 41.00 ± 1.00 (n = 3) | 60.47 |' in out
  assert ('| listops | S4D > Transformer | 41.00 ± 1.00 (n = 3) | 30.00 ± 1.00 (n = 3) | +11.00 ['
          in out) and '| reproduces |' in out
  assert 'Luna-16 within' not in out
  assert (tmp_path / 'mid.png').stat().st_size > 0


def test_mid_evidence_keeps_a_second_head_of_a_model_apart(tmp_path, capsys):
  from lra_luna import mid_evidence
  preset = 'listops.py:luna16,mid'  # pools [CLS]; sweep --heads mean_p pools P instead
  for seed, (cls, mean_p) in enumerate([(0.30, 0.50), (0.32, 0.52)]):
    _result(tmp_path, 'listops', 'luna16', seed, cls, 'cls', preset)
    _result(tmp_path, 'listops', 'luna16', seed, mean_p, 'mean_p', preset)
  assert mid_evidence.main([str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert '| listops | Luna-16 | 30.00, 32.00 | 31.00 ± 1.41 (n = 2) | 37.43 |' in out
  # Its published value is the Luna paper's Table 3 row of that head.
  assert '| listops | Luna-16, P head | 50.00, 52.00 | 51.00 ± 1.41 (n = 2) | 38.06 |' in out
  assert ('| listops | Luna-16 P head > [CLS] head (38.06 vs 37.43) | 51.00 ± 1.41 (n = 2) | '
          '31.00 ± 1.41 (n = 2) | +20.00 [') in out


def test_mid_evidence_refuses_a_folder_without_runs_in_one_line(tmp_path):
  from lra_luna import mid_evidence
  with pytest.raises(SystemExit, match='holds no finished run') as error:
    mid_evidence.main([str(tmp_path)])
  assert '\n' not in str(error.value)


def test_a_record_keeps_what_the_run_folders_said(tmp_path, capsys):
  """--record merges each run's row (its commit and machine from results.json); the record then
  gives the tables the folder gave, of one size, and a rerun replaces its row."""
  import csv  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  from lra_luna import mid_evidence
  runs, record = tmp_path / 'runs', tmp_path / 'record.csv'
  for seed, (s4d, transformer) in enumerate([(0.40, 0.30), (0.42, 0.31), (0.41, 0.29)]):
    _result(runs, 'listops', 's4d', seed, s4d, 'mean', preset='listops.py:s4d,mid')
    _result(runs, 'listops', 'transformer', seed, transformer, preset='listops.py:transformer,mid')
  environment = {'commit': 'abc123', 'dirty': True, 'cpu': 'AMD EPYC', 'platform': 'cpu'}
  path = runs / 'listops' / 's4d' / 'mean' / 'seed0' / 'results.json'
  path.write_text(json.dumps({**json.loads(path.read_text()), 'environment': environment}))
  assert mid_evidence.main([str(runs), '--record', str(record)]) == 0
  from_folder = capsys.readouterr().out
  assert 'record: 6 runs merged into' in from_folder
  rows = list(csv.DictReader(record.open()))
  assert [(r['group'], r['seed'], r['best']) for r in rows[:2]] == [('s4d', '0', '40.00'),
                                                                     ('s4d', '1', '42.00')]
  assert (rows[0]['size'], rows[0]['commit'], rows[0]['machine'], rows[0]['config']) == (
      'mid', 'abc123+dirty', 'AMD EPYC', 'listops.py:s4d,mid')
  assert mid_evidence.main([str(record), '--figure', str(tmp_path / 'mid.png')]) == 0
  from_record = capsys.readouterr().out
  assert from_record.replace(f'figure: {tmp_path / "mid.png"}\n', '') == (
      from_folder.split('\n', 1)[1])
  assert (tmp_path / 'mid.png').stat().st_size > 0
  # A rerun of one seed replaces its row; the runs of another size join the record beside them.
  path.write_text(json.dumps({**json.loads(path.read_text()), 'best': {'test_accuracy': 0.5}}))
  for seed, accuracy in enumerate([0.49, 0.51]):
    _result(tmp_path / 'long', 'listops', 's5', seed, accuracy, 'mean',
            preset='listops.py:s5,mid,long')
  assert mid_evidence.main([str(runs), '--record', str(record)]) == 0
  assert mid_evidence.main([str(tmp_path / 'long'), '--record', str(record)]) == 0
  capsys.readouterr()
  rows = list(csv.DictReader(record.open()))
  assert len(rows) == 8 and rows[0]['best'] == '50.00'
  assert mid_evidence.main([str(record), '--size', 'mid,long']) == 0
  assert '| listops | S5 | 49.00, 51.00 | 50.00 ± 1.41 (n = 2) |' in capsys.readouterr().out
  assert mid_evidence.main([str(tmp_path), '--size', 'mid,long']) == 0  # a folder of both sizes
  out = capsys.readouterr().out
  assert '| listops | S5 | 49.00, 51.00 |' in out and 'S4D' not in out
  with pytest.raises(SystemExit, match='sizes mid, mid,long; choose one with --size'):
    mid_evidence.main([str(record)])
  with pytest.raises(SystemExit, match="no finished run of size 'long'; its sizes: mid, mid,long"):
    mid_evidence.main([str(tmp_path), '--size', 'long'])  # an unknown size is refused, not empty


@pytest.mark.parametrize('size', ['mid', 'mid,long'])
def test_the_documented_orderings_are_what_the_record_gives(size, capsys):
  """docs/mid.md's group and ordering tables are mid_evidence's, row for row, on
  docs/mid_results.csv."""
  from lra_luna import mid_evidence
  docs = pathlib.Path(__file__).resolve().parent.parent / 'docs'
  assert mid_evidence.main([str(docs / 'mid_results.csv'), '--size', size]) == 0
  out = capsys.readouterr().out
  orderings = out[out.index('| task | published ordering'):].strip().splitlines()
  assert len(orderings) > 3
  text = (docs / 'mid.md').read_text()
  assert [line for line in orderings if line not in text] == []
  groups = out[:out.index('| task | published ordering')].strip().splitlines()
  assert len(groups) > 3 and [line for line in groups if line not in text] == []


@pytest.mark.parametrize('text, message', [
    ('task,seed\nlistops,0\n', 'the columns are task, seed, not size, task'),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,forty,,,,\n', 'line 2: seed 0, best \'forty\''),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,40.0,,,,\nmid,listops,s4d,0,1600,41.0,,,,\n',
     'line 3: the same run .* as line 2'),
    ('size,task,group,seed,steps,best,last,commit,machine,config\n'
     'mid,listops,s4d,0,1600,40.0,,,,\n', 'have no last accuracy'),
])
def test_a_bad_record_is_refused_in_one_line_naming_its_line(tmp_path, text, message):
  from lra_luna import mid_evidence
  record = tmp_path / 'record.csv'
  record.write_text(text)
  with pytest.raises(SystemExit, match=message) as error:
    mid_evidence.main([str(record), '--checkpoint', 'last'])
  assert '\n' not in str(error.value) and str(record) in str(error.value)


def test_first_token_baseline_predicts_each_operators_most_frequent_value(tmp_path):
  from lra_luna import mid_evidence
  header = 'Source\tTarget\n'
  train = ['( ( [MAX 9 ) 3 ] )\t9', '( ( [MAX 9 ) 1 ] )\t9', '( ( [MIN 0 ) 4 ] )\t0',
           '( ( [MIN 2 ) 4 ] )\t2', '( ( [MIN 2 ) 3 ] )\t2']
  test = ['( ( [MAX 8 ) 9 ] )\t9', '( ( [MIN 5 ) 2 ] )\t2', '( ( [MIN 1 ) 4 ] )\t1',
          '( ( [MAX 1 ) 7 ] )\t7', '( ( [SM 1 ) 1 ] )\t2']
  (tmp_path / 'basic_train.tsv').write_text(header + '\n'.join(train) + '\n')
  (tmp_path / 'basic_test.tsv').write_text(header + '\n'.join(test) + '\n')
  majority, first = mid_evidence.first_token_baseline(tmp_path)
  assert majority == pytest.approx(40.0)  # the most frequent test value (9 or 2): 2 of 5
  assert first == pytest.approx(40.0)     # MAX -> 9 right once, MIN -> 2 right once, SM unseen


def test_masked_token_baselines_match_hand_counts():
  from lra_luna import mid_evidence
  train = [['[MAX', '1', ']'], ['[MAX', '2', ']'], ['[MAX', '2', ']'], ['[MIN', '1', ']'],
           ['[MIN', '1', ']']]
  test = [['[MIN', '1', ']'], ['[MAX', '1', ']'], ['5']]
  scores = mid_evidence.masked_token_baselines(train, test)
  # Always ']' (5 of 15 training tokens): the two ']' of 7 test tokens.
  assert scores['frequency'] == pytest.approx(100 * 2 / 7)
  # Between (start, 1): [MIN (2 against 1); between ([MAX, ]): 2; between ([MIN, ]): 1; the
  # unseen (start, end) falls back to ']': [MIN 1 ] all right, [MAX 1 ] only its ']'.
  assert scores['neighbours'] == pytest.approx(100 * 4 / 7)
  # The most frequent of each kind: [MAX, 1 and ]: all but [MIN and 5.
  assert scores['kind ceiling'] == pytest.approx(100 * 5 / 7)
  with pytest.raises(ValueError, match='no test token'):
    mid_evidence.masked_token_baselines(train, [])


def test_read_prefix_closes_subtrees_and_keeps_the_open_nodes():
  from lra_luna import mid_evidence
  tokens = ['[MAX', '3', '[MIN', '0', '5', ']', '7', ']']
  assert mid_evidence.read_prefix(tokens, 3) == ([('[MAX', [3]), ('[MIN', [])], None)
  assert mid_evidence.read_prefix(tokens, 6) == ([('[MAX', [3, 0])], None)
  assert mid_evidence.read_prefix(tokens, 8) == ([], 7)


# Children of the root are digits (depth 2 > max_depth 1), arity 2..3: [MAX 3 5 then either `]`
# (arity 2, label 5) or one uniform digit d and `]` (label max(5, d)).
_TINY = dict(max_depth=1, max_args=3, min_length=0, max_length=100)


def test_completion_labels_follow_the_generator_given_the_prefix():
  from lra_luna import mid_evidence
  rng = np.random.default_rng(0)
  tokens = ['[MAX', '3', '5', ']']
  assert mid_evidence.completion_labels(tokens, 4, _TINY, rng, 7) == [5] * 7  # all of it seen
  labels = np.array(mid_evidence.completion_labels(tokens, 3, _TINY, rng, 4000))
  assert set(labels) <= {5, 6, 7, 8, 9}
  # P(5) = 1/2 (arity 2) + 1/2 * 6/10 (arity 3, d <= 5); each of 6..9: 1/2 * 1/10.
  assert np.mean(labels == 5) == pytest.approx(0.8, abs=0.03)
  assert np.mean(labels == 9) == pytest.approx(0.05, abs=0.015)
  # Only kept lengths (min_length < tokens): arity 2 gives 4 tokens and is dropped, so the
  # third digit is always there: P(5) = 6/10.
  labels = np.array(mid_evidence.completion_labels(tokens, 3, {**_TINY, 'min_length': 4}, rng,
                                                   4000))
  assert np.mean(labels == 5) == pytest.approx(0.6, abs=0.03)


def test_start_window_bayes_predicts_the_most_likely_label():
  from lra_luna import mid_evidence
  rows = [(['[MAX', '3', '5', ']'], '5'), (['[MAX', '3', '5', '9', ']'], '9')]
  (_, whole, whole_half, whole_top), (_, prefix, prefix_half, prefix_top) = (
      mid_evidence.start_window_bayes(rows, (5, 3), _TINY, samples=2000))
  assert whole == 100 and whole_half == 0 and whole_top == 100
  assert prefix_half == pytest.approx(100 * 1.96 * (0.5 * 0.5 / 2) ** 0.5)
  # From [MAX 3 5 the rule says 5 (P = 0.8): right for the first expression only.
  assert prefix == 50 and prefix_top == pytest.approx(80, abs=3)


def test_listops_data_prints_the_first_token_and_masked_token_baselines(tmp_path, capsys):
  from lra_luna import mid_evidence
  header = 'Source\tTarget\n'
  (tmp_path / 'basic_train.tsv').write_text(header + '( ( [MAX 9 ) 3 ] )\t9\n')
  (tmp_path / 'basic_test.tsv').write_text(header + '( ( [MAX 8 ) 9 ] )\t9\n')
  _result(tmp_path / 'runs', 'listops', 's4d', 0, 0.3)
  assert mid_evidence.main([str(tmp_path / 'runs'), '--listops_data', str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert 'the first token (the outermost operator) alone 100.0%' in out
  # Training tokens [MAX 9 3 ] once each: the first, [MAX, is the most frequent and the value
  # 9; of the test tokens [MAX 8 9 ] always [MAX gets 1, the kinds' [MAX 9 ] get 3.
  assert 'the most frequent token 25.0%' in out and "each token's kind 75.0%" in out
  # No generation record: LRA's settings; windows 1, 1 and 2000 / 8 (all of it).
  assert 'w = 1: ' in out and 'w = 250: 100.0% ± 0.0 (mean top share 100.0%)' in out
  with pytest.raises(SystemExit, match='--listops_data') as error:
    mid_evidence.main([str(tmp_path / 'runs'), '--listops_data', str(tmp_path / 'missing')])
  assert '\n' not in str(error.value)
  (tmp_path / 'basic_test.tsv').write_text(header + '( [MAX 8 ] )\t8\n( [MAX 9 ] )\n')
  with pytest.raises(SystemExit, match=r'basic_test.tsv, line 3: expected') as error:
    mid_evidence.main([str(tmp_path / 'runs'), '--listops_data', str(tmp_path)])
  assert '\n' not in str(error.value)
  for row, message in [('( ( [MAX 8 ) 9 ] )\t8', 'evaluates to 9, its label is 8'),
                       ('( ( [MAX 8 ) 9 )\t9', 'is not one complete tree'),
                       ('( ( [MAX 8 ) 9 ] ) ]\t9', 'is not one complete tree'),
                       ('( ( [MAX 8 ) 9 ] ) 4\t9', 'is not one complete tree'),
                       ('( ( [MAX 8 ) x ] )\t9', "unknown token\\(s\\) \\['x'\\]")]:
    (tmp_path / 'basic_test.tsv').write_text(header + row + '\n')
    with pytest.raises(SystemExit, match=r'basic_test.tsv, line 2: .*' + message) as error:
      mid_evidence.main([str(tmp_path / 'runs'), '--listops_data', str(tmp_path)])
    assert '\n' not in str(error.value)
  (tmp_path / 'basic_test.tsv').write_text(header)
  with pytest.raises(SystemExit, match=r'basic_test.tsv holds no expression') as error:
    mid_evidence.main([str(tmp_path / 'runs'), '--listops_data', str(tmp_path)])
  assert '\n' not in str(error.value)


def test_circle_distances_match_the_generators_circle_centres():
  from lra_luna import mid_evidence
  samples = [pathfinder_gen.make_pathfinder_image(32, 'easy', seed=s) for s in range(12)]
  measured = mid_evidence.circle_distances(np.stack([s.image.reshape(-1) for s in samples]), 32)
  drawn = [np.hypot(*(s.circles[0] - s.circles[1])) for s in samples]
  np.testing.assert_allclose(measured, drawn, atol=0.5)  # centroids of antialiased discs
  one_disc = np.zeros((1, 32 * 32), np.uint8)
  one_disc[0, 5 * 32 + 5] = 255
  assert np.isnan(mid_evidence.circle_distances(one_disc, 32)[0])


def test_circle_distance_baseline_prints_one_line_and_refuses_a_missing_set(tmp_path, capsys):
  from lra_luna import mid_evidence
  pathfinder_gen.generate_pathfinder(tmp_path / 'set', resolution=32, difficulty='easy',
                                     num_images=40, images_per_batch=20, num_workers=1,
                                     progress=False)
  majority, by_distance = mid_evidence.circle_distance_baseline(tmp_path / 'set', 32, 'easy')
  assert 50.0 <= majority <= 100.0 and 0.0 <= by_distance <= 100.0
  assert by_distance * 4 / 100 == pytest.approx(round(by_distance * 4 / 100))  # 4 test images
  with pytest.raises(SystemExit, match='--pathfinder_data') as error:
    mid_evidence.main([str(tmp_path), '--pathfinder_data', str(tmp_path / 'missing')])
  assert '\n' not in str(error.value)


def test_threshold_accuracy_fits_on_train_and_scores_test():
  from lra_luna import mid_evidence
  train_d = np.array([3.0, 5.0, 8.0, 20.0, 22.0, np.nan])
  train_y = np.array([1, 1, 1, 0, 0, 0])  # a tie: the majority class is the lower one, 0
  # Best train threshold: 20, the first distance above every positive: all six pairs right.
  test_d = np.array([4.0, 19.0, 21.0, np.nan])
  test_y = np.array([1, 1, 0, 1])
  # 4 -> 1 right, 19 -> 1 right, 21 -> 0 right, NaN -> majority 0 wrong: 3 of 4.
  assert mid_evidence.threshold_accuracy(train_d, train_y, test_d, test_y) == 0.75
