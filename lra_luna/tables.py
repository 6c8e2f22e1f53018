"""The one writer of every table the tools emit (report's Tables 1 and 3, the profiler's Table 2,
the campaign's estimates): Markdown, LaTeX and CSV from one `Table` of already formatted cells.

No JAX and no formatting of numbers here: the caller formats its cells; this module only lays
them out, escapes what each format needs ('|' in a Markdown cell, '_' and '%' in LaTeX), and
reads Markdown tables back (`parse_markdown`) so tests can check every written table is well
formed (as many cells in each row as in its header).
"""

import csv
import dataclasses
import io
import pathlib

FORMATS = ('md', 'tex', 'csv')


@dataclasses.dataclass
class Table:
  """A table of text cells, with what each format adds around it."""
  name: str                  # file stem: <name>.md, <name>.tex, <name>.csv
  caption: str               # the sentence(s) above the Markdown table, the LaTeX caption
  header: list               # column titles
  rows: list                 # lists of cell strings, one per column
  align: str = ''            # one of 'l', 'r', 'c' per column ('' = first 'l', the rest 'r')
  groups: list | None = None  # per row, its group: LaTeX draws a rule between groups
  notes: list = dataclasses.field(default_factory=list)  # lines under the Markdown table
  latex_header: list | None = None  # LaTeX lines replacing the header row (e.g. multicolumns)
  label: str = ''            # LaTeX \label (default tab:<name>)
  csv_header: list | None = None  # CSV columns when they differ from the table's (raw numbers)
  csv_rows: list | None = None

  def __post_init__(self):
    for i, row in enumerate(self.rows):
      if len(row) != len(self.header):
        raise ValueError(f'table {self.name}: row {i} has {len(row)} cells for '
                         f'{len(self.header)} columns: {row}')
    if self.csv_rows is not None:
      for i, row in enumerate(self.csv_rows):
        if len(row) != len(self.csv_header or self.header):
          raise ValueError(f'table {self.name}: CSV row {i} has {len(row)} cells for '
                           f'{len(self.csv_header or self.header)} columns.')

  @property
  def alignment(self) -> str:
    return self.align or 'l' + 'r' * (len(self.header) - 1)


def markdown_cell(text) -> str:
  """A cell's text on one line with its '|' escaped, so it stays one cell."""
  return ' '.join(str(text).split()).replace('|', r'\|')


def markdown_grid(header, rows, align: str = '') -> str:
  """The Markdown lines of a header and its rows (no caption): for tables inside other text."""
  align = align or 'l' + 'r' * (len(header) - 1)
  rule = {'l': '---', 'r': '---:', 'c': ':---:'}
  lines = ['| ' + ' | '.join(markdown_cell(h) for h in header) + ' |',
           '|' + '|'.join(rule[a] for a in align) + '|']
  lines += ['| ' + ' | '.join(markdown_cell(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines) + '\n'


def markdown(table: Table) -> str:
  """Caption, blank line, the grid, then the notes."""
  text = f'{table.caption}\n\n' + markdown_grid(table.header, table.rows, table.alignment)
  if table.notes:
    text += '\n' + '\n'.join(table.notes) + '\n'
  return text


def latex_escape(text) -> str:
  return (str(text).replace('\\', r'\textbackslash{}').replace('_', r'\_').replace('&', r'\&')
          .replace('%', r'\%').replace('#', r'\#').replace('±', r'$\pm$'))


def latex(table: Table) -> str:
  """A booktabs table: caption, label, header (or latex_header), rows with a rule between
  groups. '—' cells become '--'."""
  header = table.latex_header or [' & '.join(latex_escape(h) for h in table.header) + r' \\']
  lines = [r'\begin{table}', r'\centering', r'\small',
           r'\caption{' + latex_escape(table.caption) + '}',
           r'\label{' + (table.label or f'tab:{table.name}') + '}',
           r'\begin{tabular}{' + table.alignment + '}', r'\toprule', *header, r'\midrule']
  for i, row in enumerate(table.rows):
    if table.groups and i and table.groups[i] != table.groups[i - 1]:
      lines.append(r'\midrule')
    lines.append(' & '.join(latex_escape(c).replace('—', '--') for c in row) + r' \\')
  lines += [r'\bottomrule', r'\end{tabular}', r'\end{table}']
  return '\n'.join(lines) + '\n'


def csv_text(table: Table) -> str:
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(table.csv_header or table.header)
  writer.writerows(table.csv_rows if table.csv_rows is not None else table.rows)
  return out.getvalue()


WRITERS = {'md': markdown, 'tex': latex, 'csv': csv_text}


def write(table: Table, out_dir, formats=FORMATS) -> list[pathlib.Path]:
  """Writes <out_dir>/<name>.<format> for each format; the paths written."""
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  paths = []
  for fmt in formats:
    path = out_dir / f'{table.name}.{fmt}'
    path.write_text(WRITERS[fmt](table))
    paths.append(path)
  return paths


def split_markdown_row(line: str) -> list[str]:
  """The cells of one '| a | b |' line, an escaped '\\|' kept inside its cell."""
  cells, current, chars = [], '', iter(line.strip()[1:-1] if line.strip().endswith('|')
                                       else line.strip()[1:])
  for ch in chars:
    if ch == '\\':
      current += ch + next(chars, '')
    elif ch == '|':
      cells.append(current.strip())
      current = ''
    else:
      current += ch
  cells.append(current.strip())
  return cells


def parse_markdown(text: str) -> list[dict]:
  """Every table of a Markdown text as {'header': [...], 'rows': [[...], ...]}; ValueError
  naming the line of a row whose cell count differs from its header's."""
  tables, lines = [], text.splitlines()
  i = 0
  while i < len(lines):
    is_table = (lines[i].lstrip().startswith('|') and i + 1 < len(lines)
                and set(lines[i + 1].replace('|', '').strip()) <= set('-: ')
                and lines[i + 1].strip().startswith('|'))
    if not is_table:
      i += 1
      continue
    header = split_markdown_row(lines[i])
    rows, i = [], i + 2
    while i < len(lines) and lines[i].lstrip().startswith('|'):
      row = split_markdown_row(lines[i])
      if len(row) != len(header):
        raise ValueError(f'line {i + 1}: {len(row)} cells under a header of {len(header)}: '
                         f'{lines[i]}')
      rows.append(row)
      i += 1
    tables.append({'header': header, 'rows': rows})
  return tables
