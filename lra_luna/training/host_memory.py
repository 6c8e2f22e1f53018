"""glibc's allocator told to keep freed blocks in the process, for steps that allocate the same
large buffers at every call, and the platform JAX will start on, decided without starting it
(the CPU settings are for the CPU only). No JAX here: the PyTorch workers of benchmarks/peers.py
call it too, so that every side of a comparison runs with the same allocator setting."""

import ctypes
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
NO_LIMIT = -1  # mallopt takes a C int; -1 becomes SIZE_MAX: no block is mapped, none trimmed.


def keep_freed_blocks_in_heap() -> None:
  """Serves every block from the heap and never returns freed heap memory to the kernel, so a
  block freed at the end of one step is reused by the next instead of being mapped afresh (a
  page fault, and the kernel's zeroing, per 4 KiB page). Only for allocations made on a thread
  that uses glibc's main heap (a thread's own heap holds at most 64 MiB and maps anything
  larger whatever the thresholds). Linux with glibc only; elsewhere it does nothing."""
  if not sys.platform.startswith('linux'):
    return
  mallopt = getattr(ctypes.CDLL(None), 'mallopt', None)
  if mallopt is not None:
    mallopt(M_MMAP_THRESHOLD, NO_LIMIT)
    mallopt(M_TRIM_THRESHOLD, NO_LIMIT)


def one_heap_for_every_thread() -> bool:
  """On a CPU, glibc's main heap for every thread of this process and of the processes it
  starts (MALLOC_ARENA_MAX=1, unless the environment sets it); whether it did. A thread with a
  heap of its own (an arena) holds at most 64 MiB there and maps larger blocks afresh whatever
  keep_freed_blocks_in_heap says, and XLA's worker threads allocate a step's temporaries: on the
  quick MQAR Transformer (256 tokens, batch 64) that was 73,000 page faults a step, 3.4 steps/s
  against 3.9 on one heap (2-core Xeon). Call it first, before numpy or JAX start threads: an
  arena that a thread holds stays its own. Linux with glibc, planned platform 'cpu' only."""
  if (not sys.platform.startswith('linux') or 'MALLOC_ARENA_MAX' in os.environ
      or planned_platform(os.environ.get('JAX_PLATFORMS')) != 'cpu'):
    return False
  os.environ['MALLOC_ARENA_MAX'] = '1'  # Read by glibc when a child process starts.
  mallopt = getattr(ctypes.CDLL(None), 'mallopt', None)
  return mallopt is not None and mallopt(M_ARENA_MAX, 1) == 1


# JAX_PLATFORMS names -> the platform their devices report.
PLATFORM_ALIASES = {'cuda': 'gpu', 'rocm': 'gpu'}


def accelerator_plugins() -> list[str]:
  """The accelerator back ends installed for JAX, found as JAX finds them but without loading
  them: modules of the `jax_plugins` namespace (jax-cuda12-plugin, ...), the `jax_plugins`
  entry points, and libtpu (the TPU back end)."""
  found = []
  if importlib.util.find_spec('jax_plugins') is not None:
    import jax_plugins  # pylint: disable=g-import-not-at-top  # a namespace package: no code
    found += [name for _, name, _ in pkgutil.iter_modules(jax_plugins.__path__)]
  found += [entry.name for entry in importlib.metadata.entry_points(group='jax_plugins')]
  if importlib.util.find_spec('libtpu') is not None or os.environ.get('TPU_LIBRARY_PATH'):
    found.append('libtpu')
  return sorted(set(found))


def planned_platform(jax_platforms: str | None) -> str:
  """The platform JAX's default backend will be, decided without starting any backend (so that
  no process claims a GPU to find out): the first entry of `jax_platforms` (jax.config's
  jax_platforms, which JAX_PLATFORMS sets) where it is set ('cuda' and 'rocm' are 'gpu');
  else 'cpu' where no accelerator back end is installed (accelerator_plugins); else
  'accelerator', unknown until a backend starts (one may be there)."""
  first = (jax_platforms or '').split(',')[0].strip().lower()
  if first:
    return PLATFORM_ALIASES.get(first, first)
  return 'accelerator' if accelerator_plugins() else 'cpu'
