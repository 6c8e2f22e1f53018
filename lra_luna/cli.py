"""What every command-line tool of the suite shares: an argparse parser whose errors are one line
naming the flag and the --help that lists them (argparse's default prints the whole usage block
first), and typed list arguments whose errors name what was wrong."""

import argparse
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


def int_list(text: str) -> list[int]:
  """'0,1,2' -> [0, 1, 2]; an argparse type, so a bad entry is reported with its flag."""
  values = []
  for item in filter(None, (s.strip() for s in text.split(','))):
    try:
      values.append(int(item))
    except ValueError:
      raise argparse.ArgumentTypeError(f'{item!r} is not an integer (expected a comma-separated '
                                       f'list of integers such as 0,1,2)') from None
  if not values:
    raise argparse.ArgumentTypeError('expected a comma-separated list of integers such as 0,1,2')
  return values


def choice_list(choices):
  """An argparse type: 'a,b' -> ['a', 'b'], each one of `choices`; an unknown entry (or none at
  all) is an error naming the valid choices, so a typo stops the tool before anything runs
  rather than filtering everything out."""
  def parse(text: str) -> list[str]:
    values = [item.strip() for item in text.split(',') if item.strip()]
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
      what = f'{unknown[0]!r} is unknown' if unknown else 'names none'
      raise argparse.ArgumentTypeError(f'{what}; valid choices: {", ".join(choices)} '
                                       '(comma-separated)')
    return values
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
