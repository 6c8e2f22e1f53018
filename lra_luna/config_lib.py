"""Default config, model presets, config words and config checks shared by every task config:
the one module the task configs and the tools import for them.

A task config (`configs/<task>.py`) reads its words with `parse_arg(arg)`, calls `base_config()`,
sets what is its own, then `set_model(config, arg.model)`. `validate(config)` is run before
training and names the bad field and its valid choices. `load_config(spec, overrides)` builds
the config of `--config=configs/<task>.py:<words>` and `--config.<key>=<value>` flags once,
with one-line errors. `run_record(config)` is what results.json says of how a run trained
against its preset.

Modules: config_base.py (the default config, the words and their settings), config_loading.py
(building a config from a spec and flags; presets), config_checks.py (validate); their public
names are imported here, so `config_lib.<name>` is the one way to reach each.
"""

import ml_collections

# pylint: disable=unused-import
from lra_luna.config_base import (BOOKKEEPING_FIELDS, CONFIG_DIR, DATA_SOURCES, LONG_FACTOR,
                                  MATMUL_PRECISIONS, MODELS, REPORTING_FIELDS, SAME_UPDATE_FIELDS,
                                  SCHEDULES, SMOKE_BATCH_SIZE, SMOKE_EVAL_BATCHES, SMOKE_STEPS,
                                  SPT_SUFFIX, TASKS, WORD_HELP, WORDS, base_config,
                                  config_differences, config_help, flatten, model_label,
                                  parse_arg, pretraining_config, saved_config, set_model,
                                  use_long_settings, use_smoke_settings,
                                  use_uncalibrated_mid_settings, with_defaults)
from lra_luna.config_checks import (POSITIVE_FIELDS, check_accumulation, check_attention,
                                    check_attention_options, check_choice, check_pretrained,
                                    pretraining_spec, validate)
from lra_luna.config_loading import (SHORTENING_WORDS, check_override_keys, config_spec_path,
                                     full_preset, key_paths, load_config, override_keys,
                                     preset_config, preset_word, shared_words,
                                     split_config_flags)
# pylint: enable=unused-import

# ----------------------------------------------------------------------------------------------
# The run record: what results.json says of how a run trained against its preset, so that
# report and campaign read it instead of guessing.
# ----------------------------------------------------------------------------------------------
# Fields never listed as overrides of a preset: they do not change how a run trains (where it
# runs, which seed, its progress output), or have their own column (the sweep's head).
NOT_OVERRIDE_FIELDS = (*BOOKKEEPING_FIELDS, 'seed', 'data_dir', 'progress_bar', 'model.head')


def full_run_steps(config: ml_collections.ConfigDict) -> int | None:
  """num_train_steps of the full run of config's task, model and protocol (its preset without
  quick or smoke, without overrides); None when that preset cannot be built."""
  full = preset_config(full_preset(config))
  return None if full is None else full.num_train_steps


def full_pretraining_steps(config: ml_collections.ConfigDict) -> int | None:
  """The pretraining steps of the full run of a self-pretrained config: its full preset's
  (config.pretraining.num_train_steps), or, for a preset without the word spt, what that word
  sets (the full run's own steps). None for a run without pretraining, a pretraining phase, or
  a preset that cannot be built."""
  pretraining = config.get('pretraining', {})
  if not pretraining.get('objective') or pretraining.get('is_phase'):
    return None
  full = preset_config(full_preset(config))
  if full is None:
    return None
  return (full.pretraining.num_train_steps if full.pretraining.objective
          else full.num_train_steps)


def shortened_reasons(config, full_steps=None, full_pretraining=None) -> list[str]:
  """Why a run is shorter than the full run of its protocol; [] for a full run. THE one test of
  "shortened" (report's tables, campaign's facts, the run's first line): the quick or mid word, a
  smoke test, fewer steps than `full_steps` (None: looked up with full_run_steps()), fewer
  pretraining steps than `full_pretraining` (None: full_pretraining_steps()), a capped
  evaluation."""
  if full_steps is None:
    full_steps = full_run_steps(config)
  if full_pretraining is None:
    full_pretraining = full_pretraining_steps(config)
  reasons = []
  if preset_word(config.get('preset', ''), 'quick'):
    reasons.append('quick config')
  if preset_word(config.get('preset', ''), 'mid'):
    reasons.append('mid config')
  if config.get('smoke'):
    reasons.append('smoke test')
  if full_steps and config.num_train_steps < full_steps:
    reasons.append(f'{config.num_train_steps} of {full_steps} steps')
  pretraining_steps = config.get('pretraining', {}).get('num_train_steps', 0)
  if full_pretraining and pretraining_steps < full_pretraining:
    reasons.append(f'{pretraining_steps} of {full_pretraining} pretraining steps')
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
