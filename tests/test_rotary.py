"""Rotary positions (RoFormer, models/attention/rotary.py): the formulas, their place in every
attention that takes them, and the config setting that selects or refuses them."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tiny
from lra_luna import config_lib
from lra_luna import registry
from lra_luna.models import classifier
from lra_luna.models.attention import rotary
from lra_luna.models.attention.baselines import _linear_attention_from_features, elu_feature_map
from lra_luna.models.attention.softmax import SoftmaxAttention

DIM, HEADS = 16, 2


def normal(seed, shape):
  return jax.random.normal(jax.random.key(seed), shape)


# ----------------------------------------------------------------------------------------------
# The formulas.


def test_zero_angles_are_no_rotation():
  x = normal(0, (2, 3, 7, 8))
  np.testing.assert_array_equal(rotary.apply_rotary(x, jnp.zeros(7, jnp.int32)), x)


def test_rotation_keeps_norms_and_rotates_each_pair_by_its_angle():
  x = normal(1, (5, 6))
  positions = jnp.arange(5)
  y = rotary.apply_rotary(x, positions)
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)
  # Pair i of row m as a complex number: multiplied by exp(i m theta_i) (RoFormer eq. 13).
  theta = 10000.0 ** (-np.arange(0, 6, 2) / 6)
  expected = (np.asarray(x[:, 0::2]) + 1j * np.asarray(x[:, 1::2])) * np.exp(
      1j * np.arange(5)[:, None] * theta)
  np.testing.assert_allclose(y[:, 0::2], expected.real, atol=1e-5)
  np.testing.assert_allclose(y[:, 1::2], expected.imag, atol=1e-5)


@pytest.mark.parametrize('shift', [1, 7, 300])
def test_scores_depend_only_on_the_offset(shift):
  """Shift the whole sequence: q_i . k_j after rotation stays (RoFormer eq. 16)."""
  q, k = normal(2, (2, 9, 8)), normal(3, (2, 9, 8))
  scores = lambda p: jnp.einsum('bid,bjd->bij', rotary.apply_rotary(q, p),
                                rotary.apply_rotary(k, p))
  np.testing.assert_allclose(scores(jnp.arange(9)), scores(jnp.arange(9) + shift), atol=1e-4)


def test_same_query_and_key_everywhere_give_a_toeplitz_score_matrix():
  u = jnp.broadcast_to(normal(4, (8,)), (12, 8))
  q, k = rotary.rotate_queries_and_keys(u, u)
  scores = np.asarray(q @ k.T)
  for offset in range(-11, 12):
    diagonal = np.diagonal(scores, offset)
    np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-5)
  assert not np.allclose(np.diagonal(scores, 3)[0], np.diagonal(scores, 0)[0])


def test_odd_dimension_is_refused():
  with pytest.raises(ValueError, match='odd'):
    rotary.apply_rotary(jnp.ones((3, 5)), jnp.arange(3))


def test_rotary_linear_attention_equals_its_quadratic_form():
  """RoFormer eq. 19: rotated feature maps in the numerator, plain ones in the denominator."""
  q, k, v = normal(5, (2, 2, 10, 8)), normal(6, (2, 2, 10, 8)), normal(7, (2, 2, 10, 8))
  qf, kf = elu_feature_map(q), elu_feature_map(k)
  numerator, denominator = rotary.rotary_linear_attention(qf, kf, v)
  rq, rk = rotary.apply_rotary(qf, jnp.arange(10)), rotary.apply_rotary(kf, jnp.arange(10))
  np.testing.assert_allclose(numerator, jnp.einsum('bhij,bhjd->bhid', rq @ jnp.swapaxes(rk, -1, -2),
                                                   v), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(denominator[..., 0], jnp.sum(qf @ jnp.swapaxes(kf, -1, -2), -1),
                             rtol=1e-5)
  plain = _linear_attention_from_features(qf, kf, v)[1]
  np.testing.assert_allclose(denominator, plain, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Inside the attentions.


def test_fused_softmax_equals_vanilla_with_rotary():
  x = normal(8, (2, 11, DIM))
  mask = jnp.arange(11)[None, :] < jnp.array([[11], [6]])
  make = lambda implementation: SoftmaxAttention(DIM, HEADS, implementation=implementation,
                                                 rotary=True, rngs=nnx.Rngs(0))
  vanilla, fused = make('vanilla')(x, mask), make('fused')(x, mask)
  np.testing.assert_allclose(fused[0], vanilla[0], atol=1e-5)
  np.testing.assert_allclose(fused[1, :6], vanilla[1, :6], atol=1e-5)
  plain = SoftmaxAttention(DIM, HEADS, rngs=nnx.Rngs(0))(x, mask)
  assert not np.allclose(plain, vanilla, atol=1e-3)


def test_pruned_query_rows_keep_their_rotation():
  attention = SoftmaxAttention(DIM, HEADS, rotary=True, rngs=nnx.Rngs(0))
  x, mask = normal(9, (2, 9, DIM)), jnp.ones((2, 9), bool)
  np.testing.assert_allclose(attention(x, mask, query_rows=1), attention(x, mask)[:, :1],
                             atol=1e-5)


ROTARY_BASELINES = [name for name in registry.rotary_models()
                    if registry.get(name).attention in registry.baseline_classes()
                    and registry.get(name).attention != 'reformer']


@pytest.mark.parametrize('name', ROTARY_BASELINES)
def test_baseline_heads_rotate_queries_and_keys(name):
  """Identical rows: the rotated q k^T of every head is Toeplitz (a function of i - j)."""
  options = registry.get(name).test_options
  module = registry.attention_class(name)(DIM, HEADS, max_length=64, rngs=nnx.Rngs(0),
                                          rotary=True, **options)
  x = jnp.broadcast_to(normal(10, (DIM,)), (1, 12, DIM))
  q, k, _ = module._heads(x)  # pylint: disable=protected-access
  scores = np.asarray(jnp.einsum('bhid,bhjd->bhij', q, k))[0, 0]
  for offset in range(-11, 12):
    np.testing.assert_allclose(np.diagonal(scores, offset), np.diagonal(scores, offset)[0],
                               atol=1e-4)
  plain, _, _ = module._projected_heads(x)  # pylint: disable=protected-access
  assert not np.allclose(q, plain)


def rotary_and_none(model_name):
  """Two tiny models of one registry model with the same parameters: positions 'rotary' and
  'none' (neither has a position table). Mega's q, k scales are set to 100: at their init
  (N(0, 0.02)) its scores are ~1e-8, and the softmax is uniform in float32 either way."""
  models = [classifier.build_model(tiny.model_config(model_name, positions=positions,
                                                     attention_options=registry.get(
                                                         model_name).test_options,
                                                     dropout=0.0, attention_dropout=0.0), 0)
            for positions in ('rotary', 'none')]
  for model in models:
    for block in model.encoder.blocks:
      if hasattr(block.attention, 'qk_scale'):
        block.attention.qk_scale[...] = 100 * jnp.ones_like(block.attention.qk_scale[...])
  return models


@pytest.mark.parametrize('model_name', registry.rotary_models())
def test_rotary_reaches_the_attention_of_every_model_that_takes_it(model_name):
  rotated, plain = rotary_and_none(model_name)
  assert jax.tree.all(jax.tree.map(lambda a, b: a.shape == b.shape,
                                   nnx.state(rotated, nnx.Param), nnx.state(plain, nnx.Param)))
  ids = jax.random.randint(jax.random.key(1), (2, 30), 1, 11)
  batch = {'inputs': ids}
  y_rotated, y_plain = rotated(batch), plain(batch)
  assert np.all(np.isfinite(y_rotated))
  assert not np.allclose(y_rotated, y_plain, atol=1e-6)
  assert rotated.encoder.embedding.positions is None


# ----------------------------------------------------------------------------------------------
# The setting.


@pytest.mark.parametrize('model_name', ['luna16', 's4d', 'linformer', 'synthesizer'])
def test_rotary_is_refused_in_one_line_where_it_is_not_defined(model_name):
  with pytest.raises(ValueError) as error:
    config_lib.validate(config_lib.load_config(f'configs/listops.py:{model_name},rotary,quick'))
  message = str(error.value)
  assert '\n' not in message and 'rotary' in message
  assert 'transformer, transformer_fused, local' in message and 'mega' in message


def test_the_rotary_word_selects_rotary_positions_for_any_task():
  for task in ('listops', 'text', 'image', 'pathfinder', 'retrieval'):
    config = config_lib.load_config(f'configs/{task}.py:transformer,rotary,quick')
    assert config.model.positions == 'rotary'
    config_lib.validate(config)
  assert config_lib.load_config('configs/listops.py:transformer').model.positions == 'learned'
  assert config_lib.load_config('configs/listops.py:mega,rotary').model.positions == 'rotary'


def test_learned_positions_stay_the_default_and_build_no_rotation():
  model = classifier.build_model(tiny.model_config('transformer'), 0)
  attention = model.encoder.blocks[0].attention
  assert not attention.rotary and model.encoder.embedding.positions is not None


# ----------------------------------------------------------------------------------------------
# The campaign spec and the report's positions table.


def test_positions_campaign_pairs_each_model_with_its_rotary_run():
  from lra_luna.campaign import spec as spec_lib  # pylint: disable=import-outside-toplevel
  spec = spec_lib.load_spec(tiny.REPO / 'campaigns' / 'positions.py')
  assert 'transformer' in spec.models and 'transformer+rotary' in spec.models
  assert 'luna16' in spec.models and 'luna16+rotary' not in spec.models
  assert spec_lib.config_spec('listops', 'bigbird+rotary', 'lra', 'quick').endswith(
      'listops.py:bigbird,rotary,quick')
  config = config_lib.load_config(spec_lib.config_spec('listops', 'bigbird+rotary', 'lra'))
  assert config_lib.model_label(config) == 'bigbird+rotary'
  assert registry.label('bigbird+rotary') == 'BigBird + rotary'


def test_positions_table_sets_rotary_beside_its_model_with_the_difference():
  from lra_luna.report import tables  # pylint: disable=import-outside-toplevel
  from lra_luna.report.runs import Cell  # pylint: disable=import-outside-toplevel
  summary = {('transformer', 'cls'): {'listops': Cell(40.0, 1.0, 5), 'text': Cell(60.0, 1.0, 5)},
             ('transformer+rotary', 'cls'): {'listops': Cell(45.0, 2.0, 5)},
             ('luna16', 'cls'): {'listops': Cell(50.0, 1.0, 5)}}
  table = tables.positions_table(summary, 'last')
  assert [row.label for row in table.rows] == ['transformer', 'transformer+rotary',
                                               'Δ rotary - own']
  assert table.rows[2].values['listops'].mean == 5.0 and 'text' not in table.rows[2].values
  assert table.rows[0].values['avg'].mean == 40.0  # over the tasks both ran
  del summary[('transformer+rotary', 'cls')]
  assert tables.positions_table(summary, 'last') is None


def test_report_writes_the_positions_table_and_the_probe_figure(tmp_path):
  from lra_luna import report  # pylint: disable=import-outside-toplevel
  from test_report import write_result  # pylint: disable=import-outside-toplevel
  for seed, (own, rotated) in enumerate([(0.30, 0.40), (0.32, 0.44)]):
    write_result(tmp_path / 'sweep', 'listops', 'transformer', 'cls', seed, own)
    workdir = write_result(tmp_path / 'sweep', 'listops', 'transformer+rotary', 'cls', seed,
                           rotated)
    probe = {'task': 'listops', 'model': 'transformer+rotary', 'seed': seed, 'windows': [4, 60],
             'accuracy': {p: [0.2, rotated] for p in ('start', 'end', 'random')},
             'full_accuracy': rotated, 'majority_rate': 0.1}
    (workdir / 'probe.json').write_text(json.dumps(probe))
  names = {p.name for p in report.make_report(tmp_path / 'sweep', out_dir=tmp_path / 'out')}
  assert {'positions.md', 'positions.csv', 'probe_listops.png'} <= names
  markdown = (tmp_path / 'out' / 'positions.md').read_text()
  assert '| Δ rotary - own | cls | ours | 11.00 |' in markdown
