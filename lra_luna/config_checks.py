"""The checks of a config before a run: `validate(config)` names the first bad field and what to
do, in one line, before any data is read or any model built (config_lib re-exports it).
"""

import ml_collections

from lra_luna import cli
from lra_luna import config_base
from lra_luna import config_loading
from lra_luna import protocols
from lra_luna import registry
from lra_luna import spt
from lra_luna.models import model_config

# The fields every run needs above 0 (a task config sets them; base_config leaves them at 0).
POSITIVE_FIELDS = ('batch_size', 'eval_batch_size', 'num_train_steps', 'max_length',
                   'eval_every', 'checkpoint_every', 'log_every', 'learning_rate', 'model.dim',
                   'model.num_heads', 'model.num_layers', 'model.ffn_dim', 'model.classifier_dim')


def check_choice(field: str, value, choices) -> None:
  """ValueError in one line for a value outside `choices`, with the nearest one."""
  if value not in choices:
    close = cli.closest(value, choices)
    hint = f' Did you mean {close!r}?' if close else ''
    raise ValueError(f'config.{field} = {value!r} is not valid; valid choices: '
                     f'{list(choices)}.{hint}')


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first bad field and its valid choices. The model's fields and
  rules are checked by ModelConfig (models/model_config.py)."""
  check_choice('task', config.task, config_base.TASKS)
  check_choice('model_name', config.model_name, list(config_base.MODELS))
  check_choice('data_source', config.data_source, config_base.DATA_SOURCES[config.task])
  check_choice('protocol', config.protocol, protocols.PROTOCOLS)
  check_attention(config)
  model_config.ModelConfig.from_config(config.model)
  check_choice('schedule', config.schedule, config_base.SCHEDULES)
  check_choice('matmul_precision', config.matmul_precision, config_base.MATMUL_PRECISIONS)
  for field in POSITIVE_FIELDS:
    section, _, key = field.rpartition('.')
    value = (config[section] if section else config)[key]
    if value <= 0:
      raise ValueError(f'config.{field} must be positive, got {value}; set it in the task '
                       f'config (configs/<task>.py) or with --config.{field}=<value>.')
  check_accumulation(config.grad_accumulation_steps, config.batch_size)
  if not 0 <= config.max_truncated_fraction <= 1:
    raise ValueError(f'config.max_truncated_fraction must be in [0, 1], got '
                     f'{config.max_truncated_fraction}.')
  pretraining = config.get('pretraining', {})
  if pretraining.get('objective') or config.get('pretrained'):
    spt.validate(config)
    if pretraining.get('objective') and not pretraining.get('is_phase'):
      check_choice('pretraining.schedule', pretraining.schedule, config_base.SCHEDULES)
  if config.get('pretrained'):
    check_pretrained(config)


def check_attention(config: ml_collections.ConfigDict) -> None:
  """ValueError in one line for an attention that is neither a registry attention nor a
  plug-in that loads and takes its options, or options its attention does not take."""
  from lra_luna.models import plugins  # Imported here: report reads labels without JAX.
  attention = config.model.attention
  if plugins.is_plugin(attention):
    if config.model_name != 'transformer':
      raise ValueError(f'config.model.attention = {attention!r} is a plug-in; it '
                       'replaces the softmax attention of the Transformer block, so start from '
                       f"the 'transformer' preset (configs/<task>.py:transformer), not "
                       f'{config.model_name!r}.')
    # Import and constructor errors now, before any data is read or any workdir written.
    plugins.check_constructor(plugins.load_class(attention), dict(config.model.attention_options))
    return
  plugins.check_not_a_bare_file(attention)
  attentions = sorted({model.attention for model in config_base.MODELS.values()})
  check_choice('model.attention', attention, [*attentions, "a plug-in 'path/to/file.py:Class'"])
  if registry.options_class(attention) is not None:
    check_attention_options(config)


def check_pretrained(config: ml_collections.ConfigDict) -> None:
  """ValueError in one line unless config.pretrained names a finished pretraining of this
  config's encoder; the line names the --config that builds the pretraining's encoder."""
  saved = spt.finished_pretraining_config(config.pretrained)
  theirs = config_base.flatten(config_base.saved_config(saved))
  spt.check_same_encoder(config.pretrained, theirs, config_base.flatten(config),
                         pretraining_spec(theirs))


def pretraining_spec(theirs: dict) -> str | None:
  """The --config (and --config.<key> flags) that build the encoder of a pretraining whose flat
  config is `theirs`: its own preset with every word but spt (a run given config.pretrained takes
  its objective from its pretraining, and spt would ask for 'masked'), then the encoder fields
  that preset does not give. None when that preset cannot be built here."""
  name, _, arg = theirs.get('preset', '').partition(':')
  words = ','.join(w.strip() for w in arg.split(',')
                   if w.strip() and w.strip().partition('=')[0] != 'spt')
  preset = config_loading.preset_config(f'{name}:{words}')
  if preset is None:
    return None
  built = config_base.flatten(preset)
  overrides = [f'--config.{key}={theirs.get(key)}' for key in spt.encoder_fields(theirs)
               if built.get(key) != theirs.get(key)]
  return ' '.join([f'--config configs/{name}:{words}', *overrides])


def check_accumulation(steps, batch_per_device: int, devices: int = 1) -> None:
  """ValueError in one line unless config.grad_accumulation_steps is a whole number >= 1 that
  divides the batch of each of `devices` devices (batch_per_device rows)."""
  if not isinstance(steps, int) or steps < 1 or batch_per_device % steps:
    where = f'per-device batch ({devices} devices)' if devices > 1 else 'batch_size'
    raise ValueError(f'config.grad_accumulation_steps = {steps!r} must be a whole number >= 1 '
                     f'that divides the {where}, {batch_per_device}; use a divisor such as 2 '
                     'or 4, or 1 for no accumulation.')


def check_attention_options(config: ml_collections.ConfigDict) -> None:
  """ValueError in one line for an option the baseline attention (or the model's own block) does
  not take, or a value outside its valid range at config.max_length (the class's
  check_options), before any data is read or any model built."""
  cls = registry.options_class(config.model.attention)
  options = dict(config.model.attention_options)
  unknown = sorted(set(options) - set(cls.CONFIG_OPTIONS))
  if unknown:
    raise ValueError(f'config.model.attention_options.{unknown[0]} is no option of '
                     f'{cls.__name__} ({config.model_name}); its options are: '
                     f'{", ".join(cls.CONFIG_OPTIONS) or "none"}.')
  try:
    cls.check_options(max_length=config.max_length + 1, **options)
  except ValueError as e:
    raise ValueError(f'config.model.attention_options: {e}') from None
