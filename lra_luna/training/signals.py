"""Stopping a run by SIGINT or SIGTERM with one true line (`Interrupted`): while the data is
read, the model built or the final evaluation runs, at once (nothing of them is kept); in
training, after the current step, with a checkpoint at that step; during a checkpoint write,
after it; during a validation pass, after the current batch (`evaluation`), with a checkpoint at
that step whose validation runs again on resume. A second signal stops the process at once.
The loop (train.py) enters each phase through `StopSignals.enter`.
"""

import os
import signal
import sys
import threading
import time

from lra_luna import console
from lra_luna.training import run_folder

# Tests: a phase name (data, model, compile, validate, checkpoint, final); the run waits there
# (at most PAUSE_S) for a signal, so that a signal can be sent in that phase.
PAUSE_ENV = 'LRA_LUNA_PAUSE_IN'
PAUSE_S = 120


class StopRequested(KeyboardInterrupt):
  """A signal asked the run to stop where it is; train_seeds turns it into Interrupted."""

  def __init__(self, signal_name: str):
    super().__init__(signal_name)
    self.signal_name = signal_name


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM stopped the run: str() is `<SIGNAL>: stopped <what was running>, <what is
  saved>`. A KeyboardInterrupt, so that callers that go on after an error (sweep) stop too."""

  def __init__(self, signal_name: str, doing: str, saved: str, step: int | None = None,
               saved_step: int | None = None):
    super().__init__(f'{signal_name}: stopped {doing}, {saved}')
    self.signal_name, self.step, self.saved_step = signal_name, step, saved_step
    self.doing, self.saved = doing, saved

  def in_phase(self, phase: str) -> 'Interrupted':
    """The same stop, its line naming the phase of a self-pretrained run it stopped in."""
    return Interrupted(self.signal_name, f'in {phase} {self.doing}', self.saved, self.step,
                       self.saved_step)


def stopped_in(phase: str, config, runs, stop, run):
  """run() of one phase of a self-pretrained run; a signal's line names the phase."""
  try:
    try:
      return run()
    except StopRequested as e:
      raise Interrupted(e.signal_name, stop.doing(config), saved_on_disk(runs),
                        saved_step=run_folder.saved_step(runs[0].workdir, 'latest')) from None
  except Interrupted as e:
    raise e.in_phase(phase) from None


def evaluation(evaluate, state, arrays, monitor, stop, desc: str) -> dict:
  """evaluate(state, arrays) with its progress shown by the monitor; StopRequested after the
  current batch once a signal is recorded."""
  progress = None

  def on_batch(done: int, total: int) -> None:
    nonlocal progress
    if progress is None:
      progress = monitor.evaluation_progress(desc, total)
    progress.update(1)
    if done == total or stop.signal_name:
      progress.close()
    if stop.signal_name:
      raise StopRequested(stop.signal_name)

  try:
    return evaluate(state, arrays, on_batch)
  finally:
    if progress is not None:
      progress.close()


def saved_on_disk(runs) -> str:
  """What the run folder holds, for the line of a run stopped outside the training loop."""
  workdir = runs[0].workdir
  latest = run_folder.saved_step(workdir, 'latest')
  if latest is None:
    return 'no checkpoint saved yet'
  best = run_folder.saved_step(workdir, 'best')
  saved = f'latest checkpoint at step {latest}' + (f', best at step {best}' if best else '')
  if latest == runs[0].config.num_train_steps:
    written = all((run.workdir / run_folder.RESULTS_FILE).exists() for run in runs)
    saved += f'; results.json {"written" if written else "not written"}'
  return saved


def pause_if_asked(phase: str, stop=None) -> None:
  """Waits here (up to PAUSE_S) for a signal when $LRA_LUNA_PAUSE_IN names this phase (tests)."""
  if os.environ.get(PAUSE_ENV) != phase:
    return
  console.say(f'pausing in phase {phase} (${PAUSE_ENV})', err=True)
  stop = stop or StopSignals.active
  deadline = time.time() + PAUSE_S
  while time.time() < deadline and not (stop and stop.signal_name):
    time.sleep(0.01)


# What each phase's line says was running when it stopped at once (`StopSignals.doing`).
PHASES = {
    'data': 'while reading the data',
    'model': 'while building the model and restoring its checkpoint',
    'final': 'during the final evaluation (training finished at step {steps})',
    'done': 'after the final results',
    'start': 'while starting',
}


class StopSignals:
  """While active, SIGINT and SIGTERM stop the run. In a phase entered `immediate` (nothing of it
  is worth keeping: data, model, final evaluation) the handler raises StopRequested at once;
  otherwise (steps, validation, checkpoint writes) it only records the signal's name and the
  loop stops at its next safe point. A second signal stops the process at once, unsaved."""

  SIGNALS = (signal.SIGINT, signal.SIGTERM)
  active = None  # the StopSignals in effect (pause_if_asked reads it)

  def __init__(self):
    self.signal_name = None
    self.phase, self.immediate = 'start', True
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():  # Handlers live on the main thread.
      self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
    StopSignals.active = self
    return self

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    StopSignals.active = None

  def enter(self, phase: str, immediate: bool) -> None:
    """Starts `phase`; a signal recorded before an immediate phase stops the run now."""
    if immediate and self.signal_name:
      raise StopRequested(self.signal_name)
    self.phase, self.immediate = phase, immediate
    pause_if_asked(phase, self)

  def doing(self, config) -> str:
    return PHASES.get(self.phase, 'while starting').format(steps=config.num_train_steps)

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    if self.signal_name is not None:
      sys.stderr.write(f'error: second {name}: stopped at once, without saving.\n')
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.signal_name = name
    if self.immediate:
      raise StopRequested(name)

