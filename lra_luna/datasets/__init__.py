"""Task data: readers that turn source files into cached token-id arrays (`base.TaskData`), the
synthetic-task generators, and the grain input pipeline.

Readers are imported only when their task is asked for, so that only the TFDS-backed tasks
(Text, Image) ever import TensorFlow.
"""

import importlib

from lra_luna import tasks
from lra_luna.datasets import base

# task -> (module, loader function), from the task registry.
READERS = {name: tuple(task.reader.split(':')) for name, task in tasks.TASKS.items()}


def reader_module(task: str):
  """The module of task's reader (imported on first use)."""
  if task not in READERS:
    raise ValueError(f'Unknown task {task!r}; valid choices: {sorted(READERS)}.')
  return importlib.import_module(READERS[task][0])


# Tasks whose every example fills its row: no padding, and id 0 is a real token (a black pixel).
FULL_LENGTH_TASKS = tuple(name for name, task in tasks.TASKS.items() if task.full_length)


def load_task(config):
  """The `base.TaskData` of config.task, with an end-of-sequence token when config.append_eos."""
  data = getattr(reader_module(config.task), READERS[config.task][1])(config)
  if config.get('append_eos', False):
    data = base.with_eos(data, config.max_length, config.task in FULL_LENGTH_TASKS)
  return data


def task_sizes(task: str, append_eos: bool = False) -> tuple[int, int]:
  """(vocab_size, num_classes) of a task, from its reader's constants: no data is read.
  append_eos: the vocabulary holds the end-of-sequence token too (base.with_eos)."""
  module = reader_module(task)
  return module.VOCAB_SIZE + int(append_eos), module.NUM_CLASSES
