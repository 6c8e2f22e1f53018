"""Metrics of a run: the writer of `metrics.jsonl` and TensorBoard events, and the monitor that the
training loop hands each step's values to (big_vision's BigVisionMetricWriter and Chrono are the
pattern): it keeps them on the device until a log step, then checks they are finite, averages,
times and writes them, and shows the progress on stderr."""

import json
import math
import pathlib
import time

import jax
import numpy as np

from lra_luna import console
from lra_luna.training import run_folder



class MetricWriter:
  """Writes scalars to `<workdir>/metrics.jsonl` and to TensorBoard events in `<workdir>/tb/`.

  Only the writing process (process 0) should be given `enabled=True`.
  """

  def __init__(self, workdir, *, enabled: bool = True, resume_step: int | None = None):
    self.enabled = enabled
    self.jsonl_path = pathlib.Path(workdir) / run_folder.METRICS_FILE
    self._tb = None
    if not enabled:
      return
    if resume_step is not None:
      # Rows past the restored checkpoint come from work that is about to be redone.
      kept = [row for row in run_folder.read_jsonl(self.jsonl_path) if row['step'] <= resume_step]
      self.jsonl_path.write_text(''.join(json.dumps(row) + '\n' for row in kept))
    from tensorboardX import SummaryWriter  # Imported lazily: only the writing process needs it.
    self._tb = SummaryWriter(str(pathlib.Path(workdir) / run_folder.TENSORBOARD_DIR))

  def write_scalars(self, step: int, scalars: dict) -> None:
    if not self.enabled:
      return
    scalars = {k: float(v) for k, v in scalars.items()}
    with self.jsonl_path.open('a') as f:
      f.write(json.dumps({'step': int(step), **scalars}) + '\n')
    for name, value in scalars.items():
      self._tb.add_scalar(name, value, int(step))
    self._tb.flush()

  def write_hparams(self, hparams: dict) -> None:
    if self.enabled:
      flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
      self._tb.add_text('config', json.dumps(flat, indent=2, sort_keys=True))
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


# Plain-line progress: the first line comes after this many steps past the compiled first one.
EARLY_TIMED_STEPS = 2


def progress_mode(config, enabled: bool) -> str:
  """'bar' (a tqdm bar, stderr is a terminal), 'lines' (one plain line per log step, stderr is a
  file or a pipe), or 'off' (config.progress_bar False, $CI set, or not the writing process)."""
  return console.progress_mode(enabled and config.progress_bar)


class TrainingMonitor:
  """The loop's one place for metrics: `step_done` after each step, `flush` at log steps.

  Per-step values stay on the device until `flush` (no sync per step); `step_done` waits only for
  the step before (one step stays in flight), so the progress counts finished steps, not queued
  ones. Speed and time left are counted from the end of the first step: the compile is not in them.
  """

  def __init__(self, config, seeds, workdirs, writers, *, schedule, enabled: bool):
    self.seeds, self.workdirs, self.writers = list(seeds), list(workdirs), writers
    self.total_steps, self.schedule = config.num_train_steps, schedule
    self.mode = progress_mode(config, enabled)
    self._pending = []    # per-step metrics since the last flush, on the device
    self._in_flight = None
    self._clock = None    # (step, time) at the end of the first step
    self._last_log = None  # (step, time) of the last flush
    self._bar = None

  def step_done(self, step: int, step_metrics) -> None:
    self._pending.append(step_metrics)
    if self._in_flight is not None:
      jax.block_until_ready(self._in_flight)
    self._in_flight = step_metrics
    if self._clock is None:
      jax.block_until_ready(step_metrics)  # The first step includes the compile.
      self._clock = self._last_log = (step, time.time())
      if self.mode == 'bar':
        from tqdm import tqdm  # pylint: disable=g-import-not-at-top
        self._bar = tqdm(total=self.total_steps, initial=step, unit='step', desc='train')
    elif self._bar is not None:
      self._bar.update(1)
    elif self.mode == 'lines' and step - 1 - self._clock[0] == EARLY_TIMED_STEPS:
      # The speed as soon as it is known, not first at log_every (minutes on a slow step).
      self._show_speed(step - 1, time.time())

  def flush(self, step: int) -> None:
    """Writes each seed's mean train metrics since the last flush; TrainingError on non-finite
    loss or gradient (the last good checkpoint is kept)."""
    if not self._pending:
      return
    values = {k: np.stack([np.asarray(v[k]) for v in jax.device_get(self._pending)], axis=1)
              for k in self._pending[0]}  # name -> [seeds, steps]
    self._pending = []
    # Steps that dynamic loss scaling skipped (float16) are counted, not averaged or refused.
    skipped = values.pop('skipped_steps', np.zeros_like(values['train_loss'])) > 0
    for i, seed in enumerate(self.seeds):
      if skipped[i].all() and values['loss_scale'][i].min() <= 1:  # Scaling cannot help.
        raise run_folder.TrainingError(
            f'Every float16 step (seed {seed}) before step {step} overflowed, down to loss scale '
            '1. The last good checkpoint is kept; train in bfloat16 or float32 '
            '(--config.model.dtype) or lower config.learning_rate, then rerun.')
      bad_steps = ~skipped[i] & ~(np.isfinite(values['train_loss'][i])
                                  & np.isfinite(values['grad_norm'][i]))
      if bad_steps.any():
        bad = int(np.argmax(bad_steps))  # the first step with a non-finite loss or gradient
        before = slice(max(bad - 5, 0), bad)
        bad_step = step - len(bad_steps) + 1 + bad
        shown = {k: [float(f'{x:.4g}') for x in values[k][i][before]]
                 for k in ('train_loss', 'grad_norm')}
        raise run_folder.TrainingError(
            f'Non-finite loss or gradient (seed {seed}) at step {bad_step}: '
            f'train_loss {values["train_loss"][i][bad]:.4g}, grad_norm '
            f'{values["grad_norm"][i][bad]:.4g}; the steps before it: train_loss '
            f'{shown["train_loss"]}, grad_norm {shown["grad_norm"]}. The last good checkpoint in '
            f'{self.workdirs[i] / run_folder.CHECKPOINTS_DIR} is kept; lower '
            'config.learning_rate or set config.grad_clip_norm, then rerun.')
    now = time.time()
    speed = (step - self._last_log[0]) / max(now - self._last_log[1], 1e-9)
    self._last_log = (step, now)
    for i, writer in enumerate(self.writers):
      rows = ~skipped[i] if not skipped[i].all() else slice(None)
      mean = {k: float(np.mean(v[i][rows])) for k, v in values.items()}
      if 'loss_scale' in values:  # The steps skipped since the last line, and the scale now.
        mean.update(skipped_steps=int(skipped[i].sum()),
                    loss_scale=float(values['loss_scale'][i, -1]))
      writer.write_scalars(step, {**mean, 'steps_per_s': speed,
                                  'learning_rate': float(self.schedule(step))})
    self._show(step, float(np.mean(values['train_loss'][~skipped] if not skipped.all()
                                   else values['train_loss'])), now)  # the mean written, over seeds

  def _show_speed(self, step: int, now: float) -> None:
    """The plain progress line of the first timed steps: speed and time left, no loss yet."""
    rate = (step - self._clock[0]) / max(now - self._clock[1], 1e-9)
    left = (self.total_steps - step) / rate if rate > 0 else math.inf
    console.say(f'train step {step}/{self.total_steps}: {rate:.2f} steps/s, '
                f'{console.format_duration(left)} left (from the first {step - self._clock[0]} '
                'steps after compiling)', err=True)

  def _show(self, step: int, loss: float, now: float) -> None:
    """The progress: the loss just written to metrics.jsonl (seed mean), speed and time left."""
    if self._bar is not None:
      self._bar.set_postfix(loss=f'{loss:.4f}', refresh=True)
    elif self.mode == 'lines':
      rate = (step - self._clock[0]) / max(now - self._clock[1], 1e-9)
      left = (self.total_steps - step) / rate if rate > 0 else math.inf
      console.say(f'train step {step}/{self.total_steps}: loss {loss:.4f}, {rate:.2f} steps/s, '
                  f'{console.format_duration(left)} left', err=True)

  def evaluation_progress(self, desc: str, num_batches: int) -> console.Progress:
    """The progress of one evaluation pass, shown as the training's: a bar below the training
    bar (removed when done), or a plain line on a long pass."""
    return console.Progress(num_batches, desc, 'batch', enabled=self.mode != 'off', leave=False)

  def write(self, step: int, index: int, scalars: dict) -> None:
    """Scalars of seed `index` (validation, test) at `step`."""
    self.writers[index].write_scalars(step, scalars)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
    for writer in self.writers:
      writer.close()
