"""A campaign spec: its fields and defaults, loading a spec file, and its checks (one line each).

A spec file (campaigns/*.py) has `get_config()` returning `base_spec()` filled in.
"""

import difflib
import importlib.util
import json
import pathlib
import re

import ml_collections

from lra_luna import config_lib
from lra_luna import protocols
from lra_luna import registry
from lra_luna.models import model_config
from lra_luna.training import run_folder
import lra_luna

# Config words of every run; 'spt': self-pretrained (spt.py). A model named `<model>+spt` in
# spec.models adds the word spt to its own runs only (campaigns/mid.py: scratch beside SPT).
VARIANTS = ('', 'quick', 'mid', 'mid,long', 'spt', 'quick,spt', 'mid,spt', 'mid,long,spt',
            'bidirectional', 'quick,bidirectional')  # MQAR's bidirectional setting (mqar.py)
PROTOCOL_SEEDS = 5  # seeds per row in the papers' tables
# Ready specs: campaigns/ of the checkout (a wheel ships none).
SPEC_DIR = lra_luna.CHECKOUT / 'campaigns' if lra_luna.CHECKOUT else None


class CampaignError(ValueError):
  """Bad input: one line for the user."""


def base_spec() -> ml_collections.ConfigDict:
  """Every field of a campaign spec, with its default; locked, so a misspelt field is an error."""
  c = ml_collections.ConfigDict()
  c.name = ''                       # a label for captions
  c.tasks = []                      # config_lib.TASKS
  c.models = []                     # config_lib.MODELS
  # 'cls' | 'mean' | 'mean_p' ('mean_p' runs for Luna models only); [] = each config's own head.
  c.heads = ['cls']
  c.seeds = [0, 1, 2, 3, 4]         # training seeds, vmapped within a group
  c.protocol = 'lra'                # protocols.PROTOCOLS: 'lra' | 'paper' (the authors')
  c.variant = ''                    # '' the full configs | 'quick' the 2-core CPU variants |
  #                                   'mid' long inputs on a CPU (docs/mid.md), 'mid,long'
  #                                   trained 16 times as long; 'spt' /
  #                                   'quick,spt' / 'mid,spt' the same, self-pretrained first;
  #                                   'bidirectional' / 'quick,bidirectional' MQAR's
  #                                   bidirectional setting (causal without it)
  c.overrides = []                  # 'key=value' config fields for every run, as sweep --override
  p = c.profile = ml_collections.ConfigDict()  # Table 2: lra_luna/profile.py's flags
  p.enabled = True                  # run the profiler once every group has finished
  p.config = 'configs/text.py'      # task config (and ':arg') of the profiled model
  p.models = []                     # [] = the campaign's models
  p.lengths = [1024, 2048, 3072, 4096]
  p.batch_size = 32
  p.repeats = 10                    # timed steps (median reported)
  p.warmup = 2                      # untimed steps after compiling
  c.lock()
  return c


def ready_specs() -> str:
  if SPEC_DIR is None:
    return ('an installed lra_luna ships no specs: write one as those of the source '
            "checkout's campaigns/ folder")
  return 'the ready ones are ' + ', '.join(f'campaigns/{p.name}'
                                           for p in sorted(SPEC_DIR.glob('*.py')))


def run_spec_file(path: pathlib.Path) -> ml_collections.ConfigDict:
  """The spec file's get_config(); a misspelt field is named with the nearest one."""
  module_spec = importlib.util.spec_from_file_location(f'campaign_spec_{path.stem}', path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
    return module.get_config()
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    misspelt = re.search(r'Key "([^"]+)" does not exist', str(e))
    if misspelt:  # The locked spec's message lists the whole spec: name the field instead.
      close = difflib.get_close_matches(misspelt.group(1), config_lib.key_paths(base_spec()))
      hint = f' Did you mean {close[0]!r}?' if close else ''
      raise CampaignError(f'{path}: {misspelt.group(1)!r} is no spec field.{hint} The fields '
                          'are those of lra_luna.campaign.base_spec.') from None
    raise CampaignError(f'{path}: {type(e).__name__}: {e}') from None


def load_spec(path) -> ml_collections.ConfigDict:
  """The ConfigDict of a spec file's get_config(), checked field by field."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise CampaignError(f'campaign spec {path} not found; {ready_specs()}.')
  spec = run_spec_file(path)
  for field, values, choices in (('tasks', spec.tasks, config_lib.TASKS),
                                 ('models', spec.models, model_names()),
                                 ('heads', spec.heads, model_config.HEADS),
                                 ('protocol', [spec.protocol], protocols.PROTOCOLS),
                                 ('variant', [spec.variant], VARIANTS),
                                 ('profile.models', spec.profile.models, config_lib.MODELS)):
    unknown = [v for v in values if v not in choices]
    if unknown:
      raise CampaignError(f'{path}: {field} {unknown[0]!r} is unknown; valid choices: '
                          f'{list(choices)}.')
  if not (spec.tasks and spec.models and spec.seeds):
    raise CampaignError(f'{path}: tasks, models and seeds must each name at least one.')
  return spec


def model_names() -> list[str]:
  """What spec.models may name: registry.run_model_names(), each also as `<name>+spt`."""
  names = registry.run_model_names()
  return [*names, *(name + registry.SPT_SUFFIX for name in names)]


def config_spec(task: str, model: str, protocol: str, variant: str = '') -> str:
  """run_lra's --config of one task and model (`<model>+rotary`: with the word rotary;
  `<model>+spt`: with the word spt): the variant and the protocol as config words."""
  spt = model.endswith(registry.SPT_SUFFIX) and 'spt' not in variant.split(',')
  rotary = model.removesuffix(registry.SPT_SUFFIX).endswith(registry.ROTARY_SUFFIX)
  words = ([registry.base_name(model)] + (['rotary'] if rotary else [])
           + ([variant] if variant else []) + (['spt'] if spt else [])
           + (['paper'] if protocol == 'paper' else []))
  return f'{config_lib.CONFIG_DIR / task}.py:{",".join(words)}'


def add_overrides(spec, overrides: list[str]) -> None:
  """Appends `--override KEY=VALUE` items to spec.overrides (so campaign.json and the report show
  them), each built into every task's config first: one line naming the item if it fails."""
  for item in overrides:
    key = item.split('=', 1)[0]
    if '=' not in item or key in ('seed', 'model.head'):
      raise CampaignError(f'--override {item!r}: expected KEY=VALUE with a key other than seed '
                          'and model.head (the spec sets those: seeds, heads).')
    for task in spec.tasks:  # Its key and the type of its value, in every task's config.
      try:
        config_lib.load_config(config_spec(task, spec.models[0], spec.protocol, spec.variant),
                               [f'--config.{item}'])
      except ValueError as e:
        raise CampaignError(f'--override {item!r}: {e}') from None
  spec.overrides = [*spec.overrides, *overrides]


def check_spec_matches(campaign_dir: pathlib.Path, spec, force: bool) -> None:
  """Refuses a folder whose campaign.json holds another spec, naming the differing fields."""
  path = run_folder.campaign_file(campaign_dir)
  if not path.exists() or force:
    return
  saved = config_lib.flatten(json.loads(path.read_text())['spec'])
  wanted = config_lib.flatten(json.loads(spec.to_json()))
  differing = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
  if differing:
    raise CampaignError(f'{campaign_dir} holds a campaign of another spec (fields {differing} '
                        'differ); use another --dir, or --force to adopt this spec (runs whose '
                        'config changed then start anew).')
