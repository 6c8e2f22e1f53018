"""Task readers: each turns its source files into cached token-id arrays (`base.TaskData`).

Readers are imported only when their task is asked for, so that only the TFDS-backed tasks
(Text, Image) ever import TensorFlow.
"""

import importlib

# task -> (module, loader function)
READERS = {
    'listops': ('lra_luna.datasets.listops', 'load_listops'),
    'text': ('lra_luna.datasets.text', 'load_text'),
    'retrieval': ('lra_luna.datasets.retrieval', 'load_retrieval'),
    'image': ('lra_luna.datasets.image', 'load_image'),
    'pathfinder': ('lra_luna.datasets.pathfinder', 'load_pathfinder'),
    'pathx': ('lra_luna.datasets.pathfinder', 'load_pathfinder'),
}


def load_task(config):
  """The `base.TaskData` of config.task."""
  if config.task not in READERS:
    raise ValueError(f'Unknown task {config.task!r}; valid choices: {sorted(READERS)}.')
  module, function = READERS[config.task]
  return getattr(importlib.import_module(module), function)(config)
