"""Default config, model presets and config checks shared by every `configs/<task>.py`.

A task config calls `base_config()`, sets its task fields, then `set_model(config, name)`.
`validate(config)` is run before training and names the bad field and its valid choices.
"""

import difflib
import pathlib

from absl import flags
import ml_collections
from ml_collections import config_flags

import lra_luna
from lra_luna.models import plugins

TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder', 'pathx')
# Model name -> (attention, pack length l or None).
MODELS = {
    'transformer': ('softmax', None),        # vanilla softmax attention (materialises n x n)
    'transformer_fused': ('softmax', None),  # jax.nn.dot_product_attention (flash where available)
    'luna16': ('luna', 16),
    'luna128': ('luna', 128),
    'luna256': ('luna', 256),
    'linformer': ('linformer', None),
    'performer': ('performer', None),
    'linear_transformer': ('linear_transformer', None),
    'local': ('local', None),
}
SCHEDULES = ('rsqrt', 'cosine')
# Where a task's data may come from (config.data_source); the first is the default.
DATA_SOURCES = {
    'listops': ('auto', 'release', 'generated'),
    'pathfinder': ('auto', 'release', 'generated'),
    'pathx': ('auto', 'release', 'generated'),
    'retrieval': ('auto', 'release'),
    'text': ('auto', 'tfds'),
    'image': ('auto', 'tfds'),
}
# The task configs: configs/ of the checkout, else the copy installed as lra_luna/configs.
CONFIG_DIR = (lra_luna.CHECKOUT or pathlib.Path(__file__).resolve().parent) / 'configs'


def parse_arg(arg: str | None, default_model: str) -> tuple[str, bool]:
  """'luna16,quick' or 'model=luna16,quick' -> ('luna16', True)."""
  model, quick = default_model, False
  for part in filter(None, (arg or '').split(',')):
    part = part.strip()
    if part == 'quick':
      quick = True
    elif part.startswith('model='):
      model = part[len('model='):]
    else:
      model = part
  if model not in MODELS:
    raise ValueError(f'Unknown model {model!r} in config argument {arg!r}; valid choices: '
                     f'{sorted(MODELS)}.')
  return model, quick


def base_config() -> ml_collections.ConfigDict:
  """Every field a run reads, with its default. Task configs override what differs."""
  c = ml_collections.ConfigDict()
  c.task = ''                       # one of TASKS
  c.model_name = ''                 # one of MODELS (set by set_model); a plug-in needs 'transformer'
  c.seed = 0                        # training seed: parameters, dropout and data order
  c.data_dir = ''                   # data root; '' = $LRA_DATA_DIR, else <repo>/data/store
  c.dataset_name = ''               # folder of this task's files under the data root
  c.data_source = 'auto'            # 'auto' | 'release' | 'generated' | 'tfds' (DATA_SOURCES)
  c.max_length = 1000               # tokens per example after truncation ([CLS] not counted)
  c.max_truncated_fraction = 0.01   # refuse data when more than this share of examples is cut
  c.batch_size = 32                 # global training batch, split over all devices
  c.eval_batch_size = 64            # global evaluation batch (last batch padded and masked)
  c.num_train_steps = 5000          # optimizer steps
  c.warmup_steps = 1000             # linear warmup steps of the schedule
  c.schedule = 'rsqrt'              # 'rsqrt': warmup then lr*sqrt(w/s); 'cosine': warmup then cosine to 0
  c.learning_rate = 1e-4            # peak learning rate (at the end of warmup)
  c.weight_decay = 0.1              # AdamW decoupled weight decay (scaled by the learning rate)
  c.adam_b1 = 0.9                   # Adam beta1 (LRA, Luna reference)
  c.adam_b2 = 0.98                  # Adam beta2 (LRA, Luna reference)
  c.adam_eps = 1e-8                 # Adam epsilon
  c.grad_clip_norm = 0.0            # global-norm gradient clipping; 0 = none (Path-X uses 1.0)
  c.eval_every = 500                # steps between validation passes (and at the end)
  c.log_every = 50                  # steps between training-metric log lines
  c.checkpoint_every = 500          # steps between checkpoints
  c.max_eval_batches = 0            # 0 = whole split; >0 caps validation batches (debugging only)
  c.progress_bar = True             # tqdm bar (off automatically when $CI is set)

  m = c.model = ml_collections.ConfigDict()
  m.attention = 'softmax'           # a MODELS attention (set by set_model) or a plug-in 'x.py:Class'
  m.attention_implementation = 'vanilla'  # softmax only: 'vanilla' (n x n matrix) | 'fused'
  m.attention_options = ml_collections.ConfigDict()  # constructor options of a baseline or plug-in
  m.dim = 512                       # model width D
  m.num_heads = 8                   # heads H (Luna: unpack heads)
  m.num_pack_heads = 0              # Luna pack heads Hp; 0 = same as num_heads (reference LRA)
  m.num_layers = 4                  # encoder layers
  m.ffn_dim = 1024                  # feed-forward hidden width
  m.classifier_dim = 1024           # classifier hidden width (reference: = ffn_dim)
  m.dropout = 0.1                   # residual, embedding and P dropout
  m.attention_dropout = 0.1         # dropout on attention probabilities
  m.positions = 'learned'           # position embeddings: 'learned' | 'sinusoidal'
  m.embedding_layernorm = True      # LayerNorm after the embedding (Luna reference; LRA: none)
  m.init = 'reference'              # 'reference' (xavier, luna.md §1) | 'bert' (N(0, 0.02))
  m.head = 'cls'                    # sentence representation: 'cls' | 'mean' | 'mean_p'
  m.mask_padding = True             # pad id 0 is masked; False for pixel tasks (0 is black)
  m.dual_encoder = False            # Retrieval: two documents through one shared encoder
  m.pair_features = 'concat'        # dual head input: 'concat' [a, b] | 'full' [a, b, a*b, a-b]
  m.dtype = 'float32'               # compute dtype: 'float32' | 'bfloat16' | 'float16'
  # Luna only.
  m.pack_length = 16                # l, length of the extra sequence P
  m.tie_kv = False                  # one projection for key and value (paper §4.2 "tied kv")
  m.normalize_before = False        # pre-LN layers (reference option); default post-LN (eq. 6)
  m.contextual_p = True             # P' of layer i feeds layer i+1; False = own P per layer
  m.p_init = 'learned'              # P at the input: 'learned' table | 'sinusoidal' (fixed)
  # Filled in from the data at run time.
  m.vocab_size = 0                  # token ids are 0..vocab_size-1 ([CLS] is vocab_size)
  m.num_classes = 0                 # output classes
  m.max_length = 0                  # = config.max_length
  return c


def set_model(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """Sets config.model_name and the attention fields of the named model preset."""
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; valid choices: {sorted(MODELS)}.')
  attention, pack_length = MODELS[name]
  config.model_name = name
  config.model.attention = attention
  config.model.attention_implementation = 'fused' if name == 'transformer_fused' else 'vanilla'
  if pack_length:
    config.model.pack_length = pack_length
  # Baseline options (baselines.py), LRA's values: Linformer k = 256, Performer 256 features,
  # local attention blocks of 50.
  options = {'linformer': {'projected_length': 256},
             'performer': {'num_features': 256, 'redraw_features': False},
             'local': {'block_size': 50}}.get(attention, {})
  config.model.attention_options = ml_collections.ConfigDict(options)
  return config


def model_label(config: ml_collections.ConfigDict) -> str:
  """What results, sweep folders, reports and profiles call config's model: its preset name, or
  the class name of a plug-in attention (plugins.py)."""
  attention = config.model.attention
  return plugins.label(attention) if plugins.is_plugin(attention) else config.model_name


def _check_choice(field: str, value, choices) -> None:
  if value not in choices:
    raise ValueError(f'config.{field} = {value!r} is not valid; valid choices: {list(choices)}.')


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first bad field and its valid choices."""
  _check_choice('task', config.task, TASKS)
  _check_choice('model_name', config.model_name, list(MODELS))
  _check_choice('data_source', config.data_source, DATA_SOURCES[config.task])
  _check_choice('schedule', config.schedule, SCHEDULES)
  _check_choice('model.head', config.model.head, ('cls', 'mean', 'mean_p'))
  _check_choice('model.positions', config.model.positions, ('learned', 'sinusoidal'))
  _check_choice('model.init', config.model.init, ('reference', 'bert'))
  _check_choice('model.p_init', config.model.p_init, ('learned', 'sinusoidal'))
  _check_choice('model.dtype', config.model.dtype, ('float32', 'bfloat16', 'float16'))
  if plugins.is_plugin(config.model.attention):
    if config.model_name != 'transformer':
      raise ValueError(f'config.model.attention = {config.model.attention!r} is a plug-in; it '
                       'replaces the softmax attention of the Transformer block, so start from '
                       f"the 'transformer' preset (configs/<task>.py:transformer), not "
                       f'{config.model_name!r}.')
    # Import and constructor errors now, before any data is read or any workdir written.
    plugins.check_constructor(plugins.load_class(config.model.attention),
                              dict(config.model.attention_options))
  if config.model.head == 'mean_p' and config.model.attention != 'luna':
    raise ValueError(f"config.model.head = 'mean_p' needs a Luna model, but model_name is "
                     f"{config.model_name!r}; use 'cls' or 'mean', or a luna model.")
  for field in ('batch_size', 'eval_batch_size', 'num_train_steps', 'max_length', 'eval_every'):
    if config[field] <= 0:
      raise ValueError(f'config.{field} must be positive, got {config[field]}.')
  if not 0 <= config.max_truncated_fraction <= 1:
    raise ValueError(f'config.max_truncated_fraction must be in [0, 1], got '
                     f'{config.max_truncated_fraction}.')


def flatten(config: ml_collections.ConfigDict) -> dict:
  """{'model.dim': 512, ...}: the config as one flat dict (for hyperparameter logs and tables)."""
  flat = {}

  def visit(prefix, node):
    for key, value in node.items():
      if isinstance(value, (dict, ml_collections.ConfigDict)):
        visit(f'{prefix}{key}.', value)
      else:
        flat[f'{prefix}{key}'] = value

  visit('', config)
  return flat


# ----------------------------------------------------------------------------------------------
# Building a config from `--config=configs/<task>.py:<arg>` and `--config.<key>=<value>` flags,
# with one-line errors (config_flags itself answers with a traceback or a bare KeyError).
# ----------------------------------------------------------------------------------------------
def config_spec_path(spec: str) -> pathlib.Path:
  """The file of a `path/to/<task>.py[:arg]` spec: the path from the current folder, else, for
  `configs/<task>.py` or `<task>.py`, the task config in CONFIG_DIR (so commands work from any
  folder). ValueError naming the paths tried and the task configs if neither is a file."""
  path = pathlib.Path(spec.partition(':')[0]).expanduser()
  if path.is_file():
    return path
  tried = [str(path.absolute())]
  if not path.is_absolute() and str(path.parent) in ('.', 'configs'):
    if (CONFIG_DIR / path.name).is_file():
      return CONFIG_DIR / path.name
    tried.append(str(CONFIG_DIR / path.name))
  choices = ', '.join(f'configs/{p.name}' for p in sorted(CONFIG_DIR.glob('*.py')))
  raise ValueError(f'config file {path} not found (tried {" and ".join(tried)}); the task '
                   f'configs are {choices} (in {CONFIG_DIR}).')


def resolved_spec(spec: str) -> str:
  """`spec` with its file as config_spec_path finds it (the argument after ':' kept)."""
  path, sep, arg = spec.partition(':')
  return f'{config_spec_path(path)}{sep}{arg}'


def with_resolved_config(argv) -> list[str]:
  """argv with --config's file resolved (resolved_spec), so absl finds it from any folder; a
  spec that resolves to nothing is left for load_config's one-line error."""
  resolved, args = [], iter(argv)
  for arg in args:
    name, has_value, value = arg.partition('=')
    if name == '--config':
      value = value if has_value else next(args, '')
      try:
        value = resolved_spec(value)
      except ValueError:
        pass
      resolved.append(f'--config={value}')
    else:
      resolved.append(arg)
  return resolved


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
                       f'described in lra_luna/config_lib.py.')


def config_flags_of(argv) -> tuple[str | None, list[str]]:
  """(spec of --config, the --config.<key> flags as `--config.<key>=<value>`) found in argv."""
  spec, overrides = None, []
  args = iter(argv)
  for arg in args:
    name, has_value, value = arg.partition('=')
    if name in ('--config', '--config.') or name.startswith('--config.'):
      if not has_value:
        value = next(args, '')
      if name == '--config':
        spec = value
      else:
        overrides.append(f'{name}={value}')
  return spec, overrides


def override_keys(overrides) -> list[str]:
  """The keys of `--config.<key>=<value>` flags."""
  return [flag[len('--config.'):].partition('=')[0] for flag in overrides]


def flag_error_message(error: BaseException, spec: str, argv) -> str:
  """One line for an error raised while parsing --config flags: the root cause, not a traceback."""
  if isinstance(error, ValueError) and not isinstance(error, flags.Error):
    return str(error)  # already ours
  chain = [error]
  while chain[-1].__cause__ or chain[-1].__context__:
    chain.append(chain[-1].__cause__ or chain[-1].__context__)
  keys = override_keys(config_flags_of(argv)[1])
  if keys and any(isinstance(e, (KeyError, AttributeError)) for e in chain):
    try:  # an unknown key: name it against the config as built without overrides
      check_override_keys(load_config(spec), keys)
    except ValueError as e:
      return str(e)
  # config_flags wraps an error of get_config() in the text of a traceback: take the cause.
  message = str(error) if 'Traceback' not in str(error) else str(chain[-1])
  return message.strip().splitlines()[0] if message.strip() else type(chain[-1]).__name__


def load_config(spec: str, overrides=()) -> ml_collections.ConfigDict:
  """The config that `--config=spec` and `--config.<key>=<value>` overrides give, as run_lra
  builds it (a locked config: a misspelt key is an error). ValueError in one line otherwise."""
  spec = resolved_spec(spec)
  argv = ['lra_luna', f'--config={spec}', *overrides]
  flag_values = flags.FlagValues()  # private flags: the caller's absl flags are left alone
  config_flags.DEFINE_config_file('config', None, 'config file', flag_values=flag_values,
                                  lock_config=True, sys_argv=argv)
  try:
    flag_values(argv)
    return flag_values.config
  except Exception as e:  # config_flags raises several types; flag_error_message explains them
    raise ValueError(flag_error_message(e, spec, argv)) from None
