"""Config words, one-pass flag parsing, the task-neutral base and the typed model config."""

import ast
import dataclasses
import pathlib
import json

import pytest

from lra_luna import config_lib
from lra_luna.models import model_config
from lra_luna.training import run_folder

REPO = pathlib.Path(__file__).resolve().parents[1]
LISTOPS = str(REPO / 'configs' / 'listops.py')


def test_words_with_defaults_and_key_value():
  arg = config_lib.parse_arg('transformer,quick')
  assert (arg.model, arg.quick) == ('transformer', True)
  arg = config_lib.parse_arg(None)
  assert (arg.model, arg.quick) == (config_lib.WORDS['model'], False)
  arg = config_lib.parse_arg('quick=false,model=luna128', model='transformer')
  assert (arg.model, arg.quick) == ('luna128', False)
  # A later word wins: what load_config(spec, model=...) relies on.
  assert config_lib.parse_arg('luna16,quick,model=luna256').model == 'luna256'
  # A new word is one entry: its default, then the bare word turns it on.
  assert config_lib.parse_arg('luna16,paper', paper=False).paper is True


@pytest.mark.parametrize('arg, fragments', [
    ('luna16,quik', ("Unknown word 'quik'", "Did you mean 'quick'?", 'luna16', 'quick')),
    ('luna16,papr', ("Unknown word 'papr'", 'Valid words: a model (transformer', 'quick')),
    ('lunax,quick', ("Unknown model 'lunax'", "Did you mean 'luna16'?")),
    ('model=lunax', ("Unknown model 'lunax'", 'luna16')),
    ('luna16,quick=maybe', ('expected quick=true or quick=false',)),
    ('luna16,model', ("Unknown word 'model'",)),
])
def test_unknown_words_name_the_valid_words(arg, fragments):
  with pytest.raises(ValueError) as error:
    config_lib.parse_arg(arg)
  message = str(error.value)
  assert '\n' not in message
  for fragment in fragments:
    assert fragment in message


def test_load_config_builds_once_with_typed_overrides(monkeypatch):
  calls = []
  real = config_lib.base_config
  monkeypatch.setattr(config_lib, 'base_config', lambda: calls.append(1) or real())
  config = config_lib.load_config(f'{LISTOPS}:luna16,quick',
                                  ['--config.seed=3', '--config.model.dim=32'])
  assert calls == [1]  # one build, not one per check
  assert (config.seed, config.model.dim, config.model_name) == (3, 32, 'luna16')
  with pytest.raises(AttributeError):
    config.no_such_field = 1  # locked, as run_lra's config
  with pytest.raises(ValueError, match=r'^flag --config.model.dim=abc: invalid literal'):
    config_lib.load_config(f'{LISTOPS}:luna16,quick', ['--config.model.dim=abc'])
  with pytest.raises(ValueError, match='config.model.dmi is no config field'):
    config_lib.load_config(f'{LISTOPS}:luna16,quick', ['--config.model.dmi=3'])


def test_load_config_words_win_over_the_spec():
  """profile's model replaces the spec's own model word without rewriting the spec by hand."""
  config = config_lib.load_config(f'{LISTOPS}:luna16,quick', model='transformer')
  assert config.model_name == 'transformer' and config.max_length == 60  # quick kept
  assert config_lib.load_config(LISTOPS, model='luna128').model.pack_length == 128


def base_values() -> dict:
  return config_lib.flatten(config_lib.base_config())


def own_assignments(path: pathlib.Path):
  """(field, value) of each `c.<field> = <constant>` / `m.<field> = <constant>` statement at the
  top level of get_config (variants such as `if arg.quick:` excluded: they change the task's
  values)."""
  function = next(node for node in ast.parse(path.read_text()).body
                  if isinstance(node, ast.FunctionDef) and node.name == 'get_config')
  for statement in function.body:
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)):
      continue
    for target in statement.targets:
      if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        prefix = {'c': '', 'm': 'model.'}.get(target.value.id)
        if prefix is not None:
          yield prefix + target.attr, statement.value.value


@pytest.mark.parametrize('task', config_lib.TASKS)
def test_task_configs_state_only_their_own_values(task):
  base = base_values()
  restated = [(field, value) for field, value in own_assignments(REPO / 'configs' / f'{task}.py')
              if field in base and base[field] == value and type(base[field]) is type(value)]
  assert not restated, f'configs/{task}.py restates base_config defaults: {restated}'


def test_base_is_task_neutral_and_refused_until_a_task_fills_it():
  config = config_lib.set_model(config_lib.base_config(), 'luna16')
  config.task = 'listops'
  config.schedule = 'rsqrt'
  with pytest.raises(ValueError, match=r'config.batch_size must be positive, got 0; set it in '
                     r'the task config'):
    config_lib.validate(config)
  # The model section is ModelConfig's fields with their defaults: one list of fields.
  assert config_lib.base_config().model.to_dict() == dataclasses.asdict(model_config.ModelConfig())


@pytest.mark.parametrize('field, value, message', [
    ('head', 'max', r"config.model.head = 'max' is not valid; valid choices: \['cls', 'mean', "
                    r"'mean_p'\]"),
    ('positions', 'rope', r"config.model.positions = 'rope' is not valid"),
    ('init', 'xavier', r"config.model.init = 'xavier' is not valid"),
    ('p_init', 'zeros', r"config.model.p_init = 'zeros' is not valid"),
    ('dtype', 'float64', r"config.model.dtype = 'float64' is not valid"),
    ('pair_features', 'sum', r"config.model.pair_features = 'sum' is not valid"),
])
def test_model_config_checks_every_choice(field, value, message):
  with pytest.raises(ValueError, match=message):
    model_config.ModelConfig.from_config({field: value})


def test_mean_p_needs_luna_in_one_rule():
  assert model_config.heads_of('luna') == model_config.HEADS
  assert 'mean_p' not in model_config.heads_of('softmax')
  with pytest.raises(ValueError, match="head = 'mean_p' needs a Luna model"):
    model_config.ModelConfig.from_config({'attention': 'performer', 'head': 'mean_p'})
  checked = model_config.ModelConfig.from_config({'attention': 'luna', 'head': 'mean_p'},
                                                 vocab_size=5)
  assert checked.vocab_size == 5 and checked.dim == 0  # missing fields keep their defaults
  with pytest.raises(dataclasses.FrozenInstanceError):
    checked.head = 'cls'


def test_a_config_json_written_before_new_fields_still_matches_its_run():
  # Run folders written before `protocol`, `append_eos` and the authors' head options existed.
  config = config_lib.load_config(f'{config_lib.CONFIG_DIR}/listops.py:luna16,quick')
  old = json.loads(config.to_json())
  for key in ('protocol', 'append_eos'):
    del old[key]
  for key in ('classifier_bias', 'mean_includes_cls'):
    del old['model'][key]
  assert config_lib.config_differences(old, config) == []
  assert config_lib.saved_config(old).protocol == 'lra'
  config_lib.validate(config_lib.saved_config(old))
  old['model']['dim'] += 1
  old['learning_rate'] *= 2
  assert config_lib.config_differences(old, config) == ['learning_rate', 'model.dim']
  # How often it logs and whether it draws a bar do not change the run: it resumes with others.
  old['log_every'] += 7
  old['progress_bar'] = not old['progress_bar']
  assert config_lib.config_differences(old, config) == ['learning_rate', 'model.dim']
  # A new field set away from its default is a difference, not a default.
  paper = config_lib.load_config(f'{config_lib.CONFIG_DIR}/listops.py:luna16,quick,paper')
  assert 'protocol' in config_lib.config_differences(old, paper)


def test_an_unknown_word_ends_in_the_valid_words_said_plainly():
  with pytest.raises(ValueError) as error:
    config_lib.parse_arg('luna16,foo=3')
  flags = ', '.join(word for word, value in config_lib.WORDS.items() if isinstance(value, bool))
  assert str(error.value).endswith(f'or one of {flags}; each also as word=value, e.g. '
                                   'model=luna16 or quick=false.')


@pytest.mark.parametrize('task', ['listops', 'text', 'retrieval', 'image', 'pathfinder', 'pathx'])
def test_each_task_configs_docstring_names_every_word(task):
  path = pathlib.Path(LISTOPS).parent / f'{task}.py'
  doc = ' '.join(ast.get_docstring(ast.parse(path.read_text())).split())
  words = doc[doc.index('Words after the colon'):]
  missing = [word for word in config_lib.WORDS if word != 'model' and f' {word} (' not in words
             and f' {word},' not in words]
  assert not missing, f'{path.name} does not name the words {missing}'


@pytest.mark.parametrize('override, hint', [
    ('--config.model.head=meanp', "valid choices: ['cls', 'mean', 'mean_p']. Did you mean "
                                  "'mean_p'?"),
    ('--config.model.positions=sinusoid', "Did you mean 'sinusoidal'?"),
    ('--config.model.dtype=bfloat', "Did you mean 'bfloat16'?"),
    ('--config.schedule=cosin', "Did you mean 'cosine'?"),
    ('--config.matmul_precision=higest', "Did you mean 'highest'?"),
])
def test_a_misspelt_choice_gets_the_nearest_one(override, hint):
  config = config_lib.load_config(f'{LISTOPS}:luna16,quick', [override])
  with pytest.raises(ValueError) as error:
    config_lib.validate(config)
  assert str(error.value).endswith(hint) and '\n' not in str(error.value)


def test_a_choice_far_from_every_valid_one_gets_no_guess():
  config = config_lib.load_config(f'{LISTOPS}:luna16,quick', ['--config.model.head=zzz'])
  with pytest.raises(ValueError) as error:
    config_lib.validate(config)
  assert 'Did you mean' not in str(error.value)


@pytest.mark.parametrize('arg, steps, reasons', [
    ('luna16,spt', None, []),
    ('luna16,spt', 10, ['10 of 5000 pretraining steps']),
    ('luna16,quick,spt', 7, ['quick config', '1500 of 5000 steps', '7 of 5000 pretraining steps']),
    ('luna16', None, []),
])
def test_a_shortened_pretraining_is_a_shortened_run(arg, steps, reasons):
  """The full run's pretraining is its preset's with the word spt (as many steps as its
  training): fewer pretraining steps shorten the run, in the first line and in run_record."""
  overrides = [] if steps is None else [f'--config.pretraining.num_train_steps={steps}']
  config = config_lib.load_config(f'{LISTOPS}:{arg}', overrides)
  assert config_lib.shortened_reasons(config) == reasons
  assert config_lib.run_record(config)['shortened'] == reasons


def test_every_public_name_is_still_config_lib_s():
  """The split modules (config_base, config_loading, config_checks) are reached through
  config_lib: every public name of theirs is one of config_lib's, the same object."""
  from lra_luna import config_base, config_checks, config_loading  # pylint: disable=C0415
  for module in (config_base, config_checks, config_loading):
    for name in dir(module):
      value = getattr(module, name)
      own = getattr(value, '__module__', module.__name__) == module.__name__
      if name.startswith('_') or not own:
        continue
      if callable(value) or name.isupper():
        assert getattr(config_lib, name) is value, (module.__name__, name)


def test_a_task_config_s_own_word_is_left_to_it(tmp_path):
  """A task config may take a word of its own (parse_arg's defaults); load_config applies only
  the shared words and leaves that one to it."""
  path = tmp_path / 'own.py'
  path.write_text(pathlib.Path(LISTOPS).read_text().replace(
      'config_lib.parse_arg(arg)', 'config_lib.parse_arg(arg, causal=False)'))
  config = config_lib.load_config(f'{path}:transformer,quick,causal')
  assert config.model_name == 'transformer' and config.max_length == 60
  with pytest.raises(ValueError, match="Unknown word 'causl'"):
    config_lib.load_config(f'{path}:transformer,causl')
