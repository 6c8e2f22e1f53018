"""The one writer of the suite's messages and progress, for every tool and phase (data
generation, training, evaluation): a line goes through tqdm.write, so a progress bar on the
terminal is never broken; progress is a tqdm bar when stderr is a terminal and plain lines when
it is a file or a pipe (a bar's '\\r' updates would fill a log); off with $CI set. No JAX here.
"""

import contextlib
import math
import os
import signal
import sys
import time

LINE_INTERVAL_S = 30.0  # plain-line progress: at most one line this often (short loops: none)


def say(message: str, *, err: bool = False) -> None:
  """One line to stdout (stderr with `err`), written around any active progress bar."""
  import tqdm  # pylint: disable=g-import-not-at-top
  stream = sys.stderr if err else sys.stdout
  tqdm.tqdm.write(message, file=stream)
  stream.flush()


def progress_mode(enabled: bool = True) -> str:
  """'bar' (stderr is a terminal), 'lines' (stderr is a file or a pipe), or 'off' (not
  `enabled`, or $CI set: a CI log wants neither)."""
  if not enabled or os.environ.get('CI'):
    return 'off'
  return 'bar' if sys.stderr.isatty() else 'lines'


def format_duration(seconds: float) -> str:
  """'h:mm:ss'; '?' for an unknown (infinite) time."""
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


class Progress:
  """Progress of a long loop of `total` units: a tqdm bar on a terminal; otherwise a plain line
  (`<desc>: <done>/<total> <unit>, <h:mm:ss> left`) at most every `interval` s, so that a short
  loop writes nothing; nothing when the mode is 'off'. Use as a context manager."""

  def __init__(self, total: int, desc: str, unit: str, *, enabled: bool = True,
               initial: int = 0, leave: bool = True, interval: float = LINE_INTERVAL_S):
    self.total, self.desc, self.unit, self.done = total, desc, unit, initial
    self.mode = progress_mode(enabled)
    self.interval = interval
    self._start = self._last_line = time.time()
    self._start_done = initial
    self._bar = None
    if self.mode == 'bar':
      import tqdm  # pylint: disable=g-import-not-at-top
      self._bar = tqdm.tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave)

  def update(self, n: int = 1) -> None:
    self.done += n
    if self._bar is not None:
      self._bar.update(n)
    elif self.mode == 'lines' and time.time() - self._last_line >= self.interval:
      self._last_line = time.time()
      say(self.line(), err=True)

  def line(self) -> str:
    """The plain progress line: what is done of the total, and the time left at the mean rate."""
    elapsed = max(time.time() - self._start, 1e-9)
    rate = (self.done - self._start_done) / elapsed
    left = (self.total - self.done) / rate if rate > 0 else math.inf
    return f'{self.desc}: {self.done}/{self.total} {self.unit}, {format_duration(left)} left'

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


@contextlib.contextmanager
def one_line_on_signals(what_is_kept: str):
  """For a script's main (the data generators): SIGINT or SIGTERM stops it with one line on
  stderr, `<SIGNAL>: stopped; <what_is_kept>`, and exit status 128 + the signal's number."""
  def interrupt(signum, frame):
    del frame
    raise KeyboardInterrupt(signal.Signals(signum).name)

  previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    yield
  except KeyboardInterrupt as e:
    name = e.args[0] if e.args and e.args[0] in ('SIGINT', 'SIGTERM') else 'SIGINT'
    say(f'{name}: stopped; {what_is_kept}', err=True)
    sys.exit(128 + signal.Signals[name])
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
