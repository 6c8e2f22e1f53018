"""Task data: readers that turn source files into cached token-id arrays (`base.TaskData`), the
synthetic-task generators, and the grain input pipeline.

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


def reader_module(task: str):
  """The module of task's reader (imported on first use)."""
  if task not in READERS:
    raise ValueError(f'Unknown task {task!r}; valid choices: {sorted(READERS)}.')
  return importlib.import_module(READERS[task][0])


def load_task(config):
  """The `base.TaskData` of config.task."""
  return getattr(reader_module(config.task), READERS[config.task][1])(config)


def task_sizes(task: str) -> tuple[int, int]:
  """(vocab_size, num_classes) of a task, from its reader's constants: no data is read."""
  module = reader_module(task)
  return module.VOCAB_SIZE, module.NUM_CLASSES
