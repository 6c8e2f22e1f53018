"""Metric writing: TensorBoard event files (tensorboardX, no TensorFlow) and a JSON-lines file
with the same values; atomic JSON files for results and configs."""

import json
import os
import pathlib
import tempfile

METRICS_FILE = 'metrics.jsonl'


def write_json_atomically(path, data) -> None:
  """Writes JSON through a temporary file and a rename, so a reader never sees half a file."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.NamedTemporaryFile('w', dir=path.parent, suffix='.tmp', delete=False) as f:
    json.dump(data, f, indent=2, sort_keys=True)
    f.write('\n')
  os.replace(f.name, path)


def read_jsonl(path) -> list[dict]:
  path = pathlib.Path(path)
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricWriter:
  """Writes scalars to `<workdir>/metrics.jsonl` and to TensorBoard events in `<workdir>/tb/`.

  Only the writing process (process 0) should be given `enabled=True`.
  """

  def __init__(self, workdir, *, enabled: bool = True, resume_step: int | None = None):
    self.enabled = enabled
    self.jsonl_path = pathlib.Path(workdir) / METRICS_FILE
    self._tb = None
    if not enabled:
      return
    if resume_step is not None:
      # Rows past the restored checkpoint come from work that is about to be redone.
      kept = [row for row in read_jsonl(self.jsonl_path) if row['step'] <= resume_step]
      self.jsonl_path.write_text(''.join(json.dumps(row) + '\n' for row in kept))
    from tensorboardX import SummaryWriter  # Imported lazily: only the writing process needs it.
    self._tb = SummaryWriter(str(pathlib.Path(workdir) / 'tb'))

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
