"""python -m lra_luna.report SWEEP_DIR_OR_RECORD.csv [--size S] [--record FILE]
   [--checkpoint best|last] [--profile FILE] [--out_dir DIR]"""

import sys

from lra_luna.report.command import main

sys.exit(main())
