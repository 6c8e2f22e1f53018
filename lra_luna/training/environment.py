"""Where a run's numbers were computed: results.json's `environment` record (the code's commit,
the processor, the accelerator, the JAX and Flax versions), so that a number copied into a
document names its commit and machine without a second note."""

import functools
import pathlib
import platform
import subprocess

import flax
import jax

import lra_luna


def cpu_name() -> str:
  """The processor's model name (/proc/cpuinfo), else what `platform` knows."""
  cpuinfo = pathlib.Path('/proc/cpuinfo')
  names = [line.split(':', 1)[1].strip() for line in
           (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
           if line.startswith('model name')]
  return names[0] if names else (platform.processor() or platform.machine())


def git_commit(folder) -> tuple[str | None, bool]:
  """(HEAD's commit of the git checkout `folder`, whether its tracked files differ from it);
  (None, False) outside a git checkout or without git."""
  def git(*args):
    return subprocess.run(['git', '-C', str(folder), *args], capture_output=True, text=True,
                          timeout=30, check=True).stdout.strip()
  try:
    commit = git('rev-parse', 'HEAD')
    dirty = bool(git('status', '--porcelain', '--untracked-files=no'))
  except (OSError, subprocess.SubprocessError):
    return None, False
  return commit, dirty


@functools.cache
def environment_record() -> dict:
  """results.json's `environment`: the commit of the checkout lra_luna runs from (`dirty` when
  its tracked files differ from that commit; None for an installed package), the processor, the
  first device's platform and kind, the device count and the library versions. A resumed run
  records the process that finished it."""
  commit, dirty = git_commit(lra_luna.CHECKOUT) if lra_luna.CHECKOUT else (None, False)
  device = jax.devices()[0]
  return {'commit': commit, 'dirty': dirty, 'cpu': cpu_name(), 'platform': device.platform,
          'device_kind': device.device_kind, 'device_count': jax.device_count(),
          'jax': jax.__version__, 'flax': flax.__version__}
