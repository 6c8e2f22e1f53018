"""The task registry (lra_luna/tasks.py) is the one home of the task list: every entry has its
config file and reader, and no other module spells the list again."""

import importlib
import pathlib
import re

import pytest

from lra_luna import config_lib
from lra_luna import tasks

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'lra_luna'


@pytest.mark.parametrize('name', list(tasks.TASKS))
def test_every_task_has_its_config_and_reader(name):
  task = tasks.get(name)
  assert (config_lib.CONFIG_DIR / f'{name}.py').is_file()
  module_name, function = task.reader.split(':')
  module = importlib.import_module(module_name)
  assert callable(getattr(module, function))
  assert module.VOCAB_SIZE > 0 and module.NUM_CLASSES > 1
  assert task.data_sources[0] == 'auto' and config_lib.DATA_SOURCES[name] == task.data_sources


def test_an_unknown_task_is_refused_with_the_choices():
  with pytest.raises(ValueError, match="Unknown task 'listop'; valid choices: listops, text"):
    tasks.get('listop')


def test_no_other_module_lists_the_tasks():
  listing = re.compile(r"""['"]listops['"]\s*,\s*['"]text['"]""")
  offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob('*.py')
               if p.name != 'tasks.py' and listing.search(p.read_text())]
  assert offenders == []
