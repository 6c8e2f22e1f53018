"""What every command-line tool of the suite shares: an argparse parser whose errors are one line
naming the flag and the --help that lists them (argparse's default prints the whole usage block
first), and typed list arguments whose errors name what was wrong."""

import argparse
import difflib
import sys
import textwrap


class ArgumentParser(argparse.ArgumentParser):
  """argparse.ArgumentParser with one-line errors: `error: --seeds: 'x' is not an integer
  (python -m lra_luna.sweep --help lists the flags).`, exit status 2 as argparse's; its --help
  shows every default and the description without its 'Modules:' paragraph (HelpFormatter,
  user_help)."""

  def __init__(self, *args, description: str | None = None, epilog: str | None = None,
               **kwargs):
    kwargs.setdefault('formatter_class', HelpFormatter)
    super().__init__(*args, description=description and user_help(description),
                     epilog=epilog and textwrap.fill(epilog, 96), **kwargs)

  def error(self, message):
    sys.stderr.write(f'error: {message} ({self.prog} --help lists the flags).\n')
    sys.exit(2)


def list_items(text: str) -> list[str]:
  """'a, b,,c' -> ['a', 'b', 'c']: the entries of a comma-separated list flag."""
  return [item.strip() for item in text.split(',') if item.strip()]


def refuse_repeats(values: list, shown=None) -> list:
  """values unchanged when each is there once; else argparse.ArgumentTypeError in one line
  naming the repeat (`shown` gives an entry as the user wrote it, e.g. 1K for 1024). Every list
  flag of the suite's tools goes through it, so a repeat never runs twice or counts twice."""
  seen = set()
  for index, value in enumerate(values):
    if value in seen:
      what = shown[index] if shown else value
      raise argparse.ArgumentTypeError(
          f'{what!s} is given twice; give each entry once')
    seen.add(value)
  return values


def int_list(text: str, example: str = '0,1,2') -> list[int]:
  """'0,1,2' -> [0, 1, 2]; an argparse type, so a bad entry (or a repeat) is reported with its
  flag."""
  values = []
  for item in list_items(text):
    try:
      values.append(int(item))
    except ValueError:
      raise argparse.ArgumentTypeError(f'{item!r} is not an integer (expected a comma-separated '
                                       f'list of integers such as {example})') from None
  if not values:
    raise argparse.ArgumentTypeError(f'expected a comma-separated list of integers such as '
                                     f'{example}')
  return refuse_repeats(values)


def number_list(example: str, *, minimum: float = 0, integers: bool = False):
  """An argparse type: 'a,b' -> [a, b], numbers above `minimum` (whole ones with `integers`),
  each once; a bad entry is an error quoting `example`, a list the flag accepts."""
  kind = 'integers' if integers else 'numbers'
  def parse(text: str) -> list:
    values, items = [], list_items(text)
    for item in items:
      try:
        value = int(item) if integers else float(item)
      except ValueError:
        value = None
      if value is None or not value > minimum:
        raise argparse.ArgumentTypeError(f'{item!r} is no {kind[:-1]} above {minimum:g}; expected '
                                         f'comma-separated {kind} such as {example}')
      values.append(value)
    if not values:
      raise argparse.ArgumentTypeError(f'expected comma-separated {kind} such as {example}')
    return refuse_repeats(values, items)
  return parse


def closest(value, choices) -> str | None:
  """The choice nearest a misspelt value ('meanp' -> 'mean_p'), or None when none is near."""
  if not isinstance(value, str):
    return None
  close = difflib.get_close_matches(value, [str(c) for c in choices], n=1, cutoff=0.6)
  return close[0] if close else None


def choice_list(choices):
  """An argparse type: 'a,b' -> ['a', 'b'], each one of `choices` and each once; an unknown
  entry (or none at all) is an error naming the closest valid choice and all of them, so a typo
  stops the tool before anything runs rather than filtering everything out."""
  def parse(text: str) -> list[str]:
    values = list_items(text)
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
      close = closest(unknown[0], choices) if unknown else None
      hint = f' (did you mean {close!r}?)' if close else ''
      what = f'{unknown[0]!r} is unknown{hint}' if unknown else 'names none'
      raise argparse.ArgumentTypeError(f'{what}; valid choices: {", ".join(choices)} '
                                       '(comma-separated)')
    return refuse_repeats(values)
  return parse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """--help with the description as written (its examples keep their lines) and each flag's
  default where it has one and its help does not already say it (argparse's
  ArgumentDefaultsHelpFormatter would repeat it, and print None and False)."""

  def _get_help_string(self, action):
    text = action.help or ''
    default = action.default
    if (not action.option_strings or 'default' in text or default in (None, False, '', [])
        or default is argparse.SUPPRESS):
      return text
    shown = ','.join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f'{text} (default: {shown})'.strip()


def user_help(doc: str) -> str:
  """A module docstring as a tool's --help description: without its closing 'Modules: ...'
  paragraph (the code's layout, for developers)."""
  return doc.split('\nModules:')[0].rstrip() + '\n'
