"""MQAR (Zoology's multi-query associative recall, Arora et al. ICLR 2024; configs/mqar.py) in
the report, from the MQAR runs (task 'mqar') under a folder, however many sweeps it holds, or
from their rows in a record (report/record.py: each row's group is its setting's text,
Setting.group); both draw from the same rows, at the record's precision, so a folder and its
record give the same outputs:
- mqar.{md,tex,csv}: one row per setting (model, causal, length L, pairs N, vocabulary V, width
  D, Luna's pack length P, learning rate): test accuracy mean ± sample std over seeds (%), n
  seeds, chance (1/N), steps and the commits that computed it ('not recorded' for a row copied
  into a record by hand); '*' marks the best learning rate of its setting, the one the figures
  plot. Notes name the data generator's settings and how the runs trained (from a record: its
  presets, commits and machines).
- mqar_widths.png (where a model ran at 2 widths or more): Zoology's Figure 2, one panel per
  (L, N, and V where it is not 8,192), accuracy against D (log2), a line per model ('(causal)'
  for a causal one, its P where it ran with several), each point the best mean over learning
  rates (as Zoology reports).
- mqar_capacity.png (where Luna ran at 2 pair counts or more): Luna's capacity, one panel per
  (L, V, D), accuracy against N (log2), a line per pack length P ('Luna P=8') and the Transformer's
  beside them, at the best learning rate of each point.
- mqar_models.png (where 2 models or more ran at one (L, N, D)): a panel per (L, N, D), a
  horizontal bar per model ('(causal)' for a causal one, a Luna model's P where it is not the
  one its name says), its mean at the best learning rate, ± seed std, the seeds as dots, chance
  dashed.
- mqar_comparisons.{md,tex,csv} (report/recall_comparisons.py): each model against the
  Transformer and against chance, causal against bidirectional, the best learning rate against
  the others; each difference with its 95% interval and verdict.
Panels without such a line (or bars) are left out; each label has one colour in every panel.
A run's L, N, V, D, P and learning rate are those of its config.json (max_length,
mqar.num_kv_pairs, mqar.vocab_size, model.dim, model.pack_length of an attention 'luna',
learning_rate); its causality results.json's 'causal'.
"""

import dataclasses
import pathlib
import textwrap

from lra_luna import registry
from lra_luna import tables
from lra_luna.report import orderings
from lra_luna.report import recall_comparisons
from lra_luna.report import recall_setting
from lra_luna.report import record
from lra_luna.report import runs

TASK = recall_setting.TASK
Setting = recall_setting.Setting
setting_of = recall_setting.setting_of
TABLE = 'mqar'
WIDTHS_FIGURE = 'mqar_widths.png'
CAPACITY_FIGURE = 'mqar_capacity.png'
MODELS_FIGURE = 'mqar_models.png'
TRANSFORMER = 'transformer'  # the capacity figure's reference line


def split(items: list[dict]) -> tuple[list, list]:
  """(the others, the MQAR ones) of results or record rows, by their task."""
  return ([item for item in items if item['task'] != TASK],
          [item for item in items if item['task'] == TASK])


def record_rows(results: list[dict]) -> list[dict]:
  """The record rows of MQAR results (report/record.py), each group its setting's text."""
  return record.rows_of(results, lambda result: setting_of(result).group())


@dataclasses.dataclass
class Row:
  """The seeds of one setting: their record rows, test accuracy per seed (%, as the record
  keeps it), its mean ± std (Cell) and their steps."""
  setting: Setting
  seeds: list
  accuracies: list
  cell: runs.Cell
  steps: list


def rows_of(run_rows: list[dict], checkpoint: str, where) -> list[Row]:
  """One Row per setting of record rows, in Setting.order; ValueError in one line naming
  `where` when a run lacks the checkpoint, or a setting's seed ran at two sizes (--size)."""
  record.check_checkpoint(run_rows, where, checkpoint)
  grouped = {}
  for run in run_rows:
    grouped.setdefault(Setting.from_group(run['group']), []).append(run)
  rows = []
  for setting in sorted(grouped, key=Setting.order):
    seeds = sorted(grouped[setting], key=lambda r: r['seed'])
    for first, second in zip(seeds, seeds[1:]):
      if first['seed'] == second['seed']:  # a seed counted twice would weigh double
        raise ValueError(f"{where}: {setting.group()} seed {first['seed']} ran at sizes "
                         f"{' and '.join(sorted((first['size'], second['size'])))}; choose "
                         'one with --size.')
    accuracies = [record.as_recorded(r[checkpoint]) for r in seeds]
    rows.append(Row(setting, seeds, accuracies, runs.seed_statistics(accuracies),
                    sorted({str(r['steps']) for r in seeds}, key=orderings.steps_key)))
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


def folder_notes(results: list[dict]) -> list[str]:
  """The table's notes on the data and training of MQAR results."""
  return [f'Data: generated by {data_words(results)}.',
          f'Trained: {training_words(results)}.']


def record_notes(run_rows: list[dict], path) -> list[str]:
  """The table's note on the data and training of a record's MQAR rows: the record's presets
  (with their overrides in its config column), commits and machines."""
  presets = ', '.join(dict.fromkeys(row['config'].split(' ')[0] or orderings.NOT_RECORDED
                                    for row in run_rows))
  machines = orderings.counted([row['machine'] for row in run_rows])
  return [f'Data and training: as recorded in {path}: presets {presets} (the data those '
          'generate at L and N; the overrides in its config column); computed at commits '
          f'{orderings.commits(run_rows)} on {machines}.']


def table(rows: list[Row], checkpoint: str, caption: str = '', notes=()) -> tables.Table:
  """mqar: a line per Row; '*' on the best learning rate where a setting tried several;
  `notes` (folder_notes, record_notes) under it."""
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
    steps = '/'.join(row.steps)
    pack = runs.MISSING if s.pack is None else str(s.pack)
    commits = orderings.commits(row.seeds)
    lines.append([s.label(), str(s.length), str(s.pairs), str(s.vocab), str(s.dim), pack,
                  f'{s.lr:g}{mark}', accuracy, str(cell.n), f'{s.chance():.2f}', steps, commits])
    csv_lines.append([s.model, str(s.causal).lower(), s.length, s.pairs, s.vocab, s.dim,
                      '' if s.pack is None else s.pack, f'{s.lr:g}', id(row) in best,
                      f'{cell.mean:.4f}', '' if cell.std is None else f'{cell.std:.4f}', cell.n,
                      f'{s.chance():.4f}', steps, checkpoint, commits])
  title = (f"MQAR (Zoology's multi-query associative recall): test accuracy (%), "
           f'{runs.CHECKPOINTS[checkpoint]}; mean ± sample std over n seeds. L sequence length, '
           "N key-value pairs, V vocabulary, D model width, P Luna's pack length; chance: 1/N, "
           "guessing among the sequence's N values. '*': the best learning rate of its setting "
           "(the figures').")
  notes = list(notes)
  if any(not r['commit'] for row in rows for r in row.seeds):  # e.g. a row copied in by hand
    notes.append(f'Commit {orderings.NOT_RECORDED}: {orderings.NO_COMMIT_REASON}.')
  return tables.Table(
      TABLE, title + (f' {caption}' if caption else ''),
      ['Model', 'L', 'N', 'V', 'D', 'P', 'lr', 'Test acc. (%)', 'n', 'Chance (%)', 'Steps',
       'Commit'],
      lines, align='l' + 'r' * 10 + 'l', notes=notes,
      csv_header=['model', 'causal', 'L', 'N', 'V', 'D', 'P', 'lr', 'best_lr', 'mean', 'std', 'n',
                  'chance', 'steps', 'checkpoint', 'commit'], csv_rows=csv_lines)


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


def colours_of(labels) -> dict:
  """{label: colour} in matplotlib's cycle, each label one colour in every panel."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  cycle = [c['color'] for c in matplotlib.rcParams['axes.prop_cycle']]
  return {label: cycle[i % len(cycle)] for i, label in enumerate(dict.fromkeys(labels))}


def panel_grid(count: int, columns: int, width: float, heights) -> tuple:
  """(a Figure, its `count` axes): `columns` panels a line, each `width` inches wide and as
  tall as its line's entry in `heights` (inches; one number: every line)."""
  from matplotlib import figure as figure_lib  # pylint: disable=import-outside-toplevel
  lines = -(-count // columns)
  heights = list(heights) if isinstance(heights, (list, tuple)) else [heights] * lines
  figure = figure_lib.Figure(figsize=(width * columns, sum(heights)), layout='constrained')
  axes = figure.subplots(lines, columns, squeeze=False,
                         gridspec_kw={'height_ratios': heights}).ravel()
  for ax in axes[count:]:  # the last line's empty places
    ax.set_visible(False)
  return figure, axes[:count]


def save(figure, path, suptitle: str, columns: int) -> pathlib.Path:
  """Writes `figure` to `path` under `suptitle`, wrapped to its width."""
  figure.suptitle(textwrap.fill(suptitle, 60 * columns), fontsize=10)
  figure.savefig(path, dpi=120)
  return pathlib.Path(path)


def save_panels(panels: dict, path, suptitle: str, x_label: str, chances: dict) -> pathlib.Path:
  """One panel per {title: lines} side by side (draw_lines), a label in one colour in all of
  them; written to `path`."""
  colours = colours_of(label for lines in panels.values() for label in lines)
  figure, axes = panel_grid(len(panels), len(panels), 4.5, 4.2)
  for ax, (title, lines) in zip(axes, panels.items()):
    draw_lines(ax, lines, x_label, colours, chances.get(title))
    ax.set_title(title, fontsize=10)
  return save(figure, path, suptitle, len(panels))


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
    title = f'L = {s.length}, N = {s.pairs}{s.vocab_words(", V = {}")}'
    label = s.label(s.pack if len(packs[s.model]) > 1 else None)
    placed.append((title, ((s.order()[0], s.causal, s.pack or 0), label), s.dim, row.cell))
    chances.setdefault(title, {})[s.dim] = s.chance()
  return panels_of(placed), chances


def capacity_panels(best: dict) -> tuple[dict, dict]:
  """({'L = 256, D = 128': {'Luna P=8': {N: Cell}, 'Transformer': ...}}, chances) of the best
  rows: a line per Luna pack length that ran at 2 pair counts or more (a single point says
  nothing of capacity) and the Transformer's at the same (L, V, D)."""
  luna = [r for r in best.values() if r.setting.pack is not None]
  places = {(r.setting.length, r.setting.vocab, r.setting.dim) for r in luna}
  others = [r for r in best.values() if registry.base_name(r.setting.model) == TRANSFORMER
            and (r.setting.length, r.setting.vocab, r.setting.dim) in places]
  placed, chances = [], {}
  for row in luna + others:
    s = row.setting
    title = f'L = {s.length}{s.vocab_words(", V = {}")}, D = {s.dim}'
    suffix = s.model[len(registry.base_name(s.model)):] + (' (causal)' if s.causal else '')
    label = (f'Luna P={s.pack}' if s.pack is not None else 'Transformer') + suffix
    placed.append((title, ((s.pack is None, s.causal, s.pack or 0, suffix), label), s.pairs,
                   row.cell))
    chances.setdefault(title, {})[s.pairs] = s.chance()
  panels = {}
  for title, lines in panels_of(placed).items():  # a Luna line at 2 N or more, the Transformer's
    kept = {label: points for label, points in lines.items()
            if len(points) > 1 or not label.startswith('Luna')}
    if any(label.startswith('Luna') for label in kept):
      panels[title] = kept
  return panels, chances


def bar_label(setting: Setting) -> str:
  """A bar's label: the model's, with its P where its name says another ('luna16 P=8')."""
  entry = registry.MODELS.get(registry.base_name(setting.model))
  named = entry.pack_length if entry else None
  return setting.label(None if setting.pack == named else setting.pack)


def model_panels(best: dict) -> dict:
  """{'L = 64, N = 4, D = 64': [its best rows, in Setting.order]} of the (L, N, D) where 2
  models or more ran (each causality and P its own), in (L, N, D) order."""
  panels = {}
  for row in sorted(best.values(), key=lambda r: r.setting.order()):
    s = row.setting
    panels.setdefault((s.length, s.pairs, s.vocab_words(', V = {}'), s.dim), []).append(row)
  return {f'L = {length}, N = {pairs}{vocab}, D = {dim}': rows
          for (length, pairs, vocab, dim), rows in sorted(panels.items()) if len(rows) > 1}


def draw_bars(ax, rows: list[Row], colours: dict) -> None:
  """A horizontal bar per Row, top down: its mean, ± its seed std, its seeds as dots; chance
  (1/N) a dashed line."""
  labels = [bar_label(row.setting) for row in rows]
  places = range(len(rows))
  ax.barh(places, [row.cell.mean for row in rows], xerr=[row.cell.std or 0 for row in rows],
          color=[colours[label] for label in labels], alpha=0.75, capsize=3, ecolor='dimgrey',
          label='mean ± std over seeds')
  for y, row in zip(places, rows):
    ax.plot(row.accuracies, [y] * len(row.accuracies), 'o', color='black', markersize=3,
            label=None if y else 'seeds')
  ax.axvline(rows[0].setting.chance(), color='grey', linestyle='--', linewidth=1,
             label='chance (1/N)')
  ax.set_yticks(list(places), labels, fontsize=8)
  ax.set_ylim(len(rows) - 0.5, -0.5)  # the first model on top
  ax.set_xlim(0, 102)
  ax.set_xlabel('test accuracy (%)')
  ax.grid(axis='x', alpha=0.3)


def save_bars(panels: dict, path, suptitle: str) -> pathlib.Path:
  """One panel per {title: rows} (draw_bars), 3 a line, each line as tall as its most bars
  need; a label in one colour in all of them; written to `path`."""
  colours = colours_of(bar_label(row.setting) for rows in panels.values() for row in rows)
  columns = min(3, len(panels))
  counts = [len(rows) for rows in panels.values()]
  heights = [2.4 + 0.28 * max(counts[i:i + columns]) for i in range(0, len(counts), columns)]
  figure, axes = panel_grid(len(panels), columns, 5.5, heights)
  for ax, (title, rows) in zip(axes, panels.items()):
    draw_bars(ax, rows, colours)
    ax.set_title(title, fontsize=10)
  # One legend under the panels, where it hides no bar.
  figure.legend(*axes[0].get_legend_handles_labels(), loc='outside lower center', ncol=3,
                fontsize=8)
  return save(figure, path, suptitle, columns)


def write_report(run_rows: list[dict], checkpoint: str, out_dir, where, caption: str = '',
                 notes=()) -> list:
  """mqar.{md,tex,csv}, mqar_comparisons.{md,tex,csv} and, where their data allow,
  mqar_widths.png, mqar_capacity.png and mqar_models.png of MQAR record rows (record_rows of
  results, or a record's); `where` they come from (errors name it), `notes` on their data and
  training; the paths written."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')  # Files only, no display.
  out_dir = pathlib.Path(out_dir)
  rows = rows_of(run_rows, checkpoint, where)
  paths = tables.write(table(rows, checkpoint, caption, notes), out_dir)
  best = best_rows(rows)
  paths += tables.write(recall_comparisons.table(rows, best, caption), out_dir)
  basis = f'{runs.CHECKPOINTS[checkpoint]}, best learning rate per point, ± std over seeds'
  panels, chances = width_panels(best)
  if panels:  # a panel of 2 widths or more
    paths.append(save_panels(panels, out_dir / WIDTHS_FIGURE,
                             f'MQAR: accuracy against model width ({basis})',
                             'model width D', chances))
  panels, chances = capacity_panels(best)
  if panels:  # a Luna line of 2 pair counts or more
    paths.append(save_panels(panels, out_dir / CAPACITY_FIGURE,
                             f"MQAR: Luna's capacity against key-value pairs ({basis})",
                             'key-value pairs N', chances))
  panels = model_panels(best)
  if panels:  # 2 models or more at one (L, N, D)
    paths.append(save_bars(panels, out_dir / MODELS_FIGURE,
                           f'MQAR: each model at its best learning rate ({basis})'))
  return paths
