"""Attention plug-ins: the example trains on tiny ListOps under its class name, joins the
profiler's Table 2, sweeps and reports; every way a plug-in can be wrong is named in one error."""

import json
import pathlib
import sys
import textwrap
import types

import numpy as np
import pytest

from lra_luna import config_lib, profile, report, sweep
from lra_luna.models import classifier as models
from lra_luna.models import model_config
from lra_luna.models import plugins
from lra_luna.training import run_folder, steps, train

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests'))
from test_profile import TINY_CONFIG  # noqa: E402
import tiny  # noqa: E402  (the shared tiny run: tests/tiny.py)

EXAMPLE = 'examples/cosine_attention.py:CosineAttention'
LISTOPS_QUICK = f'{REPO}/configs/listops.py:transformer,quick'


def command_line_config(data_dir, *flags):
  """The config run_lra.py builds from `--config LISTOPS_QUICK --config.model.attention=EXAMPLE`
  and the flags (locked, as run_lra's), with the tiny sizes of test_train."""
  return config_lib.load_config(LISTOPS_QUICK, [f'--config.model.attention={EXAMPLE}',
                                                *tiny.flags(data_dir=data_dir), *flags])


@pytest.fixture(scope='module')
def example_run(tmp_path_factory, monkeypatch_module):
  """The example trained on tiny ListOps from the repository root, as the README runs it, with
  its option given as a dict on the command line."""
  monkeypatch_module.chdir(REPO)
  root = tmp_path_factory.mktemp('example')
  config = command_line_config(str(root / 'data'), '--config.num_train_steps=20',
                               "--config.model.attention_options={'scale': 5.0}")
  workdir = root / 'sweep' / 'listops' / 'CosineAttention' / 'cls' / 'seed0'
  return config, workdir, train.train_and_evaluate(config, workdir)


@pytest.fixture(scope='module')
def monkeypatch_module():
  with pytest.MonkeyPatch.context() as patch:
    yield patch


def test_example_trains_and_is_labelled_by_its_class(example_run):
  config, workdir, results = example_run
  assert config.model.attention == EXAMPLE and config.model.attention_options.scale == 5.0
  assert config_lib.model_label(config) == results['model'] == 'CosineAttention'
  assert json.loads((workdir / 'results.json').read_text())['model'] == 'CosineAttention'
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['model']['attention'] == EXAMPLE and saved['model_name'] == 'transformer'
  rows = [r for r in run_folder.read_jsonl(workdir / 'metrics.jsonl') if 'train_loss' in r]
  assert len(rows) == 4 and all(np.isfinite(r['grad_norm']) for r in rows)
  # The option reached the constructor: every layer's learned scale starts at 5.
  mc = steps.model_config(config, types.SimpleNamespace(vocab_size=16, num_classes=10))
  model = models.build_model(mc, 0)
  attention = model.encoder.blocks[0].attention
  assert type(attention).__name__ == 'CosineAttention'
  np.testing.assert_array_equal(attention.scale[...], 5.0)


def test_sweep_and_report_use_the_label(example_run, tmp_path):
  config, workdir, _ = example_run
  runs = sweep.plan([LISTOPS_QUICK], [0], ['cls'], [f'model.attention={EXAMPLE}'], 'sw')
  assert [str(r.workdir) for r in runs] == ['sw/listops/CosineAttention/cls/seed0']
  assert runs[0].name == 'listops/CosineAttention/cls/seed0'
  sweep_dir = workdir.parents[3]
  report.make_report(sweep_dir, out_dir=tmp_path)
  assert '| CosineAttention | cls | ours |' in (tmp_path / 'table1.md').read_text()


def test_profiler_row_of_the_example(tmp_path, monkeypatch):
  monkeypatch.chdir(REPO)
  config_path = tmp_path / 'tiny.py'
  config_path.write_text(TINY_CONFIG)
  results = profile.main(['--models', EXAMPLE, '--lengths', '32',
                          '--batch_size', '2', '--config', str(config_path), '--out_dir',
                          str(tmp_path / 'profile'), '--repeats', '1', '--warmup', '0',
                          '--no-isolate'])
  assert results['models'] == ['CosineAttention']
  [point] = results['points']
  assert point['model'] == 'CosineAttention' and point['steps_per_s'] > 0
  table = (tmp_path / 'profile' / 'table2.md').read_text()
  assert '| CosineAttention | ' in table


def test_profiler_names_a_missing_plugin(tmp_path, capsys):
  with pytest.raises(SystemExit):
    profile.parse_args(['--models', f'transformer,{tmp_path}/none.py:Attention'])
  assert 'none.py' in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Errors: each names the problem.
# ----------------------------------------------------------------------------------------------
PLUGIN_SOURCE = '''
from flax import nnx


class Narrow(nnx.Module):
  """Returns half the features."""
  def __init__(self, dim, num_heads, *, attention_dropout, init, dtype, rngs, max_length):
    self.dim = dim

  def __call__(self, x, mask, *, deterministic=True, rngs=None):
    return x[..., : self.dim // 2]


class Pair(Narrow):
  def __call__(self, x, mask, *, deterministic=True, rngs=None):
    return x, mask


class NoDeterministic(Narrow):
  def __call__(self, x, mask):
    return x


class Identity(Narrow):
  def __call__(self, x, mask, *, deterministic=True, rngs=None):
    return x


def helper():
  pass

'''


@pytest.fixture
def plugin_file(tmp_path):
  path = tmp_path / 'my_attention.py'
  path.write_text(textwrap.dedent(PLUGIN_SOURCE))
  return path


def build(attention, **options):
  mc = config_lib.set_model(config_lib.base_config(), 'transformer').model
  mc.update(dim=8, num_heads=2, num_layers=1, ffn_dim=16, classifier_dim=8, vocab_size=5,
            num_classes=2, max_length=12, attention=attention)
  mc.attention_options = options
  return models.build_model(model_config.ModelConfig.from_config(mc), 0)


@pytest.mark.parametrize('name,error,message', [
    ('{dir}/absent.py:Narrow', FileNotFoundError, 'no file .*absent.py'),
    ('{dir}/my_attention.py:Wide', ValueError,
     r"has no 'Wide'; the nnx.Module classes it defines: \['Identity', 'Narrow', "
     r"'NoDeterministic', 'Pair'\]"),
    ('{dir}/my_attention.py:helper', ValueError, 'helper is not a flax.nnx.Module class'),
    ('no_such_module_xyz:Attention', ValueError,
     "cannot import no_such_module_xyz .*No module named 'no_such_module_xyz'.*PYTHONPATH"),
    ('{dir}/my_attention.py:', ValueError, "expected 'path/to/file.py:Class'"),
    ('{dir}/my_attention.py:Narrow', ValueError,
     r'Narrow returned shape \(2, 13, 4\) for x of shape \(2, 13, 8\).*expected one array of '
     r'shape \(2, 13, 8\)'),
    ('{dir}/my_attention.py:Pair', ValueError, r'Pair returned tuple.*expected one array'),
    ('{dir}/my_attention.py:NoDeterministic', ValueError,
     "NoDeterministic.__call__ does not fit the plug-in protocol.*'deterministic'"),
])
def test_plugin_errors_name_the_problem(plugin_file, name, error, message):
  with pytest.raises(error, match=message):
    build(name.format(dir=plugin_file.parent))


def test_unknown_option_names_the_option(plugin_file):
  with pytest.raises(ValueError, match="Identity.__init__, given config.model.attention_options "
                     r"\{'temperature': 2\}.*unexpected keyword argument 'temperature'"):
    build(f'{plugin_file}:Identity', temperature=2)


def test_import_error_inside_the_plugin_is_reported(tmp_path):
  path = tmp_path / 'bad.py'
  path.write_text('import numpy_does_not_exist\n')
  with pytest.raises(ValueError, match=r"cannot import .*bad.py \(ModuleNotFoundError"):
    plugins.load_class(f'{path}:Attention')


def test_validate_checks_plugins_before_any_data(plugin_file):
  config = config_lib.set_model(config_lib.base_config(), 'luna16')
  config.task = 'listops'
  config.model.attention = f'{plugin_file}:Identity'
  with pytest.raises(ValueError, match="start from the 'transformer' preset"):
    config_lib.validate(config)
  config = config_lib.set_model(config_lib.base_config(), 'transformer')
  config.task = 'listops'
  config.model.attention = f'{plugin_file}:Missing'
  with pytest.raises(ValueError, match="has no 'Missing'"):
    config_lib.validate(config)
  config.model.attention = f'{plugin_file}:Identity'
  config.model.attention_options = {'temperature': 2}
  with pytest.raises(ValueError, match="unexpected keyword argument 'temperature'"):
    config_lib.validate(config)


def test_dotted_module_path_and_one_class_per_file(plugin_file, monkeypatch):
  monkeypatch.syspath_prepend(str(plugin_file.parent))
  assert plugins.load_class('my_attention:Identity').__name__ == 'Identity'
  # Loaded once per file: every layer and seed shares the class (jit caches key on it).
  assert plugins.load_class(f'{plugin_file}:Identity') is plugins.load_class(
      f'{plugin_file}:Identity')
  assert plugins.label('my_attention:Identity') == 'Identity'
  assert plugins.label('luna16') == 'luna16'
  assert type(build('my_attention:Identity').encoder.blocks[0].attention).__name__ == 'Identity'


def test_plugins_written_before_the_layout_by_layer_still_import():
  # Plug-ins written against the flat layout import `from lra_luna import attention`.
  from lra_luna import attention as old_attention  # pylint: disable=g-import-not-at-top
  from lra_luna import layers as old_layers  # pylint: disable=g-import-not-at-top
  from lra_luna.models import attention as new_attention  # pylint: disable=g-import-not-at-top
  from lra_luna.models.nn import layers as new_layers  # pylint: disable=g-import-not-at-top
  assert old_attention is new_attention and old_layers is new_layers
  with pytest.raises(AttributeError, match='no_such_module'):
    import lra_luna  # pylint: disable=g-import-not-at-top
    getattr(lra_luna, 'no_such_module')


@pytest.mark.parametrize('attention, message', [
    ('{file}', r"names a file but no class: add ':Class', e\.g\. .*my_attention\.py:Identity; "
               r"the nnx.Module classes it defines: \['Identity', 'Narrow', 'NoDeterministic', "
               r"'Pair'\]"),
    ('{dir}/absent.py', r"no file .*absent\.py; a plug-in is named 'path/to/file.py:Class'"),
    ('softmaxx', r"config.model.attention = 'softmaxx' is not valid; valid choices: .*'luna'.*"
                 r"'softmax'.*a plug-in 'path/to/file.py:Class'"),
])
def test_an_attention_without_class_or_unknown_is_refused_before_any_data(
    plugin_file, attention, message):
  config = config_lib.set_model(config_lib.base_config(), 'transformer')
  config.task = 'listops'
  config.model.attention = attention.format(file=plugin_file, dir=plugin_file.parent)
  with pytest.raises(ValueError, match=message):
    config_lib.validate(config)
