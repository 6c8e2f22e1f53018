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
# The tasks a spec with cells may name: report keys an LRA task's runs by task, model, head and
# seed, so two cells' runs would collide there; MQAR's rows read each run's config.
CELL_TASKS = ('mqar',)
CELL_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*')  # a folder name on any file system
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
  c.cells = []                      # named override groups, each the grid once more in
  #                                   DIR/<name>/ with overrides, then its own: [{'name': 'L64',
  #                                   'overrides': ['max_length=64', ...]}, ...]; [] = the grid once
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
  check_cells(path, spec)
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


def check_override(spec, item: str) -> None:
  """ValueError saying what is wrong with `item` unless it is KEY=VALUE, its key not one the spec
  sets (seed, model.head), that every task's config accepts (its key and the type of its value)."""
  key = item.split('=', 1)[0]
  if '=' not in item or key in ('seed', 'model.head'):
    raise ValueError('expected KEY=VALUE with a key other than seed and model.head (the spec '
                     'sets those: seeds, heads).')
  for task in spec.tasks:
    config_lib.load_config(config_spec(task, spec.models[0], spec.protocol, spec.variant),
                           [f'--config.{item}'])


def add_overrides(spec, overrides: list[str]) -> None:
  """Appends `--override KEY=VALUE` items to spec.overrides (so campaign.json and the report show
  them), each built into every task's config first: one line naming the item if it fails."""
  for item in overrides:
    try:
      check_override(spec, item)
    except ValueError as e:
      raise CampaignError(f'--override {item!r}: {e}') from None
  spec.overrides = [*spec.overrides, *overrides]


def check_cells(path, spec) -> None:
  """One line naming the spec file and the first bad cell: not a {'name', 'overrides'} dict, a
  name that is empty, repeated or no folder name of its own (CELL_NAME, none the campaign folder
  holds besides), a task other than CELL_TASKS, or an override that check_override refuses."""
  other = [task for task in spec.tasks if task not in CELL_TASKS]
  if spec.cells and other:
    raise CampaignError(f'{path}: cells with task {other[0]!r}: report keys its runs by task, '
                        'model, head and seed, so two cells would collide; cells take '
                        f'{list(CELL_TASKS)} only (run a campaign per cell instead).')
  names, checked = [], set()
  for cell in spec.cells:
    if not (isinstance(cell, dict) and set(cell) == {'name', 'overrides'}
            and isinstance(cell['overrides'], (list, tuple))
            and all(isinstance(item, str) for item in cell['overrides'])):
      raise CampaignError(f"{path}: cell {cell!r}: write each cell as {{'name': ..., "
                          "'overrides': ['key=value', ...]}.")
    name = cell['name']
    folder_name = isinstance(name, str) and CELL_NAME.fullmatch(name)
    if not folder_name or name in run_folder.CAMPAIGN_NAMES:
      raise CampaignError(f'{path}: cell {name!r}: name each cell with letters, digits, ".", "_" '
                          f'and "-" (its folder), none of {list(run_folder.CAMPAIGN_NAMES)}.')
    if name in names:
      raise CampaignError(f'{path}: cell {name!r} is named twice; give each cell its own name.')
    names.append(name)
    for item in cell['overrides']:
      if item in checked:  # the same item in another cell: built once
        continue
      try:
        check_override(spec, item)
      except ValueError as e:
        raise CampaignError(f'{path}: cell {name!r}: override {item!r}: {e}') from None
      checked.add(item)


def saved_spec(saved: dict) -> dict:
  """campaign.json's spec with the fields added since it was written at their base_spec defaults
  (a spec without cells is the grid once, as before cells existed)."""
  return config_lib.with_defaults(base_spec().to_dict(), saved)


def check_spec_matches(campaign_dir: pathlib.Path, spec, force: bool) -> None:
  """Refuses a folder whose campaign.json holds another spec, naming the differing fields."""
  path = run_folder.campaign_file(campaign_dir)
  if not path.exists() or force:
    return
  saved = config_lib.flatten(saved_spec(json.loads(path.read_text())['spec']))
  wanted = config_lib.flatten(json.loads(spec.to_json()))
  differing = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
  if differing:
    raise CampaignError(f'{campaign_dir} holds a campaign of another spec (fields {differing} '
                        'differ); use another --dir, or --force to adopt this spec (runs whose '
                        'config changed then start anew).')
