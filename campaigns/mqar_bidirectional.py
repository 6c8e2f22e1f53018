"""MQAR's full grid (campaigns/mqar.py: 64 cells of Zoology's Figure 2), bidirectional: every
registry model (the encoder reads the whole sequence), three seeds. With the registry's 20
models: 1,280 groups, 3,840 runs. A GPU or cluster job, as campaigns/mqar.py.

  python -m lra_luna.campaign campaigns/mqar_bidirectional.py --dir runs/mqar_bidirectional
  python -m lra_luna.report runs/mqar_bidirectional
"""

import pathlib
import runpy

HERE = pathlib.Path(__file__).parent
CAUSAL = runpy.run_path(str(HERE / 'mqar.py'))
QUICK = runpy.run_path(str(HERE / 'mqar_quick_bidirectional.py'))  # its models: every model


def get_config():
  c = CAUSAL['get_config']()
  c.name = 'mqar_bidirectional'
  c.models = QUICK['get_config']().models
  c.variant = 'bidirectional'
  return c
