"""Session setup: one persistent XLA compilation cache shared by every test and every
run_lra.py subprocess they start (run_env copies os.environ). Most of the suite's time is XLA
compiling the same tiny models again in new processes; a cache hit is the same executable."""

import atexit
import os
import shutil
import tempfile

_CACHE_DIR = tempfile.mkdtemp(prefix='lra_luna_test_xla_cache_')
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', _CACHE_DIR)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '1')  # only costly compiles
