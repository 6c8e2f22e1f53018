"""MQAR at the quick size, bidirectional (the encoder reads the whole sequence): every registry
model, three seeds; otherwise campaigns/mqar_quick.py.

  python -m lra_luna.campaign campaigns/mqar_quick_bidirectional.py --dir runs/mqar_quick_bi
  python -m lra_luna.report runs/mqar_quick_bi
"""

import pathlib
import runpy

from lra_luna import registry

CAUSAL = runpy.run_path(str(pathlib.Path(__file__).with_name('mqar_quick.py')))


def get_config():
  c = CAUSAL['get_config']()
  c.name = 'mqar_quick_bidirectional'
  c.models = CAUSAL['CORE'] + [m for m in registry.MODELS if m not in CAUSAL['CORE']]
  c.variant = 'quick,bidirectional'
  return c
