"""What the runs of a report read and belong to: each task's data (results.json 'data'), and
the facts of the campaign that ran them (campaign.json), stated under every table and figure."""

import json

from lra_luna.report.runs import TASK_NAMES
from lra_luna.training import run_folder

# A folder that lra_luna/campaign ran holds it: every caption, the figure and the CSVs then
# state its protocol, data and steps, and whether it was cut short.
CAMPAIGN_FILE = run_folder.CAMPAIGN_FILE


def describe_data(data: dict | None) -> tuple[tuple, str]:
  """(what identifies the data a run read, its description in words) from results.json 'data'.
  Paths differ between machines, so they describe the data but do not identify it."""
  if not data:
    return ('unrecorded',), 'not recorded (a results.json from before data provenance)'
  source, counts = data['source'], json.dumps(data.get('examples'), sort_keys=True)
  if source == 'generated':
    settings = (data.get('generator') or {}).get('settings', {})
    words = ', '.join(f'{k} {v}' for k, v in sorted(settings.items()))
    return (source, json.dumps(settings, sort_keys=True), counts), f'generated ({words})'
  if source == 'tfds':
    versions = tuple(data.get('versions', ()))
    return (source, data['name'], versions, counts), f'TFDS {data["name"]} {", ".join(versions)}'
  return (source, counts), f'LRA release ({data["path"]})'


def data_sources(results: list[dict]) -> dict:
  """{task: description of the data its runs read}. ValueError when runs of one task read
  different data: their accuracies would share a table without being comparable."""
  by_task = {}
  for r in results:
    identity, words = describe_data(r.get('data'))
    first = by_task.setdefault(r['task'], (identity, words, r['workdir']))
    if first[0] != identity:
      raise ValueError(f"{r['task']} runs read different data: {first[2]} read {first[1]}, "
                       f"{r['workdir']} read {words}. Report them from separate folders.")
  return {task: words for task, (_, words, _) in by_task.items()}


def data_note(sources: dict, task_names) -> str:
  """'Data: ListOps: generated (...); Text: TFDS ...' for the tasks of one table."""
  return 'Data: ' + '; '.join(f'{TASK_NAMES[t]}: {sources[t]}' for t in task_names
                              if t in sources) + '.'


def campaign_note(sweep_dir, sources: dict) -> str:
  """The campaign's facts in one sentence ('' for a folder that no campaign wrote)."""
  path = run_folder.campaign_file(sweep_dir)
  if not path.exists():
    return ''
  facts = json.loads(path.read_text())['facts']
  steps = ', '.join(f'{TASK_NAMES[t]} ' + ' / '.join(str(ours) for ours, _ in pairs)
                    for t, pairs in sorted(facts['steps'].items()))
  data = '; '.join(f'{TASK_NAMES[t]}: {words}' for t, words in sorted(sources.items()))
  short = facts['cut_short']
  return (f"Campaign {facts['name']}, protocol {facts['protocol']}; training steps: {steps}; "
          f'data: {data}. ' + (f'CUT SHORT: {"; ".join(short)}.' if short
                               else 'Full protocol (its steps and seeds).'))
