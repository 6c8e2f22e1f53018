"""glibc's allocator told to keep freed blocks in the process, for steps that allocate the same
large buffers at every call. No JAX here: the PyTorch workers of benchmarks/peers.py call it too,
so that every side of a comparison runs with the same allocator setting."""

import ctypes
import sys

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
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
