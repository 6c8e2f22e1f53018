"""The model registry: one entry declares a model for every tool. A throwaway entry added at run
time becomes a config word with its options, a buildable model, a profiler row with the paper's
row beside it, a report row with its published row, and a campaign model."""

import pathlib

import numpy as np
import pytest

from lra_luna import campaign
from lra_luna import config_lib
from lra_luna import profile
from lra_luna import published
from lra_luna import registry
from lra_luna import report
from lra_luna.models import classifier

REPO = pathlib.Path(__file__).resolve().parents[1]
THROWAWAY = 'throwaway_blocks'


@pytest.fixture
def throwaway():
  """A local-attention model under a new name, with its own options, Table 1 and Table 2 rows."""
  row = published.row('Throwaway', THROWAWAY, None, published.LRA_PAPER, 'Table 1',
                      (10.0, 20.0, 30.0, 40.0, 50.0), 30.0, 30.0)
  entry = registry.register(registry.Model(
      THROWAWAY, 'Throwaway Attention', THROWAWAY,
      'lra_luna.models.attention.baselines:LocalAttention', {'block_size': 7},
      task_options={'image': {'block_size': 9}}, table1=(row,),
      table2=(('9.1', '9.2', '9.3', '9.4'), ('0.91', '0.92', '0.93', '0.94'))))
  yield entry
  del registry.MODELS[THROWAWAY]


def test_a_new_entry_reaches_every_tool(throwaway, tmp_path):
  # Config words and set_model: its options at LRA's values, per task.
  assert config_lib.parse_arg(f'{THROWAWAY},quick').model == THROWAWAY
  config = config_lib.load_config(f'configs/listops.py:{THROWAWAY},quick')
  config_lib.validate(config)
  assert config.model.attention == THROWAWAY
  assert dict(config.model.attention_options) == {'block_size': 7}
  assert dict(config_lib.load_config(f'configs/image.py:{THROWAWAY}')
              .model.attention_options) == {'block_size': 9}
  # The model builder finds its class.
  config.model.update(vocab_size=11, num_classes=3, max_length=20)
  from lra_luna.models.model_config import ModelConfig
  model = classifier.build_model(ModelConfig.from_config(config.model), seed=0)
  assert model({'inputs': np.ones((2, 20), np.int32)}).shape == (2, 3)
  assert type(model.encoder.blocks[0].attention).__name__ == 'LocalAttention'
  # Profiler: a default model, labelled, with the paper's Table 2 row beside ours.
  assert THROWAWAY in profile.default_models()
  point = lambda name, steps, memory: {'model': name, 'length': 1024, 'status': 'ok',
                                       'steps_per_s': steps, 'estimated_bytes': memory}
  rows = dict(profile.relative_rows({'models': ['transformer', THROWAWAY], 'lengths': [1024],
                                     'points': [point('transformer', 1.0, 100),
                                                point(THROWAWAY, 2.0, 50)]}))
  assert rows['Throwaway Attention'] == [2.0, 0.5]
  assert rows['Throwaway Attention (paper)'] == ['9.1', '0.91']
  # Report: its published Table 1 row sits under ours.
  table = report.table1({(THROWAWAY, 'cls'): {'listops': report.Cell(12.0)}}, 'best')
  assert [(r.label, r.source) for r in table.rows] == [
      (THROWAWAY, 'ours'), ('Throwaway', f'{published.LRA_PAPER}, Table 1')]
  # Campaigns: a valid model, and part of the paper's Table 1 grid.
  spec_file = tmp_path / 'spec.py'
  spec_file.write_text('from lra_luna import campaign\n\ndef get_config():\n'
                       '  c = campaign.base_spec()\n  c.tasks = ["listops"]\n'
                       f'  c.models = ["{THROWAWAY}"]\n  c.seeds = [0]\n  return c\n')
  assert list(campaign.load_spec(spec_file).models) == [THROWAWAY]
  assert THROWAWAY in campaign.load_spec(REPO / 'campaigns' / 'paper_table1.py').models
  # Heads: no P, so no mean_p.
  assert registry.heads_of(THROWAWAY) == ('cls', 'mean')


def test_registered_twice_is_an_error(throwaway):
  with pytest.raises(ValueError, match='registered twice'):
    registry.register(throwaway)


def test_the_papers_tables_are_complete():
  """Every model row of the Luna paper's Table 1 (15 rows, 14 models) and Table 2 (11 rows
  besides the Transformer, which every ratio divides by) is an entry."""
  labels = [r.label for r in registry.table1_rows() if r.table == 'Table 1'
            and r.paper in (published.LRA_PAPER, published.LUNA_PAPER)]
  assert labels == ['Transformer', 'Transformer (re-impl)', 'Local Attention', 'Sparse Trans.',
                    'Longformer', 'Linformer', 'Reformer', 'Sinkhorn Trans.', 'Synthesizer',
                    'BigBird', 'Linear Trans.', 'Performer', 'Luna-16', 'Luna-128', 'Luna-256']
  assert all(r.model in registry.MODELS for r in registry.table1_rows())
  assert len(registry.table2_rows()) == 11
  assert set(registry.table2_rows()) == set(registry.table1_models()) - {
      'transformer', 'sparse_transformer', 'longformer'}  # no paper measured those two
  # LRA's own config words for the six added baselines.
  assert {'sparse_transformer', 'longformer', 'reformer', 'sinkhorn', 'synthesizer',
          'bigbird'} <= set(registry.baseline_classes())


# An impossible option of an attention (Local) or of a model's own block (S4D, Mega) is refused by
# the config check in one line that names it.
@pytest.mark.parametrize('model, option, value, message', [
    ('local', 'block_size', 0, "config.model.attention_options: LocalAttention option "
                               "block_size = 0 is not valid: an integer >= 1."),
    ('local', 'blocksize', 3,
     'config.model.attention_options.blocksize is no option of LocalAttention'),
    ('s4d', 'init', 'legs', "init = 'legs' is not valid"),
    ('s4d', 'num_ssm', -1, 'num_ssm = -1 is not valid'),
    ('s4d', 'state_dim', 5, 'state_dim = 5 is not valid'),
    ('s4d', 'dt_min', 0.5, 'dt_min = 0.5, dt_max'),
    ('mega', 'chunk_size', -1, 'MegaBlock option chunk_size = -1 is not valid: an integer >= 0'),
    ('mega', 'attention_function', 'relu2',
     "MegaBlock option attention_function = 'relu2' is not valid"),
    ('mega', 'norm', 'batchnorm', "MegaBlock option norm = 'batchnorm' is not valid"),
    ('mega', 'heads', 2, 'config.model.attention_options.heads is no option of MegaBlock'),
])
def test_impossible_option_is_refused_by_the_config_check(model, option, value, message):
  config = config_lib.load_config(f'configs/listops.py:{model},quick')
  with config.unlocked():
    config.model.attention_options[option] = value
  with pytest.raises(ValueError) as error:
    config_lib.validate(config)
  assert message in str(error.value) and '\n' not in str(error.value)
