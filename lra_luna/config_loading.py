"""Building a config from `--config=configs/<task>.py:<words>` and `--config.<key>=<value>` flags
once, with one-line errors (config_flags itself answers with a traceback or a bare KeyError), and
the presets a config is measured against (its preset, the full one without the words that
shorten it).
"""

import difflib
import importlib.util
import pathlib

from absl import flags
import ml_collections
from ml_collections import config_flags

from lra_luna import config_base
from lra_luna import spt


def config_spec_path(spec: str) -> pathlib.Path:
  """The file of a `path/to/<task>.py[:arg]` spec: the path from the current folder, else, for
  `configs/<task>.py` or `<task>.py`, the task config in CONFIG_DIR (so commands work from any
  folder). ValueError naming the paths tried and the task configs if neither is a file."""
  config_dir = config_base.CONFIG_DIR
  path = pathlib.Path(spec.partition(':')[0]).expanduser()
  if path.is_file():
    return path
  tried = [str(path.absolute())]
  if not path.is_absolute() and str(path.parent) in ('.', 'configs'):
    if (config_dir / path.name).is_file():
      return config_dir / path.name
    if str(config_dir / path.name) not in tried:  # run from the checkout: the same path
      tried.append(str(config_dir / path.name))
  choices = ', '.join(f'configs/{p.name}' for p in sorted(config_dir.glob('*.py')))
  raise ValueError(f'config file {path} not found (tried {" and ".join(tried)}); the task '
                   f'configs are {choices} (in {config_dir}).')


def key_paths(config: ml_collections.ConfigDict) -> list[str]:
  """Every field path of a config, sections included ('model', 'model.dim', ...)."""
  paths = []
  for key, value in config.items():
    paths.append(key)
    if isinstance(value, ml_collections.ConfigDict):
      paths += [f'{key}.{inner}' for inner in key_paths(value)]
  return paths


def check_override_keys(config: ml_collections.ConfigDict, keys) -> None:
  """ValueError for the first key that is no field of `config`, with the nearest field names."""
  known = key_paths(config)
  for key in keys:
    if key not in known:
      close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
      hint = f' Did you mean {" or ".join(f"config.{c}" for c in close)}?' if close else ''
      section = key.rpartition('.')[0]
      fields = [k.rpartition('.')[2] for k in known if k.rpartition('.')[0] == section]
      where = f'config.{section}' if section else 'config'
      listing = (f' The fields of {where} are: {", ".join(fields)}.' if not close else '')
      raise ValueError(f'config.{key} is no config field.{hint}{listing} Each field is '
                       'described in lra_luna/config_lib.py, the model fields in '
                       'lra_luna/models/model_config.py.')


def split_config_flags(argv) -> tuple[list[str], str | None, list[str]]:
  """(argv without the --config.<key> flags, the spec of --config, those flags as
  `--config.<key>=<value>`)."""
  rest, spec, overrides = [], None, []
  args = iter(argv)
  for arg in args:
    name, has_value, value = arg.partition('=')
    if name == '--config' or name.startswith('--config.'):
      if not has_value:
        value = next(args, '')
      if name == '--config':
        spec = value
        rest.append(f'--config={value}')
      else:
        overrides.append(f'{name}={value}')
    else:
      rest.append(arg)
  return rest, spec, overrides


def override_keys(overrides) -> list[str]:
  """The keys of `--config.<key>=<value>` flags."""
  return [flag[len('--config.'):].partition('=')[0] for flag in overrides]


def load_config(spec: str, overrides=(), **words) -> ml_collections.ConfigDict:
  """The config that `--config=spec` and `--config.<key>=<value>` overrides give, built once and
  locked (a misspelt key is an error). `words` are config words put after the spec's own, so
  that they win (profile: model=transformer). ValueError in one line for a missing config file,
  an unknown word or key, or a value of the wrong type."""
  path = config_spec_path(spec)
  arg = spec.partition(':')[2] if ':' in spec else None
  if words:
    arg = ','.join(filter(None, [arg, *(f'{key}={value}' for key, value in words.items())]))
  module_spec = importlib.util.spec_from_file_location(f'lra_luna_config_{path.stem}', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  config = module.get_config() if arg is None else module.get_config(arg)
  shared = shared_words(arg)
  if shared.long:  # the mid config trained longer, before spt copies its steps
    config_base.use_long_settings(config)
  if shared.spt:  # every task config's self-pretraining, before smoke and the overrides
    spt.use_spt_settings(config)
  if shared.smoke:  # every task config's smoke test, before the overrides
    config_base.use_smoke_settings(config)
  if shared.rotary:  # every task config's rotary positions, before the overrides
    config.model.positions = 'rotary'
  config.preset = f'{path.name}:{arg or ""}'  # what run_record measures the run against
  config.lock()
  check_override_keys(config, override_keys(overrides))
  # config_flags parses the values of the overrides against the fields' types.
  flag_values = flags.FlagValues()  # private flags: the caller's absl flags are left alone
  argv = ['lra_luna', *overrides]
  config_flags.DEFINE_config_dict('config', config, flag_values=flag_values, sys_argv=argv)
  try:
    flag_values(argv)
  except flags.Error as e:
    raise ValueError(str(e).strip().splitlines()[0]) from None
  config = flag_values.config
  if config.pretrained:  # fine-tuning another run's pretraining: its objective and settings
    spt.use_pretraining_of(config)
  return config


def shared_words(arg: str | None):
  """The words every task shares (WORDS) in a config argument that its task config accepted:
  a word of the task config's own (its parse_arg defaults) is left to it."""
  names = {*config_base.WORDS, *config_base.MODELS}
  return config_base.parse_arg(','.join(
      w for w in (arg or '').split(',') if w.strip().partition('=')[0] in names))


# Config words that shorten a run (and long, which lengthens only mid's); the full run of a
# preset is the preset without them.
SHORTENING_WORDS = ('quick', 'mid', 'long', 'smoke')


def preset_word(preset: str, word: str) -> bool:
  """Whether a flag word ('quick') is on in a preset 'listops.py:luna16,quick' (the last of
  `quick`, `quick=true`, `quick=false` wins, as in parse_arg)."""
  on = False
  for item in preset.partition(':')[2].split(','):
    key, has_value, value = item.strip().partition('=')
    if key == word:
      on = not has_value or value.strip().lower() == 'true'
  return on


def preset_config(preset: str) -> ml_collections.ConfigDict | None:
  """The config of a preset of CONFIG_DIR without overrides; None when it cannot be built (a
  config file outside CONFIG_DIR, a word this checkout does not know)."""
  name = preset.partition(':')[0]
  if not name or not (config_base.CONFIG_DIR / name).is_file():
    return None
  try:
    return load_config(f'{config_base.CONFIG_DIR / name}:{preset.partition(":")[2]}')
  except ValueError:
    return None


def full_preset(config: ml_collections.ConfigDict) -> str:
  """config's preset without the words that shorten it; for a config not built by load_config,
  the preset of its task, model and protocol."""
  preset = config.get('preset', '')
  if not preset:
    words = [config.model_name] + (['paper'] if config.protocol == 'paper' else [])
    return f'{config.task}.py:{",".join(words)}'
  name, _, arg = preset.partition(':')
  kept = [w for w in arg.split(',') if w.strip() and w.strip().partition('=')[0] not in
          SHORTENING_WORDS]
  return f'{name}:{",".join(kept)}'
