"""MQAR at the quick size, causal (as Zoology: each position reads only what precedes it): every
registry model with a causal form (spt.causal_models()), three seeds; otherwise
campaigns/mqar_quick.py.

  python -m lra_luna.campaign campaigns/mqar_quick_causal.py --dir runs/mqar_quick_causal
  python -m lra_luna.report runs/mqar_quick_causal
"""

import pathlib
import runpy

from lra_luna import spt

BIDIRECTIONAL = runpy.run_path(str(pathlib.Path(__file__).with_name('mqar_quick.py')))


def get_config():
  c = BIDIRECTIONAL['get_config']()
  c.name = 'mqar_quick_causal'
  c.models = spt.causal_models()
  c.variant = 'quick,causal'
  return c
