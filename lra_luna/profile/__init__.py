"""The efficiency profiler, the paper's Table 2: `python -m lra_luna.profile` (flags: sweep.py).

  measure   one point in this process: its config, the real training step compiled ahead of
            time, its timed steps, memory (XLA's estimate, the device's counters) and FLOPs
  isolate   which device, and a point in its own process (every platform but the CPU), with
            out-of-memory told apart from a crash
  slopes    fitted log-log slopes against length, with their standard error
  tabulate  Table 2, the slopes and every point, through lra_luna/tables.py
  plot      scaling.png
  sweep     the sweep over models x lengths and its command line (`main`)

The names other modules use are re-exported here.
"""

from lra_luna.profile.isolate import device_info
from lra_luna.profile.isolate import profile_point_isolated
from lra_luna.profile.measure import build_step
from lra_luna.profile.measure import compiled_flops
from lra_luna.profile.measure import compiled_memory
from lra_luna.profile.measure import default_models
from lra_luna.profile.measure import load_config
from lra_luna.profile.measure import measure_point
from lra_luna.profile.measure import oom_point
from lra_luna.profile.measure import point_config
from lra_luna.profile.measure import profile_point
from lra_luna.profile.measure import step_time_spread
from lra_luna.profile.measure import TEXT_CONFIG
from lra_luna.profile.slopes import fitted_slope
from lra_luna.profile.slopes import format_slope
from lra_luna.profile.slopes import MIN_SLOPE_LENGTHS
from lra_luna.profile.sweep import length_list
from lra_luna.profile.sweep import main
from lra_luna.profile.sweep import parse_args
from lra_luna.profile.sweep import write_outputs
from lra_luna.profile.tabulate import BASELINE
from lra_luna.profile.tabulate import describe
from lra_luna.profile.tabulate import memory_key
from lra_luna.profile.tabulate import PAPER_LENGTHS
from lra_luna.profile.tabulate import relative_cell
from lra_luna.profile.tabulate import relative_rows
from lra_luna.profile.tabulate import SPREAD_WARNING
from lra_luna.training.environment import cpu_name
