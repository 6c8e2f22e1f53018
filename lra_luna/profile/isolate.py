"""Which device the sweep runs on, and a point in its own process.

On every platform but the CPU each point runs in a fresh Python process (a worker): the
device's peak_bytes_in_use never resets, and a point that runs out of device memory must not
take the sweep with it. The parent never claims the accelerator itself: unless JAX will start on
the CPU (host_memory.planned_platform), it asks a fresh process which device there is.

A worker gets the whole device (XLA's client memory fraction raised from JAX's default 75%, where
the user has not set it) and writes its point as JSON. A worker that dies without writing one is
classified by how it died: SIGKILL (the kernel's out-of-memory killer) or an out-of-memory
message in its last error line is OOM; anything else is a crash, recorded with that line.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile

import jax

import lra_luna
from lra_luna.models import plugins
from lra_luna.profile import measure
from lra_luna.training import host_memory

# The share of the GPU's memory XLA's allocator may take in a worker: all but what the CUDA
# context and cuDNN's workspaces need (JAX's default, 0.75, would make a point that needs 76-99%
# of the device an OOM).
WORKER_MEMORY_FRACTION = '0.95'
# The environment of every worker: the whole device, preallocated (XLA's default: one block, no
# fragmentation); the old and the new name of the fraction (XLA_PYTHON_CLIENT_MEM_FRACTION is
# deprecated in favour of XLA_CLIENT_MEM_FRACTION).
WORKER_ENVIRONMENT = {'XLA_PYTHON_CLIENT_MEM_FRACTION': WORKER_MEMORY_FRACTION,
                      'XLA_CLIENT_MEM_FRACTION': WORKER_MEMORY_FRACTION}


def device_info() -> dict:
  """The platform ('cpu', 'gpu', 'tpu'), the device's kind and the stack of this process; starts
  JAX's backend."""
  device = jax.devices()[0]
  return {'platform': device.platform, 'device_kind': device.device_kind,
          'jax_version': jax.__version__, 'cpu_count': os.cpu_count()}


def worker_memory_settings() -> dict:
  """The device-memory settings a worker runs with: the user's, where they set any of
  WORKER_ENVIRONMENT's variables, else WORKER_ENVIRONMENT (the whole device)."""
  users = {name: os.environ[name] for name in WORKER_ENVIRONMENT if name in os.environ}
  return users or dict(WORKER_ENVIRONMENT)


def worker_environment() -> dict:
  """os.environ for a worker: worker_memory_settings(), and this checkout and the current folder
  on PYTHONPATH, so the worker imports the same lra_luna and finds a plug-in module
  'package.module:Class' of this folder."""
  paths = [str(lra_luna.CHECKOUT) if lra_luna.CHECKOUT else None, os.getcwd(),
           os.environ.get('PYTHONPATH')]
  return {**os.environ, **worker_memory_settings(),
          'PYTHONPATH': os.pathsep.join(filter(None, paths))}


def probe_device_info() -> dict:
  """device_info() from a fresh process, so that this one never claims the accelerator."""
  code = ('import json; from lra_luna.profile import isolate; '
          'print(json.dumps(isolate.device_info()))')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                        env=worker_environment())
  if done.returncode:
    raise RuntimeError(f'Asking a fresh process for the device failed (exit {done.returncode}): '
                       f'{last_error_line(done.stderr)}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def sweep_device(isolate: bool | None) -> tuple[dict, bool]:
  """(device_info, whether each point runs in its own process). Isolated on every platform but
  the CPU unless `isolate` (--isolate / --no-isolate) says otherwise. Only where JAX will start
  on the CPU, or nothing is isolated, does this process start its backend to ask."""
  planned = host_memory.planned_platform(jax.config.jax_platforms)
  device = device_info() if isolate is False or planned == 'cpu' else probe_device_info()
  return device, (device['platform'] != 'cpu' if isolate is None else isolate)


# Lines that end a failed process's story: Python's exception line and XLA's fatal log lines
# ('F1125 12:00:00.000 ... Check failed: ...'). Not warnings: XLA's GPU allocator warns that it
# "ran out of memory" while autotuning, which is no failure.
ERROR_LINE = re.compile(r'^(\w+\.)*\w*(Error|Exception|Exit)\b|^F\d{4} |Check failed')


def last_error_line(stderr: str) -> str:
  """The last line of stderr that names an error, else its last line ('' where it is empty)."""
  lines = [line.strip() for line in stderr.splitlines() if line.strip()]
  errors = [line for line in lines if ERROR_LINE.search(line)]
  return (errors or lines or [''])[-1][:500]


def dead_worker_point(model_name: str, length: int, returncode: int, stderr: str) -> dict:
  """The point of a worker that died without writing one: OOM where it was killed by SIGKILL (the
  kernel's out-of-memory killer) or its last error line says out of memory; else a crash."""
  line = last_error_line(stderr)
  label = plugins.label(model_name)
  if returncode == -signal.SIGKILL:
    return measure.failed_point(label, length, 'oom',
                                f'killed by SIGKILL (the kernel\'s out-of-memory killer): {line}')
  if measure.mentions_out_of_memory(line):
    return measure.failed_point(label, length, 'oom', line)
  how = (f'killed by {signal.Signals(-returncode).name}' if returncode < 0
         else f'exit {returncode}')
  return measure.failed_point(label, length, 'crash', f'{how}: {line}' if line else how)


def worker_command(args, model_name: str, length: int, result_path,
                   objective: str = 'classification') -> list[str]:
  """`python -m lra_luna.profile` for one point, written to result_path."""
  return [sys.executable, '-m', 'lra_luna.profile', '--point_output', str(result_path),
          '--models', model_name, '--lengths', str(length), '--config', args.config,
          '--batch_size', str(args.batch_size), '--dtype', args.dtype,
          '--warmup', str(args.warmup), '--repeats', str(args.repeats),
          '--host_memory_gib', str(args.host_memory_gib),
          '--memory_only' if args.memory_only else '--no-memory_only',
          '--flops_only' if args.flops_only else '--no-flops_only', '--objective', objective,
          *(['--override', *args.override] if args.override else [])]


def profile_point_isolated(args, model_name: str, length: int,
                           objective: str = 'classification') -> dict:
  """One point in a fresh Python process: its point (ok, OOM, or a crash it caught itself), or
  dead_worker_point's where it died without writing one."""
  with tempfile.TemporaryDirectory() as tmp:
    result_path = pathlib.Path(tmp) / 'point.json'
    done = subprocess.run(worker_command(args, model_name, length, result_path, objective),
                          capture_output=True, text=True, env=worker_environment())
    if result_path.exists():
      return json.loads(result_path.read_text())
  return dead_worker_point(measure.point_label(model_name, objective), length, done.returncode,
                           done.stderr)
