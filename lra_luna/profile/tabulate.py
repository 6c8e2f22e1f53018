"""Table 2 from the sweep's points: speed and memory relative to the vanilla Transformer, the
paper's rows beside ours, the fitted slopes and every point; written through lra_luna/tables.py
(table2.md, table2.tex). Also the one-line progress report of a point. No JAX here.
"""

from lra_luna import registry
from lra_luna import tables
from lra_luna.profile import slopes as slopes_lib

BASELINE = 'transformer'
PAPER_LENGTHS = (1024, 2048, 3072, 4096)
# A spread of step times over the repeats ((max - min) / median) above this gets a warning.
SPREAD_WARNING = 0.10

MEMORY_LABELS = {'device_peak_bytes': "device peak_bytes_in_use during the steps",
                 'estimated_bytes': 'XLA compiled-memory estimate'}
STATUS_WORDS = {'oom': 'OOM', 'skipped': 'skipped', 'crash': 'crashed'}


# ----------------------------------------------------------------------------------------------
# Cells.
# ----------------------------------------------------------------------------------------------
def length_label(length: int) -> str:
  return f'{length // 1024}K' if length % 1024 == 0 else str(length)


def mib(num_bytes) -> str:
  return '-' if num_bytes is None else f'{num_bytes / 2**20:.1f}'


def rate(steps_per_s) -> str:
  return 'not timed' if steps_per_s is None else f'{steps_per_s:.3g}'


def format_cell(cell) -> str:
  """A ratio with 2 decimals; words ('OOM', the paper's printed numbers) as they are; None '-'."""
  if cell is None:
    return '-'
  return cell if isinstance(cell, str) else f'{cell:.2f}'


def memory_key(points) -> str:
  """The memory the tables compare: the device's peak where every point has it, else XLA's."""
  measured = [p for p in points if p['status'] == 'ok']
  if measured and all(p.get('device_peak_bytes') for p in measured):
    return 'device_peak_bytes'
  return 'estimated_bytes'


def relative_cell(index: dict, model_name: str, length: int, key: str):
  """point[key] / Transformer's point[key] at that length; 'OOM', 'skipped' (for host memory),
  'crashed', '... baseline' or None. A skipped point keeps its memory estimate, so memory still
  divides."""
  point, base = index.get((model_name, length)), index.get((BASELINE, length))
  if point is None or base is None:
    return None
  if (point['status'] != 'ok' or base['status'] != 'ok') and not (point.get(key)
                                                                   and base.get(key)):
    return (STATUS_WORDS[point['status']] if point['status'] != 'ok'
            else f'{STATUS_WORDS[base["status"]]} baseline')
  if not point.get(key) or not base.get(key):
    return None
  return point[key] / base[key]


def relative_rows(results: dict) -> list[tuple[str, list]]:
  """(label, cells) per row: ours (speed then memory over every length), each with the paper's
  row below it where the paper has one. Our cells are floats, 'OOM...' or None; the paper's are
  its printed strings."""
  points, lengths = results['points'], results['lengths']
  index = {(p['model'], p['length']): p for p in points}
  memory = memory_key(points)
  rows = []
  for name in sorted(results['models'], key=lambda name: name != BASELINE):
    cells = ([relative_cell(index, name, n, 'steps_per_s') for n in lengths]
             + [relative_cell(index, name, n, memory) for n in lengths])
    rows.append((registry.label(name), cells))
    paper_row = registry.table2_rows().get(name)
    if paper_row and set(lengths) & set(PAPER_LENGTHS):
      # The Luna paper's Table 2 (byte-level Text, relative to the Transformer), as printed.
      speed, peak = (dict(zip(PAPER_LENGTHS, values)) for values in paper_row)
      rows.append((f'{registry.label(name)} (paper)',
                   [speed.get(n) for n in lengths] + [peak.get(n) for n in lengths]))
  return rows


# ----------------------------------------------------------------------------------------------
# Progress lines.
# ----------------------------------------------------------------------------------------------
def spread_words(point: dict) -> str:
  """' (min-max over N repeats, spread S%)' in steps/s, or '' where there is none."""
  if point.get('step_s_min') is None:
    return ''
  return (f' (median; {rate(1 / point["step_s_max"])}-{rate(1 / point["step_s_min"])} over '
          f'{len(point["step_times_s"])} repeats, spread {point["spread"]:.0%})')


def device_peak_words(point: dict) -> str:
  """The device's own peak of a point in words: its MiB, or why there is none (a CPU keeps no
  memory counters; on a GPU the compile's peak may hide the steps')."""
  peak = point.get('device_peak_bytes')
  if peak is not None:
    return f'device peak {mib(peak)} MiB'
  if point.get('device_peak_hidden'):
    return (f'device peak not above the compile\'s '
            f'({mib(point.get("device_peak_after_compile_bytes"))} MiB)')
  return 'no device peak (this device keeps no memory counters; the estimate is XLA\'s)'


def describe(point: dict) -> str:
  """One progress line."""
  name = f'{point["model"]} @ {point["length"]}'
  if point['status'] in ('oom', 'crash'):
    return f'{name}: {STATUS_WORDS[point["status"]]}, {point["error"].splitlines()[0][:300]}'
  if point['status'] == 'skipped':
    return f'{name}: skipped, {point["reason"]}'
  compile_s = point.get('compile_s')  # None with --flops_only: not compiled
  line = (f'{name}: {rate(point["steps_per_s"])} steps/s{spread_words(point)} ('
          + ('not compiled' if compile_s is None else f'compile {compile_s:.1f} s') + '), '
          f'memory estimate {mib(point["estimated_bytes"])} MiB, '
          f'{device_peak_words(point)}, '
          f'{(point["flops_per_step"] or 0) / 1e9:.1f} GFLOP/step')
  if (point.get('spread') or 0) > SPREAD_WARNING:
    line += (f'\n  WARNING: step times spread {point["spread"]:.0%} over the repeats (over '
             f'{SPREAD_WARNING:.0%}): the machine was busy; rerun on an idle one or with more '
             '--repeats before quoting this speed.')
  return line


# ----------------------------------------------------------------------------------------------
# Notes: what the table rests on.
# ----------------------------------------------------------------------------------------------
def noisy_points(points) -> list[dict]:
  """Timed points whose step times spread more than SPREAD_WARNING over the repeats."""
  return [p for p in points if (p.get('spread') or 0) > SPREAD_WARNING]


def spread_note(points) -> str:
  """What the speeds rest on: repeats per point, the widest spread, and the noisy points."""
  timed = [p for p in points if p.get('spread') is not None]
  if not timed:
    return 'No step was timed.'
  widest = max(p['spread'] for p in timed)
  note = (f'Speeds are medians of the timed repeats; widest spread (max - min) / median: '
          f'{widest:.0%}.')
  noisy = noisy_points(points)
  if noisy:
    note += (f' WARNING: {len(noisy)} points spread over {SPREAD_WARNING:.0%} ('
             + ', '.join(f'{p["model"]} @ {length_label(p["length"])} {p["spread"]:.0%}'
                         for p in noisy)
             + '): the machine was busy; rerun on an idle one or with more --repeats before '
             'quoting their ratios.')
  return note


def absolute_note(results: dict) -> str:
  """The Transformer's own numbers, which the relative cells divide by."""
  memory = memory_key(results['points'])
  parts = []
  for p in results['points']:
    if p['model'] != BASELINE:
      continue
    speed = '' if p.get('steps_per_s') is None else f'{rate(p["steps_per_s"])} steps/s, '
    value = (f'skipped ({p["reason"]})' if p['status'] == 'skipped'
             else STATUS_WORDS.get(p['status']) or f'{speed}{mib(p[memory])} MiB')
    parts.append(f'{length_label(p["length"])}: {value}')
  return (f'Transformer ({BASELINE}) absolute: ' + '; '.join(parts) + '.') if parts else (
      f'No {BASELINE} points in this sweep: relative cells are empty.')


def attention_note(results: dict) -> str:
  """'Attention per row: Transformer softmax, vanilla; Luna-16 luna.' from what each point ran."""
  implementations = {}
  for p in results['points']:
    if p.get('attention_implementation'):
      implementations.setdefault(p['model'], p['attention_implementation'])
  if not implementations:
    return ''
  # A plug-in's implementation is its class name, its row label too: said once, as a plug-in.
  return ('Attention per row: ' + '; '.join(
      f'{registry.label(name)} ' + ('(a plug-in)' if what == registry.label(name) else what)
      for name, what in implementations.items()) + '.')


def matmul_precisions(results: dict) -> str:
  """The matmul precision(s) the points were compiled with, else the sweep's."""
  found = dict.fromkeys(p['matmul_precision'] for p in results['points']
                        if p.get('matmul_precision'))
  return ' / '.join(found) or results.get('matmul_precision', 'default')


def setting_line(results: dict) -> str:
  device = results['device']
  return (f'Task {results["task"]}, batch {results["batch_size"]}, {results["dtype"]}, '
          f'matmul precision {matmul_precisions(results)}, '
          f'{device["device_kind"]} ({device["platform"]}), jax {device["jax_version"]}; '
          f'memory = {MEMORY_LABELS[memory_key(results["points"])]}.'
          + (f' Overrides: {", ".join(results["overrides"])}.' if results.get('overrides')
             else '')
          + (' Compiled only (--memory_only): no step ran, speed not timed.'
             if results.get('memory_only') else ''))


# ----------------------------------------------------------------------------------------------
# Tables.
# ----------------------------------------------------------------------------------------------
def slopes_grid(results: dict) -> str:
  """Markdown: the fitted slopes of step time and memory per model."""
  time_slopes, memory_slopes = results['slopes']['step_s'], results['slopes']['memory']
  rows = [[registry.label(name), slopes_lib.format_slope(time_slopes.get(name)),
           slopes_lib.format_slope(memory_slopes.get(name))] for name in results['models']]
  return tables.markdown_grid(['Model', 'step time', 'memory'], rows, 'lrr')


POINT_HEADER = ['Model', 'length', 'steps/s (median)', 'min', 'max', 'spread', 'compile s',
                'GFLOP/step', 'estimate MiB', 'device peak MiB', 'peak after compile MiB',
                'parameters']


def point_row(p: dict) -> list[str]:
  """One row of the every-point table."""
  if p['status'] != 'ok':
    what = (f'skipped: {p["reason"]}' if p['status'] == 'skipped'
            else f'{STATUS_WORDS[p["status"]]}: {p["error"].splitlines()[0][:200]}')
    return [p['model'], str(p['length']), what] + [''] * (len(POINT_HEADER) - 3)
  timed = p.get('step_s_min') is not None
  return [p['model'], str(p['length']), rate(p['steps_per_s']),
          rate(1 / p['step_s_max']) if timed else '-',
          rate(1 / p['step_s_min']) if timed else '-',
          format(p['spread'], '.0%') if timed else '-',
          '-' if p['compile_s'] is None else f'{p["compile_s"]:.1f}',  # None: --flops_only
          f'{(p["flops_per_step"] or 0) / 1e9:.1f}', mib(p['estimated_bytes']),
          mib(p.get('device_peak_bytes')), mib(p.get('device_peak_after_compile_bytes')),
          str(p['num_params'])]


def table2(results: dict) -> tables.Table:
  """Table 2 with its caption (the setting, the Transformer's absolute numbers, the attention
  per row) and, under the Markdown, the spread, the slopes and every point."""
  lengths, k = results['lengths'], len(results['lengths'])
  header = ([f'steps/s {length_label(n)}' for n in lengths]
            + [f'memory {length_label(n)}' for n in lengths])
  relative = relative_rows(results)
  caption = ' '.join(filter(None, [
      'Table 2: training speed and peak memory relative to the vanilla Transformer.',
      setting_line(results), 'Higher steps/s and lower memory are better.',
      absolute_note(results), attention_note(results)]))
  by_length = ' & '.join(length_label(n) for n in lengths)
  notes = [spread_note(results['points']), '',
           '## Fitted log-log slopes against length (1 = linear, 2 = quadratic)', '',
           f'From {slopes_lib.MIN_SLOPE_LENGTHS} or more lengths; ± its standard error (the '
           "fit's residuals, or the repeats' spread for step time, whichever is larger).", '',
           slopes_grid(results), '## Every point', '',
           tables.markdown_grid(POINT_HEADER, [point_row(p) for p in results['points']])]
  return tables.Table(
      name='table2', caption=caption, header=['Model'] + header,
      rows=[[label] + [format_cell(c) for c in cells] for label, cells in relative],
      groups=[label.removesuffix(' (paper)') for label, _ in relative], notes=notes,
      latex_header=[rf' & \multicolumn{{{k}}}{{c}}{{Steps per second $\uparrow$}} & '
                    rf'\multicolumn{{{k}}}{{c}}{{Peak Memory Usage $\downarrow$}} \\',
                    rf'Model & {by_length} & {by_length} \\'],
      label='tab:lra_efficiency_ours')


def write_tables(results: dict, out_dir) -> None:
  """table2.md and table2.tex in out_dir."""
  tables.write(table2(results), out_dir, formats=('md', 'tex'))
