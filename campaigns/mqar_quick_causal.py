"""MQAR at the quick size, causal (as Zoology: each position reads only what precedes it): every
registry model with a causal form (spt.causal_models()), three seeds.

  python -m lra_luna.campaign campaigns/mqar_quick_causal.py --dir runs/mqar_quick_causal
  python -m lra_luna.report runs/mqar_quick_causal
"""

from lra_luna import campaign
from lra_luna import spt


def get_config():
  c = campaign.base_spec()
  c.name = 'mqar_quick_causal'
  c.tasks = ['mqar']
  c.models = spt.causal_models()
  c.heads = []                             # MQAR predicts at the query positions (no pooling)
  c.seeds = [0, 1, 2]
  c.protocol = 'lra'
  c.variant = 'quick,causal'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # Table 2 belongs to the LRA tasks
  return c
