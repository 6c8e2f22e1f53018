"""The MQAR comparisons behind Zoology's findings (docs/mqar.md), from the rows of report/recall.py:
each the difference of two settings' seed means, with its 95% Welch interval
(runs.welch_difference) and a verdict, written as mqar_comparisons.{md,tex,csv}:
- against attention: each model's best learning rate minus the Transformer's at the same
  causality, L, N, V and D (does a model recall as attention does?);
- against chance: each model's best minus chance (1/N), with a one-sample t interval (does it
  recall at all?);
- causal against bidirectional: a model's causal best minus its bidirectional best at the same
  L, N, V, D and P (does reading ahead help or hurt?);
- learning rates: where a setting ran at several rates, the best minus each other (is the rate
  what separates two models?).
Verdict: 'higher' or 'lower' where the interval lies on one side of 0, 'not distinguishable'
where it holds 0 (orderings.verdict's test, in words without a published side), 'needs 2+
seeds' where a side has one seed (no interval).
"""

import dataclasses

from lra_luna import tables
from lra_luna.report import orderings
from lra_luna.report import runs

TABLE = 'mqar_comparisons'
TRANSFORMER = 'transformer'  # the attention every model is compared with
AGAINST_ATTENTION = 'model − Transformer'
AGAINST_CHANCE = 'model − chance'
CAUSAL_MINUS_BIDIRECTIONAL = 'causal − bidirectional'
BEST_RATE_MINUS_OTHER = 'best lr − other lr'


WORDS = {'reproduces': 'higher', 'reversed': 'lower', 'not distinguishable': 'not distinguishable'}


def verdict(difference: runs.Cell) -> str:
  """higher / lower / not distinguishable by where 0 lies against the 95% interval."""
  if difference.interval is None:
    return 'needs 2+ seeds'
  return WORDS[orderings.verdict(*difference.interval)]


def chance_difference(cell: runs.Cell, chance: float) -> runs.Cell:
  """mean − chance with its 95% one-sample t interval, mean − chance ± t_{0.975, n−1} s/√n;
  no interval for one seed."""
  difference = cell.mean - chance
  if not cell.n or cell.n < 2:
    return runs.Cell(difference)
  from scipy import stats  # pylint: disable=import-outside-toplevel  (the report alone needs it)
  half = stats.t.ppf(0.975, cell.n - 1) * cell.std / cell.n ** 0.5
  return runs.Cell(difference, interval=(difference - half, difference + half))


def described(row) -> str:
  """'luna16 P=16 (causal) lr 0.003: 24.18 ± 0.12, n = 3' of a recall.Row; 'chance' for
  None."""
  if row is None:
    return 'chance'
  cell = row.cell
  spread = '' if cell.std is None else f' ± {cell.std:.2f}'
  return (f'{row.setting.label(row.setting.pack)} lr {row.setting.lr:g}: {cell.mean:.2f}'
          f'{spread}, n = {cell.n}')


def pairs_of(rows: list, best: dict) -> list[tuple[str, object, object]]:
  """[(comparison, first Row, second Row or None for chance)] of recall.Rows and their
  best_rows, in the order above; each pair's setting order within a comparison."""
  by_setting = {row.setting: row for row in rows}
  ordered = sorted(best.items(), key=lambda item: item[1].setting.order())
  attention = [(AGAINST_ATTENTION, row, best[dataclasses.replace(key, model=TRANSFORMER,
                                                                 pack=None)])
               for key, row in ordered if key.model != TRANSFORMER
               and dataclasses.replace(key, model=TRANSFORMER, pack=None) in best]
  chance = [(AGAINST_CHANCE, row, None) for _, row in ordered]
  settings = [(CAUSAL_MINUS_BIDIRECTIONAL, row, best[dataclasses.replace(key, causal=False)])
              for key, row in ordered
              if key.causal and dataclasses.replace(key, causal=False) in best]
  rates = [(BEST_RATE_MINUS_OTHER, row, other) for key, row in ordered
           for other in sorted((r for s, r in by_setting.items()
                                if dataclasses.replace(s, lr=0.0) == key and r is not row),
                               key=lambda r: r.setting.lr)]
  return attention + chance + settings + rates


def table(rows: list, best: dict, caption: str = '') -> tables.Table:
  """mqar_comparisons: a line per pair (pairs_of): L, N, V, D, the two groups, first − second
  with its 95% Welch interval, the verdict."""
  lines, csv_lines = [], []
  for comparison, first, second in pairs_of(rows, best):
    difference = (chance_difference(first.cell, first.setting.chance()) if second is None
                  else runs.welch_difference(second.cell, first.cell))  # first − second
    interval = difference.interval
    shown = f'{difference.mean:+.2f}' + (
        '' if interval is None else f' [{interval[0]:+.2f}, {interval[1]:+.2f}]')
    s = first.setting
    lines.append([comparison, str(s.length), str(s.pairs), str(s.vocab), str(s.dim),
                  described(first), described(second), shown, verdict(difference)])
    second_group = 'chance' if second is None else second.setting.group()
    csv_lines.append([comparison, s.length, s.pairs, s.vocab, s.dim, first.setting.group(),
                      second_group, f'{difference.mean:.4f}',
                      '' if interval is None else f'{interval[0]:.4f}',
                      '' if interval is None else f'{interval[1]:.4f}', verdict(difference)])
  title = ('MQAR comparisons: test accuracy (%) of the first group minus the second, with its '
           "95% interval (Welch's t, unequal variances); each group mean ± sample std over n "
           'seeds. Against the Transformer, chance and across settings each side is at its best '
           'learning rate; against chance (1/N) the interval is a one-sample t interval.')
  notes = ["Verdict: higher or lower where the interval lies on one side of 0, not "
           "distinguishable where it holds 0."]
  return tables.Table(
      TABLE, title + (f' {caption}' if caption else ''),
      ['comparison', 'L', 'N', 'V', 'D', 'first', 'second', 'first − second, 95% Welch',
       'verdict'],
      lines, align='lrrrrllll', notes=notes,
      csv_header=['comparison', 'L', 'N', 'V', 'D', 'first', 'second', 'difference', 'low', 'high',
                  'verdict'], csv_rows=csv_lines)
