"""The task registry: every fact about an LRA task that more than one tool needs, in one entry.

Adding a task is one `Task` here, its config file `configs/<name>.py` and its reader (a module
of lra_luna/datasets with a load function, VOCAB_SIZE and NUM_CLASSES). No JAX here: configs,
report and campaign read it without starting JAX.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Task:
  name: str                 # the config's `task` and configs/<name>.py
  title: str                # its column header in the tables
  reader: str               # 'module:function' that loads its data (lra_luna/datasets)
  data_sources: tuple       # allowed config.data_source values; the first is the default
  full_length: bool = False  # every example fills its row: no padding, id 0 is a real token
  in_table1: bool = True    # one of the five tasks of the papers' tables and averages
  in_table3: bool = False   # one of the three tasks of Luna's [CLS] vs mean-pooled P table


TASKS = {t.name: t for t in (
    Task('listops', 'ListOps', 'lra_luna.datasets.listops:load_listops',
         ('auto', 'release', 'generated'), in_table3=True),
    Task('text', 'Text', 'lra_luna.datasets.text:load_text', ('auto', 'tfds'), in_table3=True),
    Task('retrieval', 'Retrieval', 'lra_luna.datasets.retrieval:load_retrieval',
         ('auto', 'release'), in_table3=True),
    Task('image', 'Image', 'lra_luna.datasets.image:load_image', ('auto', 'tfds'),
         full_length=True),
    Task('pathfinder', 'Pathfinder', 'lra_luna.datasets.pathfinder:load_pathfinder',
         ('auto', 'release', 'generated'), full_length=True),
    # Path-X: every model of the papers failed it (chance level), so it is in no average.
    Task('pathx', 'Path-X', 'lra_luna.datasets.pathfinder:load_pathfinder',
         ('auto', 'release', 'generated'), full_length=True, in_table1=False),
    # Recall beside LRA (Zoology's MQAR, lra_luna/datasets/mqar.py): a token at each query.
    Task('mqar', 'MQAR', 'lra_luna.datasets.mqar:load_mqar', ('auto', 'generated'),
         in_table1=False),
)}


def get(name: str) -> Task:
  """The entry of a task; ValueError naming the tasks for an unknown one."""
  if name not in TASKS:
    raise ValueError(f'Unknown task {name!r}; valid choices: {", ".join(TASKS)}.')
  return TASKS[name]


def title(name: str) -> str:
  return TASKS[name].title if name in TASKS else name


TABLE1_TASKS = tuple(t.name for t in TASKS.values() if t.in_table1)
TABLE3_TASKS = tuple(t.name for t in TASKS.values() if t.in_table3)
