"""Self-pretraining (SPT; Amos, Berant and Gupta, "Never Train from Scratch", ICLR 2024): the
word `spt` and `config.pretraining`, checked here; the two phases run in training/train.py (with
training/pretraining.py and training/fine_tuning.py), the objectives are models/objectives, the
settings and their sources docs/spt.md.

A run with config.pretraining.objective set first pretrains its encoder on the training split's
inputs (never validation or test inputs) in <workdir>/pretraining/ (run_folder.pretraining_dir),
a run folder of its own, then fine-tunes that encoder with a fresh classification head. No JAX
here, and nothing of config_lib: config_lib builds on this module (its words and validate).
"""

import json
import pathlib

import ml_collections

from lra_luna import registry
from lra_luna.models import model_config as model_config_lib
from lra_luna.training import run_folder

OBJECTIVES = model_config_lib.PRETRAINING_OBJECTIVES
# The masking ratio per task of the paper's Section 2 (Amos et al. 2024): 50% on the visual tasks
# (after He et al. 2022), 15% on the language tasks (after RoBERTa, Liu et al. 2019), 10% on
# ListOps. Their released configs leave `dataset.mlm_prob` at 0, given on the command line.
PAPER_MASK_RATES = {'listops': 0.10, 'text': 0.15, 'retrieval': 0.15,
                    'image': 0.50, 'pathfinder': 0.50, 'pathx': 0.50}
LOSSES = ('ce', 'l1')  # config.pretraining.loss: cross-entropy over the vocabulary | pixel L1
# The pixel normalisation of the authors' L1 targets, (mean, std) in 0..255 grey levels: their
# CIFAR grey-scale `Normalize(122.6 / 255, 61.0 / 255)` (src/dataloaders/basic.py, CIFAR10LM)
# and their Pathfinder `Normalize(mean=0.5, std=0.5)` (src/dataloaders/lra.py, PathFinderLM).
PIXEL_NORMALIZATION = {'image': (122.6, 61.0), 'pathfinder': (127.5, 127.5),
                       'pathx': (127.5, 127.5)}
# The tasks whose released SPT configs all use the L1 loss (their *-lra-cifar-mlm.yaml); their
# Pathfinder and Path-X configs use cross-entropy (all but mega/pathfinder-mlm-l1.yaml).
AUTHORS_L1_TASKS = ('image',)
# ModelConfig fields that belong to the classification head or to regularisation, not to the
# encoder's parameters: fine-tuning may change them against its pretraining.
HEAD_FIELDS = ('head', 'classifier_dim', 'pair_features', 'dual_head_layers', 'classifier_bias',
               'mean_includes_cls', 'prune_last_layer', 'dropout', 'attention_dropout')
# Top-level fields a pretraining and the runs fine-tuned from it must share (the objective is
# the pretraining's own: use_pretraining_of).
SHARED_FIELDS = ('task', 'model_name', 'max_length', 'append_eos', 'dataset_name')


def use_spt_settings(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The word `spt`: masked pretraining at the paper's mask rate for the task (PAPER_MASK_RATES;
  a task outside it, such as a plugin's, gets 0.15, BERT's) with the authors' constant schedule
  after a warmup, as many steps, the same peak rate and weight decay as the task's training, and
  the authors' loss per task (AUTHORS_L1_TASKS: L1 on pixel values; else cross-entropy)."""
  p = config.pretraining
  p.objective = 'masked'
  p.mask_rate = PAPER_MASK_RATES.get(config.task, 0.15)
  p.loss = 'l1' if config.task in AUTHORS_L1_TASKS else 'ce'
  p.num_train_steps = config.num_train_steps
  p.warmup_steps = config.warmup_steps
  p.schedule = 'constant'
  p.learning_rate = config.learning_rate
  p.weight_decay = config.weight_decay
  return config


def causal_models() -> list[str]:
  """The registry models with a causal form (model_config.CAUSAL_ATTENTIONS, vanilla)."""
  return [name for name, model in registry.MODELS.items()
          if model.attention in model_config_lib.CAUSAL_ATTENTIONS
          and model.implementation == 'vanilla']


def validate(config: ml_collections.ConfigDict) -> None:
  """ValueError in one line for a bad pretraining setting, before any data is read (the
  schedule's name and config.pretrained's folder are config_lib.validate's to check)."""
  p = config.pretraining
  if p.objective not in ('', *OBJECTIVES):
    raise ValueError(f'config.pretraining.objective = {p.objective!r} is not valid; valid '
                     f"choices: {['', *OBJECTIVES]} ('' trains from scratch).")
  if p.objective == 'masked' and not 0 < p.mask_rate < 1:
    raise ValueError(f'config.pretraining.mask_rate = {p.mask_rate} must be in (0, 1), the '
                     'share of real tokens masked; the paper uses 0.10 on ListOps, 0.15 on Text and '
                     'Retrieval, 0.50 on Image, Pathfinder and Path-X (the word spt sets it).')
  if p.objective and p.loss not in LOSSES:
    raise ValueError(f'config.pretraining.loss = {p.loss!r} is not valid; valid choices: '
                     f"{list(LOSSES)} ('l1' on pixel tasks only).")
  if p.objective and p.loss == 'l1' and config.task not in PIXEL_NORMALIZATION:
    raise ValueError(f"config.pretraining.loss = 'l1' needs pixel values; {config.task} has "
                     f"tokens: use 'ce' (the L1 loss is for {', '.join(PIXEL_NORMALIZATION)}).")
  if p.objective == 'causal':
    check_causal(config)
  if p.objective and not p.is_phase:
    for field in ('num_train_steps', 'learning_rate'):
      if p[field] <= 0:
        raise ValueError(f'config.pretraining.{field} must be positive, got {p[field]}; set '
                         f'--config.pretraining.{field}=<value> (the word spt sets it).')


def check_causal(config) -> None:
  """ValueError unless config's model has a causal form and a head a causal encoder feeds."""
  model = config.model
  if (model.attention not in model_config_lib.CAUSAL_ATTENTIONS
      or model.attention_implementation != 'vanilla'):
    raise ValueError(f"config.pretraining.objective = 'causal' needs a model with a causal "
                     f'form; {config.model_name} has none. Models that take it: '
                     f"{', '.join(causal_models())}; or use objective 'masked'.")
  if model.head != 'mean':
    raise ValueError(f"config.model.head = {model.head!r} cannot read a causal encoder (position "
                     "0 sees [CLS] alone, and causal Luna has no P); use "
                     "--config.model.head=mean with objective 'causal'.")


def phase_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The config of the pretraining phase of `config`'s run: its steps, schedule,
  rate and weight decay from config.pretraining, validation (on training inputs) and checkpoints
  at the same spacing, capped at its steps."""
  c = ml_collections.ConfigDict(config.to_dict())
  p = c.pretraining
  c.pretrained = ''
  c.num_train_steps, c.warmup_steps = p.num_train_steps, p.warmup_steps
  c.schedule, c.learning_rate, c.weight_decay = p.schedule, p.learning_rate, p.weight_decay
  c.eval_every = min(c.eval_every, p.num_train_steps)
  c.checkpoint_every = min(c.checkpoint_every, p.num_train_steps)
  p.is_phase = True
  return c


def pretraining_seed(config, seed: int) -> int:
  """The seed of the pretraining a fine-tuning seed starts from (config.pretraining.seed)."""
  return seed if config.pretraining.seed < 0 else int(config.pretraining.seed)


def pretraining_folder(folder) -> pathlib.Path:
  """The folder of the pretraining that config.pretrained names: `folder` itself when it holds a
  pretraining phase (its config.json has pretraining.is_phase, as results.json's
  pretraining.folder names it), else <folder>/pretraining (a self-pretrained run's folder)."""
  folder = pathlib.Path(folder)
  config_path = folder / run_folder.CONFIG_FILE
  if config_path.is_file():
    saved = json.loads(config_path.read_text())
    if saved.get('pretraining', {}).get('is_phase'):
      return folder
  return run_folder.pretraining_dir(folder)


def finished_pretraining(folder) -> dict | None:
  """The results of the pretraining phase in `folder` (a pretraining's own folder) when it
  finished, else None."""
  path = pathlib.Path(folder) / run_folder.RESULTS_FILE
  config_path = pathlib.Path(folder) / run_folder.CONFIG_FILE
  if not path.is_file() or not config_path.is_file():
    return None
  results = json.loads(path.read_text())
  steps = json.loads(config_path.read_text()).get('num_train_steps')
  return results if results.get('steps') == steps else None


def use_pretraining_of(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """config.pretrained = DIR: config.pretraining becomes the pretraining's own (its objective,
  rate, loss and steps, from DIR's config.json), so that a run fine-tunes from DIR without the
  word spt. ValueError in one line when the word spt or an override asked for another
  objective. A folder without a pretraining is left to validate's error."""
  folder = pretraining_folder(config.pretrained)
  config_path = folder / run_folder.CONFIG_FILE
  if not config_path.is_file():
    return config
  theirs = dict(json.loads(config_path.read_text()).get('pretraining', {}))
  ours = config.pretraining.objective
  if ours and ours != theirs.get('objective'):
    raise ValueError(f'config.pretrained = {config.pretrained!r} holds a '
                     f"{theirs.get('objective')!r} pretraining, but this run asks for {ours!r}; "
                     'drop the word spt and --config.pretraining.objective (a pretrained run '
                     'takes its objective from its pretraining), or pretrain anew without '
                     '--config.pretrained.')
  theirs['is_phase'] = False
  for key, value in theirs.items():
    if key in config.pretraining:
      config.pretraining[key] = value
  return config


def finished_pretraining_config(given) -> dict:
  """The config.json of the finished pretraining that config.pretrained = `given` names (a run
  folder or its pretraining/); ValueError in one line when there is no such folder or it holds
  none."""
  what = ('give the folder of a run trained with the word spt, or its pretraining/ folder')
  if not pathlib.Path(given).is_dir():
    raise ValueError(f'config.pretrained = {str(given)!r} not found (no such folder); {what}.')
  folder = pretraining_folder(given)
  if finished_pretraining(folder) is None:
    raise ValueError(f'config.pretrained = {str(given)!r} holds no finished pretraining (no '
                     f'{folder / run_folder.RESULTS_FILE} of its last step); {what}.')
  return json.loads((folder / run_folder.CONFIG_FILE).read_text())


def encoder_fields(flat: dict) -> list[str]:
  """The fields of a flat config (config_lib.flatten) that build its encoder, which a
  pretraining and the runs fine-tuned from it share: SHARED_FIELDS and config.model outside
  HEAD_FIELDS."""
  return sorted([*SHARED_FIELDS, *(k for k in flat if k.startswith('model.')
                                   and k.split('.')[1] not in HEAD_FIELDS)])


def check_same_encoder(given, theirs: dict, ours: dict, spec: str | None = None) -> None:
  """ValueError in one line unless a pretraining's config (`theirs`, flat: config_lib.flatten of
  its config.json) and the fine-tuning run's (`ours`) build the same encoder (encoder_fields);
  the line names the fields and the option that fine-tunes the pretraining given as
  config.pretrained = `given`: for another task or model `spec`, the --config that builds the
  pretraining's encoder (config_checks.pretraining_spec; without one, its task and model)."""
  differing = [(k, theirs.get(k), ours.get(k)) for k in encoder_fields(ours)
               if theirs.get(k) != ours.get(k)]
  if not differing:
    return
  task_model = [d for d in differing if d[0] in ('task', 'model_name')]
  if task_model:  # another preset: its sizes differ too, the preset says it
    differing = task_model
    fix = 'use ' + (spec or f"--config configs/{theirs['task']}.py:{theirs['model_name']}")
  else:
    fix = 'set ' + ' '.join(f'--config.{key}={value}' for key, value, _ in differing)
  what = ', '.join(f'{key} {there!r} there, {here!r} here' for key, there, here in differing)
  raise ValueError(f'config.pretrained = {str(given)!r} pretrained another encoder ({what}); '
                   f'to fine-tune it {fix}, or give a pretraining of this config.')
