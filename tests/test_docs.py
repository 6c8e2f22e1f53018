"""The user documents are guides: README.md and docs/*.md at most 350 lines each, and none of
README, docs or benchmarks speaks of how the suite is developed (the phrases below)."""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 350
DOCS = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
PRODUCT_FILES = DOCS + sorted(p for p in (REPO / 'benchmarks').glob('*') if p.is_file())

# Phrases of the development process, matched case-insensitively as whole words (so that an
# identifier such as gpu_session or a word such as "carry no positions" does not match).
DEVELOPMENT_PHRASES = ('session', 'sessions', 'lent', 'borrowed', 'engineer', 'engineers',
                       'device time', 'device tool', '`carry`', 'carry:', 'budget_left',
                       'working day', 'four other', '.mirror', 'stored copy')
# The device tool's output folder; in a script $OUT may be the script's own variable.
MARKDOWN_ONLY_PHRASES = ('$OUT',)


def phrase_pattern(phrase: str) -> re.Pattern:
  """`phrase` as a whole word: no word character directly before or after it."""
  return re.compile(r'(?<!\w)' + re.escape(phrase) + r'(?!\w)', re.IGNORECASE)


def development_talk(text: str, markdown: bool = True) -> list[tuple[int, str]]:
  """(line number, phrase) of every development phrase in `text` (a Markdown document's, or a
  script's: `markdown` False)."""
  phrases = DEVELOPMENT_PHRASES + (MARKDOWN_ONLY_PHRASES if markdown else ())
  patterns = [(phrase, phrase_pattern(phrase)) for phrase in phrases]
  return [(number, phrase) for number, line in enumerate(text.splitlines(), 1)
          for phrase, pattern in patterns if pattern.search(line)]


def test_the_phrase_matcher_finds_whole_words_only():
  found = development_talk('a lent GPU\nfrom the device tool\nOne Session, $OUT/x\n'
                           'gpu_session.sh, excellent, carry no positions, sessions_dir\n'
                           'name it in `carry`')
  assert found == [(1, 'lent'), (2, 'device tool'), (3, 'session'), (3, '$OUT'), (5, '`carry`')]
  assert development_talk('mkdir -p "$OUT"', markdown=False) == []


@pytest.mark.parametrize('path', DOCS, ids=lambda p: p.name)
def test_each_document_is_at_most_350_lines(path):
  lines = len(path.read_text().splitlines())
  assert lines <= MAX_LINES, f'{path.relative_to(REPO)}: {lines} lines, over {MAX_LINES}'


@pytest.mark.parametrize('path', PRODUCT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_document_speaks_of_how_the_suite_is_developed(path):
  found = development_talk(path.read_text(errors='replace'), markdown=path.suffix == '.md')
  assert not found, '; '.join(f'{path.relative_to(REPO)}:{number}: "{phrase}"'
                              for number, phrase in found)


# A Markdown link or image to a file of the repository: [text](path) or ![alt](path), without a
# scheme (http:, mailto:) or an in-page anchor alone.
LOCAL_LINK = re.compile(r'\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s#]+)(?:#[^)]*)?\)')


def test_the_link_pattern_finds_local_files_only():
  text = '[a](docs/x.md) ![b](fig.png) [c](https://x.org/y.md) [d](#top) [e](y.md#part)'
  assert LOCAL_LINK.findall(text) == ['docs/x.md', 'fig.png', 'y.md']


@pytest.mark.parametrize('path', DOCS, ids=lambda p: p.name)
def test_every_local_link_of_a_document_names_a_file_that_exists(path):
  missing = [target for target in LOCAL_LINK.findall(path.read_text())
             if not (path.parent / target).exists()]
  assert not missing, f'{path.relative_to(REPO)} links to missing files: {missing}'
