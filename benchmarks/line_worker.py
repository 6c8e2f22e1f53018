"""A benchmark side's worker process, driven one line at a time: the driver writes a command
('step', 'stop'), the worker answers one JSON line. Shared by `cost_bound.py` and `peers.py`,
whose workers run the checkout `tree` (PYTHONPATH and LRA_LUNA_TREE), on the CPU unless
JAX_PLATFORMS says otherwise."""

import json
import os
import select
import subprocess

TIMEOUT_S = 1800  # a worker that says nothing for this long (compile included) is dead


class LineWorker:
  """A worker process started with `command` in checkout `tree`; `read` waits for its answer."""

  def __init__(self, side: str, command: list[str], tree: str):
    self.side = side
    env = dict(os.environ, PYTHONPATH=tree, LRA_LUNA_TREE=tree,
               JAX_PLATFORMS=os.environ.get('JAX_PLATFORMS', 'cpu'))
    self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, env=env)

  def read(self) -> dict:
    ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT_S)
    line = self.process.stdout.readline() if ready else ''
    if not line:
      self.process.kill()
      raise RuntimeError(f'worker {self.side} ended without an answer (exit code '
                         f'{self.process.wait()}); see its stderr above.')
    return json.loads(line)

  def send(self, command: str) -> None:
    self.process.stdin.write(command + '\n')
    self.process.stdin.flush()
