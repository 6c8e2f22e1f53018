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
  from lra_luna.report import orderings  # pylint: disable=import-outside-toplevel
  specs = [spec_lib.load_spec(spec_lib.SPEC_DIR / name) for name in ('mid.py', 'mid_long.py')]
  for ordering in orderings.ORDERINGS:
    for group in (ordering.better, ordering.worse):
      # A head group ('luna16/mean_p', sweep --heads): a campaign model and a head it pools.
      model, _, head = group.partition('/')
      assert any(ordering.task in spec.tasks and model in spec.models for spec in specs), group
      assert not head or head in registry.get(model).heads, group


def test_the_documented_tables_and_figure_are_what_the_record_gives(tmp_path):
  """docs/mid.md's group and ordering tables are report's, line for line, on
  docs/mid_results.csv (the command docs/mid.md gives); the figure is its groups.png."""
  from lra_luna import report  # pylint: disable=import-outside-toplevel
  docs = pathlib.Path(__file__).resolve().parent.parent / 'docs'
  report.make_report(docs / 'mid_results.csv', 'best', out_dir=tmp_path)
  text = (docs / 'mid.md').read_text()
  for name in ('groups.md', 'orderings.md'):
    lines = [line for line in (tmp_path / name).read_text().splitlines() if line]
    assert len(lines) > 8 and [line for line in lines if line not in text] == []
  assert 'python -m lra_luna.report docs/mid_results.csv --checkpoint best' in text
