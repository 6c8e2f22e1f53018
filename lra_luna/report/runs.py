"""The runs of a sweep folder: their results.json files, the test accuracy of each, its mean and
sample std over seeds, and how each run trained (results.json 'run', config_lib.run_record)."""

import dataclasses
import json
import pathlib
import statistics

from lra_luna import config_lib
from lra_luna import registry
from lra_luna import tasks
from lra_luna.models.model_config import HEADS
from lra_luna.report import recall_setting
from lra_luna.training import run_folder

TASK_NAMES = {name: task.title for name, task in tasks.TASKS.items()}
CHECKPOINTS = {'best': 'best checkpoint (highest validation accuracy)',
               'last': 'last checkpoint (end of training)'}
MISSING = '—'
AVG, AVG_NO_RETRIEVAL = 'avg', 'avg_no_retrieval'
RESULT_KEYS = ('task', 'model', 'head', 'seed')


def load_results(sweep_dir, size: str | None = None) -> list[dict]:
  """Every results.json under sweep_dir (only those of `size`, run_size, where given), each
  with its folder as 'workdir'. Two of the same task/model/head/seed (and setting_key) are an
  error."""
  if not pathlib.Path(sweep_dir).is_dir():
    raise FileNotFoundError(f'{sweep_dir} is not a folder; give the --sweep_dir of a sweep (or '
                            'any folder holding run folders with results.json).')
  found, seen, sizes = [], {}, set()
  for path in run_folder.result_files(sweep_dir):
    try:
      result = json.loads(path.read_text())
    except ValueError as e:
      raise ValueError(f'{path}: not valid JSON ({e}); rerun that run, or remove it.') from None
    missing = [key for key in RESULT_KEYS if key not in result]
    if missing:
      raise ValueError(f'{path}: no {", ".join(missing)} field; not a results.json of '
                       'run_lra.py. Move it out of the sweep folder.')
    sizes.add(run_size(result))
    if size and run_size(result) != size:
      continue
    result = {**result, 'model': regime_label(result), 'workdir': path.parent}
    key = tuple(result[k] for k in RESULT_KEYS) + setting_key(result)
    if key in seen:
      # Averaging a run twice would weigh it double; the user must say which one counts.
      sizes = sorted({run_size(result), run_size(json.loads(seen[key].read_text()))})
      choose = (f' They are of sizes {" and ".join(sizes)}: choose one with --size.'
                if len(sizes) > 1 else '')
      raise ValueError(f'Two results for task/model/head/seed {key}: {seen[key]} and {path}.'
                       + choose)
    seen[key] = path
    found.append(result)
  if sizes and not found:
    raise ValueError(f'{sweep_dir} holds no finished run of size {size!r}; its sizes: '
                     f'{", ".join(sorted(sizes))} (--size).')
  return found


def setting_key(result: dict) -> tuple:
  """What else than task/model/head/seed tells two runs apart: an MQAR run's setting (L, N, D,
  P, learning rate, causal: report/recall.py), so that sweeps of several settings share a
  folder; () for any other run."""
  if result['task'] != recall_setting.TASK:
    return ()
  return (recall_setting.setting_of(result).words(),)


UNRECORDED = 'unrecorded'  # the size of a run whose results.json has no run record (its preset)


def run_size(result: dict) -> str:
  """The size words of a run's preset ('listops.py:s5,mid,long,spt' -> 'mid,long'), 'full' for
  a preset without any, UNRECORDED for a results.json without its run record."""
  preset = (result.get('run') or {}).get('preset')
  if preset is None:
    return UNRECORDED
  words = preset.partition(':')[2].split(',')
  return ','.join(w for w in words if w in config_lib.SHORTENING_WORDS) or 'full'


def regime_label(result: dict) -> str:
  """A run's model label with config_lib.SPT_SUFFIX when it was self-pretrained (its results.json
  has a `pretraining` section), however old the label."""
  model = result['model']
  if 'pretraining' in result and not model.endswith(config_lib.SPT_SUFFIX):
    return model + config_lib.SPT_SUFFIX
  return model


def accuracy_of(result: dict, checkpoint: str) -> float:
  """Test accuracy (percent) of the chosen checkpoint of one run."""
  if checkpoint not in result:
    raise ValueError(f"{result['workdir']} has no '{checkpoint}' section in its results.json.")
  return 100.0 * result[checkpoint]['test_accuracy']


@dataclasses.dataclass(frozen=True)
class Cell:
  """A test accuracy (percent): a mean over n seeds and their sample std (None for one seed, a
  published number or an average over tasks); a difference of two means carries its 95%
  interval (low, high) instead (welch_difference)."""
  mean: float
  std: float | None = None
  n: int | None = None
  interval: tuple | None = None


def seed_statistics(accuracies: list[float]) -> Cell:
  """Mean and sample std (ddof=1; None for one seed) over seeds, with their number."""
  std = statistics.stdev(accuracies) if len(accuracies) > 1 else None
  return Cell(statistics.fmean(accuracies), std, len(accuracies))


def summarize(results: list[dict], checkpoint: str) -> dict:
  """{(model, head): {task: Cell}} over seeds."""
  grouped = {}
  for r in results:
    grouped.setdefault((r['model'], r['head']), {}).setdefault(r['task'], []).append(
        accuracy_of(r, checkpoint))
  return {key: {task: seed_statistics(accs) for task, accs in by_task.items()}
          for key, by_task in grouped.items()}


def welch_difference(first: Cell, second: Cell) -> Cell:
  """second - first, the difference of two seed means, with its 95% confidence interval by
  Welch's t (unequal variances): d +- t_{0.975, nu} sqrt(s1^2/n1 + s2^2/n2), nu the
  Welch-Satterthwaite degrees of freedom; no interval unless both have two seeds or more."""
  difference = second.mean - first.mean
  if not (first.n and second.n and first.n > 1 and second.n > 1):
    return Cell(difference)
  from scipy import stats  # pylint: disable=import-outside-toplevel  (the report alone needs it)
  a, b = first.std ** 2 / first.n, second.std ** 2 / second.n
  if a + b == 0:
    return Cell(difference, interval=(difference, difference))
  nu = (a + b) ** 2 / (a ** 2 / (first.n - 1) + b ** 2 / (second.n - 1))
  half = stats.t.ppf(0.975, nu) * (a + b) ** 0.5
  return Cell(difference, interval=(difference - half, difference + half))


def pretraining_summary(results: list[dict]) -> dict:
  """{(model, head): {task: (token accuracy, most-frequent-token accuracy)}} of the
  self-pretrained runs (results.json 'pretraining'), each a Cell in percent over their distinct
  pretrainings (seeds that share one count once); the second None where not recorded."""
  grouped = {}
  for r in results:
    section = r.get('pretraining') or {}
    if section.get('accuracy') is None:
      continue
    by_folder = grouped.setdefault((r['model'], r['head']), {}).setdefault(r['task'], {})
    by_folder[section.get('folder') or str(r['workdir'])] = section
  summary = {}
  for key, by_task in grouped.items():
    for task, sections in by_task.items():
      token = [100 * s['accuracy'] for s in sections.values()]
      majority = [100 * s['majority_accuracy'] for s in sections.values()
                  if s.get('majority_accuracy') is not None]
      summary.setdefault(key, {})[task] = (seed_statistics(token),
                                           seed_statistics(majority) if majority else None)
  return summary


def average(cells: dict, task_names) -> Cell | None:
  """Mean of the task means; None unless every task is there."""
  if any(cells.get(t) is None for t in task_names):
    return None
  return Cell(statistics.fmean(cells[t].mean for t in task_names))


def row_order(key):
  """Models in config_lib.MODELS order (each with its own positions, then `+rotary`, each from
  scratch, then self-pretrained), then heads in HEADS order."""
  model, head = key
  base = registry.base_name(model)
  models = list(config_lib.MODELS)
  return (models.index(base) if base in models else len(models), base, model,
          HEADS.index(head) if head in HEADS else len(HEADS), head)


# ----------------------------------------------------------------------------------------------
# How each run trained: results.json 'run' (config_lib.run_record), written at train time. A
# results.json without it is "not recorded", never guessed.
# ----------------------------------------------------------------------------------------------
def task_order(task: str) -> int:
  """Tasks in the order of the task registry (the tables' columns)."""
  return list(TASK_NAMES).index(task) if task in TASK_NAMES else len(TASK_NAMES)


def run_records(results: list[dict], task_names) -> dict:
  """{(model, head): [(task, its results.json 'run' or None), ...]} of the runs on task_names,
  in task order."""
  records = {}
  for r in sorted(results, key=lambda r: task_order(r['task'])):
    if r['task'] in task_names:
      records.setdefault((r['model'], r['head']), []).append((r['task'], r.get('run')))
  return records


def describe_run(run: dict | None) -> str:
  """'1500 steps (lra); SHORTENED: quick config, 1500 of 5000 steps; overrides: a=1 b=2', or
  'not recorded' for a results.json without its run record."""
  if not run:
    return 'not recorded'
  text = f"{run['steps']} steps ({run['protocol']})"
  if run.get('pretraining'):  # self-pretrained (spt.py)
    text = f"{run['pretraining']['steps']} {run['pretraining']['objective']} pretraining + " + text
  if run['shortened']:
    text += '; SHORTENED: ' + ', '.join(run['shortened'])
  if run.get('overrides'):
    text += '; overrides: ' + ' '.join(run['overrides'])
  return text


def describe_training(records: list[tuple]) -> str:
  """How a group of runs [(task, run record)] trained: one phrase if all trained alike, else
  each distinct phrase after the tasks it covers ('ListOps: ...; Pathfinder: ...')."""
  by_phrase = {}
  for task, run in sorted(records, key=lambda record: task_order(record[0])):
    by_phrase.setdefault(describe_run(run), []).append(TASK_NAMES.get(task, task))
  if len(by_phrase) == 1:
    return next(iter(by_phrase))
  return '; '.join(f'{", ".join(dict.fromkeys(names))}: {phrase}'
                   for phrase, names in by_phrase.items())


def is_shortened(run: dict | None) -> bool:
  return bool(run and run['shortened'])
