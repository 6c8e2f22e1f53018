"""MQAR (Zoology's multi-query associative recall, Arora et al. ICLR 2024; configs/mqar.py) in
the report, from the MQAR runs (task 'mqar') under a folder, however many sweeps it holds:
- mqar.{md,tex,csv}: one row per setting (model, causal, length L, pairs N, width D, Luna's pack
  length P, learning rate): test accuracy mean ± sample std over seeds (%), n seeds, chance
  (results.json test_chance_rate, 1/N) and steps; '*' marks the best learning rate of its
  setting, the one the figures plot. A note names the data generator's settings.
- mqar_widths.png (where a model ran at 2 widths or more): Zoology's Figure 2, one panel per
  (L, N), accuracy against D (log2), a line per model ('(causal)' for a causal one, its P where
  it ran with several), each point the best mean over learning rates (as Zoology reports).
- mqar_capacity.png (where Luna ran at 2 pair counts or more): Luna's capacity, one panel per
  (L, D), accuracy against N (log2), a line per pack length P ('Luna P=8') and the Transformer's
  beside them, at the best learning rate of each point.
Panels without such a line are left out; each label has one colour in every panel.
A run's L, N, D, P and learning rate are those of its config.json (max_length,
mqar.num_kv_pairs, model.dim, model.pack_length of an attention 'luna', learning_rate); its
causality results.json's 'causal'.
"""

import dataclasses
import pathlib
import textwrap

from lra_luna import registry
from lra_luna import tables
from lra_luna.report import recall_setting
from lra_luna.report import runs

TASK = recall_setting.TASK
Setting = recall_setting.Setting
setting_of = recall_setting.setting_of
TABLE = 'mqar'
WIDTHS_FIGURE = 'mqar_widths.png'
CAPACITY_FIGURE = 'mqar_capacity.png'
TRANSFORMER = 'transformer'  # the capacity figure's reference line


@dataclasses.dataclass
class Row:
  """The seeds of one setting: their test accuracy (Cell, %), chance (%), steps, results."""
  setting: Setting
  cell: runs.Cell
  chance: list
  steps: list
  results: list


def rows_of(results: list[dict], checkpoint: str) -> list[Row]:
  """One Row per setting, in Setting.order."""
  grouped = {}
  for result in results:
    grouped.setdefault(setting_of(result), []).append(result)
  rows = []
  for setting in sorted(grouped, key=Setting.order):
    seeds = sorted(grouped[setting], key=lambda r: r['seed'])
    rows.append(Row(setting, runs.seed_statistics([runs.accuracy_of(r, checkpoint)
                                                   for r in seeds]),
                    sorted({100 * r['test_chance_rate'] for r in seeds
                            if r.get('test_chance_rate') is not None}),
                    sorted({r['steps'] for r in seeds}), seeds))
  return rows


def best_rows(rows: list[Row]) -> dict:
  """{setting without its learning rate: the Row of the best mean over learning rates} (ties:
  the smaller learning rate)."""
  best = {}
  for row in rows:
    key = dataclasses.replace(row.setting, lr=0.0)
    if key not in best or row.cell.mean > best[key].cell.mean:
      best[key] = row
  return best


def data_words(results: list[dict]) -> str:
  """The generator's settings other than L and N (vocabulary, query gaps, data seed) and the
  split sizes, each distinct description once."""
  described = []
  for result in results:
    data = result.get('data') or {}
    settings = {k: v for k, v in (data.get('settings') or {}).items()
                if k not in ('length', 'num_kv_pairs')}
    examples = data.get('examples') or {}
    words = (f"{data.get('generator', 'not recorded')}: vocab size {settings.get('vocab_size')}, "
             + ''.join(f'{k} {settings[k]}, ' for k in sorted(settings)
                       if k not in ('vocab_size', 'seed'))
             + f"data seed {settings.get('seed')}; "
             + '/'.join(str(examples.get(k)) for k in ('train', 'validation', 'test'))
             + ' train/validation/test examples' + (' (a smoke test\'s, not the full set)'
                                                    if data.get('smoke') else ''))
    described.append(words)
  return ' | '.join(dict.fromkeys(described))


def training_words(results: list[dict]) -> str:
  """How the runs trained (results.json 'run', without the overrides that set L, N, D, lr)."""
  return ' | '.join(dict.fromkeys(
      runs.describe_run(r.get('run') and {**r['run'], 'overrides': []}) for r in results))


def table(rows: list[Row], checkpoint: str, caption: str = '') -> tables.Table:
  """mqar: a line per Row; '*' on the best learning rate where a setting tried several."""
  best = {id(row) for row in best_rows(rows).values()}
  tried = {}
  for row in rows:
    key = dataclasses.replace(row.setting, lr=0.0)
    tried[key] = tried.get(key, 0) + 1
  lines, csv_lines = [], []
  for row in rows:
    s, cell = row.setting, row.cell
    mark = ' *' if id(row) in best and tried[dataclasses.replace(s, lr=0.0)] > 1 else ''
    accuracy = f'{cell.mean:.2f}' + ('' if cell.std is None else f' ± {cell.std:.2f}')
    chance = '/'.join(f'{c:.2f}' for c in row.chance) or runs.MISSING
    steps = '/'.join(str(n) for n in row.steps)
    pack = runs.MISSING if s.pack is None else str(s.pack)
    lines.append([s.label(), str(s.length), str(s.pairs), str(s.dim), pack, f'{s.lr:g}{mark}',
                  accuracy, str(cell.n), chance, steps])
    csv_lines.append([s.model, str(s.causal).lower(), s.length, s.pairs, s.dim,
                      '' if s.pack is None else s.pack, f'{s.lr:g}', id(row) in best,
                      f'{cell.mean:.4f}', '' if cell.std is None else f'{cell.std:.4f}', cell.n,
                      '/'.join(f'{c:.4f}' for c in row.chance), steps, checkpoint])
  results = [r for row in rows for r in row.results]
  title = (f"MQAR (Zoology's multi-query associative recall): test accuracy (%), "
           f'{runs.CHECKPOINTS[checkpoint]}; mean ± sample std over n seeds. L sequence length, '
           "N key-value pairs, D model width, P Luna's pack length; chance: 1/N, guessing "
           "among the sequence's N values (results.json test_chance_rate). '*': the best "
           "learning rate of its setting (the figures').")
  return tables.Table(
      TABLE, title + (f' {caption}' if caption else ''),
      ['Model', 'L', 'N', 'D', 'P', 'lr', 'Test acc. (%)', 'n', 'Chance (%)', 'Steps'], lines,
      align='l' + 'r' * 9, notes=[f'Data: generated by {data_words(results)}.',
                                  f'Trained: {training_words(results)}.'],
      csv_header=['model', 'causal', 'L', 'N', 'D', 'P', 'lr', 'best_lr', 'mean', 'std', 'n',
                  'chance', 'steps', 'checkpoint'], csv_rows=csv_lines)


def draw_lines(ax, lines: dict, x_label: str, colours: dict, chance: dict | None = None) -> None:
  """{label: {x: Cell}} as lines in their `colours`, with their seed std as error bars, on a
  log2 x axis; `chance` {x: %} dashed grey."""
  for label, points in lines.items():
    xs = sorted(points)
    ax.errorbar(xs, [points[x].mean for x in xs], yerr=[points[x].std or 0 for x in xs],
                marker='o', markersize=4, capsize=3, color=colours[label], label=label)
  if chance:
    xs = sorted(chance)
    ax.plot(xs, [chance[x] for x in xs], color='grey', linestyle='--', linewidth=1,
            label='chance (1/N)')
  ticks = sorted({x for points in lines.values() for x in points})
  ax.set_xscale('log', base=2)
  ax.set_xticks(ticks, [f'{x:g}' for x in ticks])
  ax.minorticks_off()
  ax.set_ylim(-2, 102)
  ax.set_xlabel(x_label)
  ax.set_ylabel('test accuracy (%)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)


def save_panels(panels: dict, path, suptitle: str, x_label: str, chances: dict) -> pathlib.Path:
  """One panel per {title: lines} side by side (draw_lines), a label in one colour in all of
  them; written to `path`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  from matplotlib import figure as figure_lib  # pylint: disable=import-outside-toplevel
  cycle = [c['color'] for c in matplotlib.rcParams['axes.prop_cycle']]
  labels = list(dict.fromkeys(label for lines in panels.values() for label in lines))
  colours = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
  figure = figure_lib.Figure(figsize=(4.5 * len(panels), 4.2), layout='constrained')
  axes = figure.subplots(1, len(panels), squeeze=False)[0]
  for ax, (title, lines) in zip(axes, panels.items()):
    draw_lines(ax, lines, x_label, colours, chances.get(title))
    ax.set_title(title, fontsize=10)
  figure.suptitle(textwrap.fill(suptitle, 60 * len(panels)), fontsize=10)
  figure.savefig(path, dpi=120)
  return pathlib.Path(path)


def panels_of(placed: list) -> dict:
  """{title: {label: {x: Cell}}} of [(title, (line order, label), x, Cell)]: lines in their
  order; only the panels where a line has 2 points or more."""
  panels = {}
  for title, line, x, cell in placed:
    panels.setdefault(title, {}).setdefault(line, {})[x] = cell
  return {title: {label: points for (_, label), points in sorted(lines.items())}
          for title, lines in panels.items() if max(len(p) for p in lines.values()) > 1}


def width_panels(best: dict) -> tuple[dict, dict]:
  """({'L = 256, N = 16': {line label: {D: Cell}}}, {title: {D: chance}}) of the best rows; a
  model's P is in its label where the model ran with several."""
  packs = {}
  for row in best.values():
    packs.setdefault(row.setting.model, set()).add(row.setting.pack)
  placed, chances = [], {}
  for row in sorted(best.values(), key=lambda r: r.setting.order()):
    s = row.setting
    title = f'L = {s.length}, N = {s.pairs}'
    label = s.model + (f' P={s.pack}' if len(packs[s.model]) > 1 else '') + (
        ' (causal)' if s.causal else '')
    placed.append((title, ((s.order()[0], s.causal, s.pack or 0), label), s.dim, row.cell))
    chances.setdefault(title, {}).update({s.dim: row.chance[0]} if row.chance else {})
  return panels_of(placed), chances


def capacity_panels(best: dict) -> tuple[dict, dict]:
  """({'L = 256, D = 128': {'Luna P=8': {N: Cell}, 'Transformer': ...}}, chances) of the best
  rows: a line per Luna pack length and the Transformer's at the same (L, D)."""
  luna = [r for r in best.values() if r.setting.pack is not None]
  places = {(r.setting.length, r.setting.dim) for r in luna}
  others = [r for r in best.values() if registry.base_name(r.setting.model) == TRANSFORMER
            and (r.setting.length, r.setting.dim) in places]
  placed, chances = [], {}
  for row in luna + others:
    s = row.setting
    title = f'L = {s.length}, D = {s.dim}'
    suffix = s.model[len(registry.base_name(s.model)):] + (' (causal)' if s.causal else '')
    label = (f'Luna P={s.pack}' if s.pack is not None else 'Transformer') + suffix
    placed.append((title, ((s.pack is None, s.causal, s.pack or 0, suffix), label), s.pairs,
                   row.cell))
    chances.setdefault(title, {}).update({s.pairs: row.chance[0]} if row.chance else {})
  panels = {title: lines for title, lines in panels_of(placed).items()  # Luna at 2 N or more
            if any(len(p) > 1 for label, p in lines.items() if label.startswith('Luna'))}
  return panels, chances


def write_report(results: list[dict], checkpoint: str, out_dir, caption: str = '') -> list:
  """mqar.{md,tex,csv} and, where their data allow, mqar_widths.png and mqar_capacity.png of
  the MQAR results; the paths written."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')  # Files only, no display.
  out_dir = pathlib.Path(out_dir)
  rows = rows_of(results, checkpoint)
  paths = tables.write(table(rows, checkpoint, caption), out_dir)
  best = best_rows(rows)
  where = f'{runs.CHECKPOINTS[checkpoint]}, best learning rate per point, ± std over seeds'
  panels, chances = width_panels(best)
  if panels:  # a panel of 2 widths or more
    paths.append(save_panels(panels, out_dir / WIDTHS_FIGURE,
                             f'MQAR: accuracy against model width ({where})',
                             'model width D', chances))
  panels, chances = capacity_panels(best)
  if panels:  # a Luna line of 2 pair counts or more
    paths.append(save_panels(panels, out_dir / CAPACITY_FIGURE,
                             f"MQAR: Luna's capacity against key-value pairs ({where})",
                             'key-value pairs N', chances))
  return paths
