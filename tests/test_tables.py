"""The one table writer: Markdown cells stay cells, LaTeX is escaped, CSV round-trips, and the
parser used to check every written Markdown table refuses a row with a cell too many."""

import csv
import io

import pytest

from lra_luna import tables


def example():
  return tables.Table('t', 'Caption 5% a_b', ['Model', 'Acc.', 'Training'],
                      [['luna_16', '50.0 ± 1.0', '1500/5000 | 200/62500'], ['x', '—', '']],
                      groups=[0, 1], notes=['a note'])


def test_markdown_keeps_a_pipe_inside_its_cell_and_parses_back():
  text = tables.markdown(example())
  parsed = tables.parse_markdown(text)
  assert len(parsed) == 1
  assert parsed[0]['header'] == ['Model', 'Acc.', 'Training']
  assert parsed[0]['rows'][0] == ['luna_16', '50.0 ± 1.0', r'1500/5000 \| 200/62500']
  assert text.startswith('Caption 5% a_b\n\n| Model') and text.endswith('a note\n')


def test_parse_refuses_a_row_with_more_cells_than_its_header():
  with pytest.raises(ValueError, match='line 4: 4 cells under a header of 3'):
    tables.parse_markdown('| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |\n| 1 | 2 | 3 | 4 |\n')


def test_a_row_of_the_wrong_width_is_refused_when_built():
  with pytest.raises(ValueError, match='row 0 has 2 cells for 3 columns'):
    tables.Table('t', '', ['a', 'b', 'c'], [['1', '2']])


def test_latex_escapes_and_rules_between_groups():
  text = tables.latex(example())
  assert r'Caption 5\% a\_b' in text and r'luna\_16 & 50.0 $\pm$ 1.0' in text
  assert r'x & -- &  \\' in text
  assert text.count(r'\midrule') == 2  # under the header, between the two groups
  assert r'\begin{tabular}{lrr}' in text


def test_csv_rows_and_files(tmp_path):
  table = example()
  rows = list(csv.reader(io.StringIO(tables.csv_text(table))))
  assert rows == [table.header, *table.rows]
  paths = tables.write(table, tmp_path)
  assert [p.name for p in paths] == ['t.md', 't.tex', 't.csv']
  assert paths[0].read_text() == tables.markdown(table)
