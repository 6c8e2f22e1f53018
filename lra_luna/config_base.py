"""The default config, the config words and the settings they apply: what every task config
(`configs/<task>.py`) builds on, through config_lib.

A task config reads its words with `parse_arg(arg)`, calls `base_config()`, sets what is its own,
then `set_model(config, arg.model)`; load_config (config_loading.py) applies the words every task
shares (long, spt, smoke, rotary). `flatten`, `saved_config` and `config_differences` compare a
config with a run folder's config.json.
"""

import dataclasses
import difflib
import json
import pathlib
import types

import ml_collections

from lra_luna import registry
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
  if 'mqar' in config:  # generated in memory: only the examples the smoke test reads
    config.mqar.update(num_train=train_examples, num_val=eval_examples, num_test=eval_examples)
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


# Fields that say where a config came from, not how it trains: a rerun may differ in them.
BOOKKEEPING_FIELDS = ('preset',)
# Fields that change how a step is computed, not the update it makes (up to float summation
# order): a run folder's config may differ in them (a campaign resumes a run with more
# micro-batches); they are listed as overrides but never shorten a run.
SAME_UPDATE_FIELDS = ('grad_accumulation_steps',)
# Fields that change what a run prints and logs, not what it trains: a run resumes with other
# values (a run started with a progress bar goes on in a sweep without one).
REPORTING_FIELDS = ('log_every', 'progress_bar')


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


def with_defaults(defaults, saved):
  """`saved` (a JSON dict written earlier) with the fields it lacks, at any depth, taken from
  `defaults` (a field's default keeps the behaviour from before the field existed)."""
  if isinstance(defaults, dict) and isinstance(saved, dict):
    return {**defaults, **{k: with_defaults(defaults.get(k), v) for k, v in saved.items()}}
  return saved


def saved_config(saved: dict) -> ml_collections.ConfigDict:
  """The config of a run's config.json, with the fields added since it was written at their
  base_config defaults, so that older run folders still resume and evaluate."""
  return ml_collections.ConfigDict(with_defaults(base_config().to_dict(), saved))
