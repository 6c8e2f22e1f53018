"""Default config, model presets, config words and config checks shared by every task config.

A task config (`configs/<task>.py`) reads its words with `parse_arg(arg)`, calls `base_config()`,
sets what is its own, then `set_model(config, arg.model)`. `validate(config)` is run before
training and names the bad field and its valid choices. `load_config(spec, overrides)` builds
the config of `--config=configs/<task>.py:<words>` and `--config.<key>=<value>` flags once,
with one-line errors.
"""

import dataclasses
import difflib
import importlib.util
import json
import pathlib
import types

from absl import flags
import ml_collections
from ml_collections import config_flags

from lra_luna import protocols
from lra_luna import registry
from lra_luna import spt
from lra_luna import tasks
from lra_luna.models import model_config
import lra_luna

TASKS = tuple(tasks.TASKS)  # the task registry (lra_luna/tasks.py)
# Model name -> its registry entry (lra_luna/registry.py): the config words of the models.
MODELS = registry.MODELS
SCHEDULES = ('rsqrt', 'cosine', 'linear', 'constant')
# jax.default_matmul_precision of a run: 'default' is JAX's (on recent NVIDIA GPUs float32
# matmuls run as TF32, on TPUs as bfloat16 passes), 'high' 3 bf16 passes / TF32 on TPUs and GPUs,
# 'highest' true float32 everywhere. CPUs compute float32 matmuls in float32 whatever this is.
MATMUL_PRECISIONS = ('default', 'high', 'highest')
# Where a task's data may come from (config.data_source); the first is the default.
DATA_SOURCES = {name: task.data_sources for name, task in tasks.TASKS.items()}
# The task configs: configs/ of the checkout, else the copy installed as lra_luna/configs.
CONFIG_DIR = (lra_luna.CHECKOUT or pathlib.Path(__file__).resolve().parent) / 'configs'

# The words after the colon of `configs/<task>.py:<words>` and their defaults. A model name sets
# `model`; a bare word turns its flag on; `key=value` sets any word. Adding a variant is one line
# here (then its values in the task configs).
WORDS = {
    'model': 'luna16',  # a MODELS preset
    'quick': False,     # a small task and model that a 2-core CPU trains in minutes
    'mid': False,       # long inputs that need their range, five seeds in 30 min on a 2-core CPU
    'long': False,      # with mid: LONG_FACTOR times its steps, where the SSMs learn the range
    'paper': False,     # the Luna authors' protocol instead of LRA's (lra_luna/protocols.py)
    'fp16': False,      # float16 compute with dynamic loss scaling (the authors' fairseq --fp16)
    'smoke': False,     # a smoke test: full shapes, SMOKE_STEPS steps, SMOKE_EVAL_BATCHES batches
    'rotary': False,    # rotary positions (RoFormer) instead of the model's own (docs/positions.md)
    'spt': False,       # self-pretraining on the task's training inputs, then fine-tuning (spt.py)
}
# What each word does, for run_lra.py --help (every WORDS key has a line; tested).
WORD_HELP = {
    'model': 'a model word (below); the default luna16 when none is given',
    'quick': 'a small task and model that a 2-core CPU trains in minutes',
    'mid': ('long inputs that need their range (ListOps median 416 tokens, Pathfinder 32 x 32), '
            'a small model; five vmapped seeds in about 30 minutes on a 2-core CPU (docs/mid.md)'),
    'long': ('with mid: its training LONG_FACTOR times as long (ListOps-mid 25,600 steps, 41 '
             'epochs: where S4D and S5 pass majority + 20, docs/mid.md)'),
    'paper': "the Luna authors' protocol (docs/protocols.md); combines with quick and smoke",
    'fp16': 'float16 compute with dynamic loss scaling',
    'smoke': ('the full model and data shapes for a few steps on a few generated examples: an '
              'end-to-end check in minutes (README, "Smoke tests")'),
    'rotary': ('rotary positions (RoFormer) in the attention instead of learned ones; the '
               'models that take them are listed when one does not (docs/positions.md)'),
    'spt': ("self-pretraining on the task's own training inputs, then fine-tuning "
            '(docs/spt.md)'),
}
# The long word (use_long_settings): how many times the mid config's steps it trains.
LONG_FACTOR = 16
# The smoke word (use_smoke_settings): steps trained, batches per evaluation pass, and the
# largest training and evaluation batch (a pixel task's batch of 512 would take a laptop minutes
# a step; the model and sequence shapes stay the config's).
SMOKE_STEPS = 5
SMOKE_EVAL_BATCHES = 2
SMOKE_BATCH_SIZE = 8


def parse_arg(arg: str | None, **defaults) -> types.SimpleNamespace:
  """'luna16,quick' or 'model=luna16,quick=true' -> namespace(model='luna16', quick=True).

  big_vision's parse_arg: the words and their defaults are WORDS updated with `defaults`; a later
  word wins over an earlier one. ValueError in one line for a word that is none of them.
  """
  values = {**WORDS, **defaults}
  flag_words = [key for key, value in values.items() if isinstance(value, bool)]
  for word in filter(None, (w.strip() for w in (arg or '').split(','))):
    key, has_value, value = word.partition('=')
    if not has_value:
      key, value = ('model', word) if word in MODELS else (word, True)
    if key not in values or (value is True and key not in flag_words):
      close = difflib.get_close_matches(key, [*MODELS, *flag_words], n=1, cutoff=0.6)
      kind = 'model' if close and close[0] in MODELS else 'word'
      hint = f' Did you mean {close[0]!r}?' if close else ''
      raise ValueError(f'Unknown {kind} {key!r} in config argument {arg!r}.{hint} Valid words: '
                       f'a model ({", ".join(MODELS)}), or one of {", ".join(flag_words)}; each '
                       'also as word=value, e.g. model=luna16 or quick=false.')
    values[key] = _word_value(key, value, values[key], arg)
  if values.get('quick') and values.get('mid'):
    raise ValueError(f'quick and mid in config argument {arg!r} are two sizes; give one of '
                     'them (smoke < quick < mid < the full size).')
  if values.get('long') and not values.get('mid'):
    raise ValueError(f'long in config argument {arg!r} lengthens the mid size\'s training; give '
                     'it with mid (e.g. listops.py:s5,mid,long).')
  if values['model'] not in MODELS:
    raise ValueError(f'Unknown model {values["model"]!r} in config argument {arg!r}; valid '
                     f'choices: {sorted(MODELS)}.')
  return types.SimpleNamespace(**values)


def _word_value(key: str, value, default, arg):
  """A word's value in its default's type ('true' / 'false' for a flag)."""
  if not isinstance(default, bool) or isinstance(value, bool):
    return type(default)(value)
  if value.lower() not in ('true', 'false'):
    raise ValueError(f'{key}={value} in config argument {arg!r}: expected {key}=true or '
                     f'{key}=false (or the bare word {key}).')
  return value.lower() == 'true'


def config_help() -> str:
  """The help of --config: the tasks, the models and every word, from their registries."""
  words = '; '.join(f'{word}: {WORD_HELP[word]}' for word in WORDS if word != 'model')
  return (f'configs/<task>.py:<model>[,<word>...]. Tasks: {", ".join(TASKS)}. Models: '
          f'{", ".join(MODELS)} (default {WORDS["model"]}). Words: {words}. '
          '--config.<key>=<value> sets any field (lra_luna/config_lib.py, '
          'lra_luna/models/model_config.py).')


def base_config() -> ml_collections.ConfigDict:
  """Every field a run reads, with its task-neutral default. A task config sets what is its own:
  the fields marked (*) are placeholders (0 or empty) that validate() refuses."""
  c = ml_collections.ConfigDict()
  c.task = ''                       # one of TASKS
  # configs/<task>.py:<words> this config was built from; set by load_config (run_record).
  c.preset = ''
  c.protocol = 'lra'                # 'lra' (LRA sizes, Table 4 rates) | 'paper' (protocols.py)
  c.model_name = ''                 # one of MODELS (set_model); a plug-in needs 'transformer'
  c.seed = 0                        # training seed: parameters, dropout and data order
  # Data root: '' = $LRA_DATA_DIR, else <repo>/data/store (installed: ~/.cache/lra_luna/data).
  c.data_dir = ''
  c.dataset_name = ''               # folder of this task's files under the data root (*)
  c.data_source = 'auto'            # 'auto' | 'release' | 'generated' | 'tfds' (DATA_SOURCES)
  c.max_length = 0                  # tokens per example after truncation, [CLS] not counted (*)
  c.max_truncated_fraction = 0.01   # refuse data when more than this share of examples is cut
  # Append an end-of-sequence token (id = the task's vocab size) to every sequence before the cut
  # to max_length, as the Luna authors' binarised data (max_length counts it; a sequence of
  # max_length tokens or more loses it). Pixel tasks then need max_length 1025.
  c.append_eos = False
  c.batch_size = 0                  # global training batch, split over all devices (*)
  # Micro-batches per step: the gradient is their mean (same update, ~1/k activation memory)
  c.grad_accumulation_steps = 1
  c.eval_batch_size = 0             # global evaluation batch, last batch padded and masked (*)
  c.num_train_steps = 0             # optimizer steps (*)
  c.warmup_steps = 0                # linear warmup steps of the schedule (*)
  c.schedule = ''                   # 'rsqrt': warmup then lr*sqrt(w/s); 'cosine', 'linear': to 0 (*)
  c.learning_rate = 0.0             # peak learning rate, at the end of warmup (*)
  c.weight_decay = 0.0              # AdamW decoupled weight decay (times the lr); 0 = none
  # > 0: an SSM's own parameters (SSM_PARAMETERS of models/blocks/: s4d.py, s5.py, lru.py) train at this
  # peak rate (same schedule) with no weight decay, as their authors; 0: like every other one.
  c.ssm_learning_rate = 0.0
  c.adam_b1 = 0.9                   # Adam beta1 (LRA, Luna reference)
  c.adam_b2 = 0.98                  # Adam beta2 (LRA, Luna reference)
  c.adam_eps = 1e-8                 # Adam epsilon
  c.grad_clip_norm = 0.0            # global-norm gradient clipping; 0 = none (Path-X uses 1.0)
  c.eval_every = 0                  # steps between validation passes, and at the end (*)
  c.log_every = 50                  # steps between training-metric log lines
  c.checkpoint_every = 0            # steps between checkpoints (*)
  c.max_eval_batches = 0            # 0 = whole split; >0 caps validation batches (debugging only)
  c.progress_bar = True             # stderr progress: a bar on a terminal, else lines; off if $CI
  c.matmul_precision = 'default'    # one of MATMUL_PRECISIONS (jax.default_matmul_precision)
  c.smoke = False                   # a smoke test (the word smoke): results and reports say so
  c.pretraining = pretraining_config()  # self-pretraining (the word spt), off by default
  # Fine-tune from the finished pretraining in a run folder or its pretraining/ folder; its
  # objective and settings become config.pretraining (spt.use_pretraining_of).
  c.pretrained = ''
  # The model: every field of ModelConfig with its default (models/model_config.py says what
  # each one is and checks it).
  c.model = dataclasses.asdict(model_config.ModelConfig())
  return c


def pretraining_config() -> ml_collections.ConfigDict:
  """config.pretraining (SPT, the word spt; lra_luna/spt.py, docs/spt.md): with an objective, a
  first phase trains the encoder on the training split's inputs, the run then fine-tunes it."""
  p = ml_collections.ConfigDict()
  p.objective = ''                  # '' (train from scratch) | 'masked' | 'causal'
  # masked: share of the real tokens replaced by the mask id; the word spt sets the paper's rate
  # per task (spt.PAPER_MASK_RATES: ListOps 0.10, Text and Retrieval 0.15, pixel tasks 0.50).
  p.mask_rate = 0.0
  # The token loss: 'ce' cross-entropy over the task's vocabulary | 'l1' the absolute error of
  # the normalised pixel value (pixel tasks; the authors' `lm_loss: l1`, which spt sets on Image).
  p.loss = 'ce'
  p.num_train_steps = 0             # optimizer steps of the pretraining phase
  p.warmup_steps = 0                # its schedule's warmup
  p.schedule = 'constant'           # its schedule (SCHEDULES)
  p.learning_rate = 0.0             # its peak learning rate
  p.weight_decay = 0.0              # its AdamW weight decay
  # Pretraining seed: >= 0 one pretraining for every fine-tuning seed (the authors fine-tune
  # from one checkpoint), -1 each fine-tuning seed pretrains with its own seed.
  p.seed = 0
  p.is_phase = False                # set in the pretraining phase's own config (not by hand)
  return p


def set_model(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """Sets config.model_name and the attention fields of the named model (its registry entry):
  the attention, its implementation, Luna's pack length, and the attention's options at LRA's
  values for config.task (so set the task first)."""
  model = registry.get(name)
  config.model_name = name
  config.model.attention = model.attention
  config.model.attention_implementation = model.implementation
  if model.pack_length:
    config.model.pack_length = model.pack_length
  config.model.attention_options = ml_collections.ConfigDict(model.options_for(config.task))
  for field, value in model.settings.items():  # what the model is (e.g. S4D: no positions)
    section, _, key = field.rpartition('.')
    (config[section] if section else config)[key] = value
  return config


def use_long_settings(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The word `long` (with mid): LONG_FACTOR times the mid config's steps on the same schedule
  (its warmup kept, its decay stretched), evaluated and checkpointed once every mid run's length.
  On ListOps-mid 1,600 -> 25,600 steps, every 1,600: the length at which S4D and S5 read the whole
  expression, where at 1,600 steps every model stops at the first token (docs/mid.md)."""
  config.eval_every = config.checkpoint_every = config.num_train_steps
  config.num_train_steps *= LONG_FACTOR
  return config


def use_smoke_settings(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The smoke test of config (the word `smoke`): the same model and sequence shapes, batches of
  at most SMOKE_BATCH_SIZE, SMOKE_STEPS steps with one validation and checkpoint at the end,
  every evaluation pass cut to SMOKE_EVAL_BATCHES batches. A generated set (ListOps,
  Pathfinder) holds only the examples the test reads (its evaluation splits end in a part
  batch, so padding and masking the last batch is checked too), in a folder of its own
  (<dataset_name>-smoke), so it never passes for the full set; release and TFDS data are read as
  they are."""
  config.smoke = True
  config.num_train_steps = SMOKE_STEPS
  config.eval_every = config.checkpoint_every = SMOKE_STEPS
  config.log_every = min(config.log_every, 5)
  config.max_eval_batches = SMOKE_EVAL_BATCHES
  config.batch_size = min(config.batch_size, SMOKE_BATCH_SIZE)
  config.eval_batch_size = min(config.eval_batch_size, SMOKE_BATCH_SIZE)
  config.grad_accumulation_steps = 1
  if config.pretraining.objective:
    config.pretraining.num_train_steps = SMOKE_STEPS
  train_examples = SMOKE_STEPS * config.batch_size
  eval_examples = SMOKE_EVAL_BATCHES * config.eval_batch_size - config.eval_batch_size // 2
  if 'listops' in config:
    config.listops.update(num_train=train_examples, num_val=eval_examples,
                          num_test=eval_examples)
    config.dataset_name += '-smoke'
  if 'pathfinder' in config:  # split 80/10/10 in file order
    num_images = max(-(-train_examples * 10 // 8), eval_examples * 10)
    config.pathfinder.num_images = num_images
    config.pathfinder.images_per_batch = min(config.pathfinder.images_per_batch, num_images)
    config.pathfinder.generate_if_missing = True  # a few images, even at Path-X's 128 x 128
    config.dataset_name += '-smoke'
  return config


def use_uncalibrated_mid_settings(config: ml_collections.ConfigDict, *, batch_size: int,
                                  eval_batch_size: int) -> ml_collections.ConfigDict:
  """The word `mid` for a task whose data was not on the calibration machine (Text, Retrieval,
  Image; docs/mid.md): the mid model of ListOps and Pathfinder (2 layers of 64, no dropout) and
  600 steps at 2e-3 after 60 of warmup, evaluated and checkpointed every 300 steps."""
  config.batch_size, config.eval_batch_size = batch_size, eval_batch_size
  config.num_train_steps = 600
  config.warmup_steps = 60
  config.learning_rate = 2e-3
  config.eval_every = config.checkpoint_every = 300
  config.log_every = 100
  m = config.model
  m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 64, 4, 2, 128, 128
  m.dropout = m.attention_dropout = 0.0
  return config


# The label suffix of a self-pretrained run (spt.py): its sweep folder, results and report rows
# stand beside the same model's from scratch.
SPT_SUFFIX = registry.SPT_SUFFIX


def model_label(config: ml_collections.ConfigDict) -> str:
  """What results, sweep folders, reports and profiles call config's model: its preset name, or
  the class name of a plug-in attention (plugins.py); then `+rotary` with rotary positions and
  `+spt` when self-pretrained (registry.ROTARY_SUFFIX, SPT_SUFFIX)."""
  from lra_luna.models import plugins  # Imported here: report reads labels without JAX.
  attention = config.model.attention
  name = plugins.label(attention) if plugins.is_plugin(attention) else config.model_name
  rotary = config.model.get('positions') == 'rotary'
  pretraining = config.get('pretraining', {})
  spt = bool(pretraining.get('objective') or config.get('pretrained'))
  return (name + (registry.ROTARY_SUFFIX if rotary else '')
          + (registry.SPT_SUFFIX if spt else ''))


def _check_choice(field: str, value, choices) -> None:
  if value not in choices:
    raise ValueError(f'config.{field} = {value!r} is not valid; valid choices: {list(choices)}.')


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first bad field and its valid choices. The model's fields and
  rules are checked by ModelConfig (models/model_config.py)."""
  from lra_luna.models import plugins  # Imported here: report reads labels without JAX.
  _check_choice('task', config.task, TASKS)
  _check_choice('model_name', config.model_name, list(MODELS))
  _check_choice('data_source', config.data_source, DATA_SOURCES[config.task])
  _check_choice('protocol', config.protocol, protocols.PROTOCOLS)
  if plugins.is_plugin(config.model.attention):
    if config.model_name != 'transformer':
      raise ValueError(f'config.model.attention = {config.model.attention!r} is a plug-in; it '
                       'replaces the softmax attention of the Transformer block, so start from '
                       f"the 'transformer' preset (configs/<task>.py:transformer), not "
                       f'{config.model_name!r}.')
    # Import and constructor errors now, before any data is read or any workdir written.
    plugins.check_constructor(plugins.load_class(config.model.attention),
                              dict(config.model.attention_options))
  else:
    plugins.check_not_a_bare_file(config.model.attention)
    attentions = sorted({model.attention for model in MODELS.values()})
    _check_choice('model.attention', config.model.attention,
                  [*attentions, "a plug-in 'path/to/file.py:Class'"])
    if registry.options_class(config.model.attention) is not None:
      check_attention_options(config)
  model_config.ModelConfig.from_config(config.model)
  _check_choice('schedule', config.schedule, SCHEDULES)
  _check_choice('matmul_precision', config.matmul_precision, MATMUL_PRECISIONS)
  for field in ('batch_size', 'eval_batch_size', 'num_train_steps', 'max_length', 'eval_every',
                'checkpoint_every', 'log_every', 'learning_rate', 'model.dim', 'model.num_heads',
                'model.num_layers', 'model.ffn_dim', 'model.classifier_dim'):
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
      _check_choice('pretraining.schedule', pretraining.schedule, SCHEDULES)
  if config.get('pretrained'):  # a finished pretraining of this encoder
    saved = spt.finished_pretraining_config(config.pretrained)
    spt.check_same_encoder(config.pretrained, flatten(saved_config(saved)), flatten(config))


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


def config_differences(saved: dict, config) -> list[str]:
  """The fields in which a run folder's config.json (`saved`) differs from `config`; a field that
  config.json predates counts as its default (saved_config); where the config came from
  (BOOKKEEPING_FIELDS: its preset), how a step is computed (SAME_UPDATE_FIELDS: its
  micro-batches) and what the run reports (REPORTING_FIELDS) do not count."""
  saved = flatten(json.loads(saved_config(saved).to_json()))
  wanted = flatten(json.loads(config.to_json()))
  return sorted(k for k in set(saved) | set(wanted)
                if saved.get(k) != wanted.get(k)
                and k not in (*BOOKKEEPING_FIELDS, *SAME_UPDATE_FIELDS, *REPORTING_FIELDS))


def saved_config(saved: dict) -> ml_collections.ConfigDict:
  """The config of a run's config.json, with the fields added since it was written at their
  base_config defaults (a field's default keeps the behaviour from before the field existed),
  so that older run folders still resume and evaluate."""
  def merged(default, value):
    if isinstance(default, dict) and isinstance(value, dict):
      return {**default, **{k: merged(default.get(k), v) for k, v in value.items()}}
    return value
  return ml_collections.ConfigDict(merged(base_config().to_dict(), saved))


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
    if str(CONFIG_DIR / path.name) not in tried:  # run from the checkout: the same path
      tried.append(str(CONFIG_DIR / path.name))
  choices = ', '.join(f'configs/{p.name}' for p in sorted(CONFIG_DIR.glob('*.py')))
  raise ValueError(f'config file {path} not found (tried {" and ".join(tried)}); the task '
                   f'configs are {choices} (in {CONFIG_DIR}).')


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
  if parse_arg(arg).long:  # the mid config trained longer, before spt copies its steps
    use_long_settings(config)
  if parse_arg(arg).spt:  # every task config's self-pretraining, before smoke and the overrides
    spt.use_spt_settings(config)
  if parse_arg(arg).smoke:  # every task config's smoke test, before the overrides
    use_smoke_settings(config)
  if parse_arg(arg).rotary:  # every task config's rotary positions, before the overrides
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


# ----------------------------------------------------------------------------------------------
# The run record: what results.json says of how a run trained against its preset, so that
# report and campaign read it instead of guessing.
# ----------------------------------------------------------------------------------------------
# Fields that say where a config came from, not how it trains: a rerun may differ in them.
BOOKKEEPING_FIELDS = ('preset',)
# Fields that change how a step is computed, not the update it makes (up to float summation
# order): a run folder's config may differ in them (a campaign resumes a run with more
# micro-batches); they are listed as overrides but never shorten a run.
SAME_UPDATE_FIELDS = ('grad_accumulation_steps',)
# Fields that change what a run prints and logs, not what it trains: a run resumes with other
# values (a run started with a progress bar goes on in a sweep without one).
REPORTING_FIELDS = ('log_every', 'progress_bar')
# Fields never listed as overrides of a preset: they do not change how a run trains (where it
# runs, which seed, its progress output), or have their own column (the sweep's head).
NOT_OVERRIDE_FIELDS = (*BOOKKEEPING_FIELDS, 'seed', 'data_dir', 'progress_bar', 'model.head')
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
  if not name or not (CONFIG_DIR / name).is_file():
    return None
  try:
    return load_config(f'{CONFIG_DIR / name}:{preset.partition(":")[2]}')
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


def full_run_steps(config: ml_collections.ConfigDict) -> int | None:
  """num_train_steps of the full run of config's task, model and protocol (its preset without
  quick or smoke, without overrides); None when that preset cannot be built."""
  full = preset_config(full_preset(config))
  return None if full is None else full.num_train_steps


def shortened_reasons(config, full_steps=None) -> list[str]:
  """Why a run is shorter than the full run of its protocol; [] for a full run. THE one test of
  "shortened" (report's tables, campaign's facts): the quick word, a smoke test, fewer steps than
  `full_steps` (None: looked up with full_run_steps()), a capped evaluation."""
  if full_steps is None:
    full_steps = full_run_steps(config)
  reasons = []
  if preset_word(config.get('preset', ''), 'quick'):
    reasons.append('quick config')
  if preset_word(config.get('preset', ''), 'mid'):
    reasons.append('mid config')
  if config.get('smoke'):
    reasons.append('smoke test')
  if full_steps and config.num_train_steps < full_steps:
    reasons.append(f'{config.num_train_steps} of {full_steps} steps')
  if config.get('max_eval_batches', 0) > 0:
    reasons.append(f'evaluation capped at {config.max_eval_batches} batches')
  return reasons


def preset_overrides(config: ml_collections.ConfigDict) -> list[str] | None:
  """Sorted 'key=value' of the fields where config differs from its own preset (without
  NOT_OVERRIDE_FIELDS); None when the preset is unknown or cannot be built."""
  preset = preset_config(config.get('preset', ''))
  if preset is None:
    return None
  ours, theirs = flatten(config), flatten(preset)
  return [f'{key}={ours.get(key)}' for key in sorted(set(ours) | set(theirs))
          if key not in NOT_OVERRIDE_FIELDS and ours.get(key) != theirs.get(key)]


def run_record(config: ml_collections.ConfigDict) -> dict:
  """What results.json['run'] records of how a run trained: its preset, protocol, model entry,
  steps against the full run's, overrides of its preset and shortened_reasons; a
  self-pretrained run (spt.py) its pretraining's objective and steps too."""
  steps = full_run_steps(config)
  record = {'preset': config.get('preset', ''), 'protocol': config.protocol,
            'model': config.model_name, 'steps': config.num_train_steps, 'full_steps': steps,
            'overrides': preset_overrides(config), 'shortened': shortened_reasons(config, steps)}
  pretraining = config.get('pretraining', {})
  if pretraining.get('objective') and not pretraining.get('is_phase'):
    record['pretraining'] = {'objective': pretraining.objective,
                             'steps': pretraining.num_train_steps}
  return record
