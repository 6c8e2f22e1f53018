"""The pretraining phase of a self-pretrained run (spt.py; Amos et al. 2024 §3): which pretraining
each seed fine-tunes, which of them are still to train, and the phase's data (the training
split's inputs only). The loop (train.py) trains the phase as any run, in
<workdir>/pretraining/ (spt.phase_config).
"""

import dataclasses

import jax

from lra_luna import config_lib
from lra_luna import console
from lra_luna import spt
from lra_luna.training import results as results_lib
from lra_luna.training import run_folder


def assign(config, runs, overwrite: bool) -> dict:
  """Sets each run's pretrained_from, the folder of the pretraining it fine-tunes:
  config.pretrained's, else the finished one of its pretraining seed's sweep folder beside it
  (sibling_pretraining), else the pretraining/ of the first run of its pretraining seed. Returns
  {pretraining seed: run folder} of the pretrainings not finished yet, which the loop trains (on
  the training inputs). A run given config.pretrained says which pretraining it loads."""
  is_writer = jax.process_index() == 0
  if config.pretrained:
    folder = spt.pretraining_folder(config.pretrained)
    if is_writer:
      console.say(f'fine-tuning from the pretraining in {folder}: '
                  f'{results_lib.describe_pretraining(spt.finished_pretraining(folder) or {})}.')
    for run in runs:
      run.pretrained_from = folder
    return {}
  if overwrite and is_writer:  # Cleared once, before the pretraining is written.
    for run in runs:
      run_folder.start_workdir(run.config, run.workdir, overwrite=True)
  owners = {}  # pretraining seed -> the run folder that holds it
  for run in runs:
    seed = spt.pretraining_seed(config, run.seed)
    if seed not in owners:
      owners[seed] = sibling_pretraining(config, run, seed) or run.workdir
    run.pretrained_from = run_folder.pretraining_dir(owners[seed])
  todo = {seed: folder for seed, folder in owners.items()
          if spt.finished_pretraining(run_folder.pretraining_dir(folder)) is None}
  for seed, folder in owners.items():
    if seed not in todo and is_writer:
      console.say(f'pretraining finished in {run_folder.pretraining_dir(folder)}; fine-tuning.')
  return todo


def sibling_pretraining(config, run, seed: int):
  """The sweep folder of seed `seed` in run's group (run_folder.sibling_seed_dir) when it holds
  a finished pretraining of the same phase config, which `run` then fine-tunes instead of
  pretraining the same seed again: a sequential sweep's seeds run one process each, and so
  pretrain once as a vmapped group does. None when `run` has started a pretraining of its own
  (it keeps it), or the sibling's is unfinished or of another config."""
  folder = run_folder.sibling_seed_dir(run.workdir, run.seed, seed)
  if (folder is None or folder == run.workdir
      or run_folder.pretraining_dir(run.workdir).exists()):
    return None
  try:
    saved = spt.finished_pretraining_config(folder)
  except ValueError:  # none there, or not finished
    return None
  ours = spt.phase_config(config)
  ours.seed = seed
  if config_lib.config_differences(saved, ours):
    return None
  if jax.process_index() == 0:
    console.say(f'fine-tuning from the pretraining of seed {seed} in '
                f'{run_folder.pretraining_dir(folder)} (finished; the same config).')
  return folder


def training_inputs_only(data):
  """The pretraining phase's data: the training split (its inputs; the targets are never read)
  and, for the phase's validation, as many of its first examples as the validation split
  holds. No validation or test input is read."""
  train = data.splits['train']
  count = min(len(next(iter(train.values()))),
              len(next(iter(data.splits['validation'].values()))))
  held_in = {name: array[:count] for name, array in train.items()}
  return dataclasses.replace(data, splits={'train': train, 'validation': held_in})

