"""MQAR at the quick size (docs/mqar.md): every registry model, three seeds, bidirectional (the
encoder reads the whole sequence). Its causal twin is campaigns/mqar_quick_causal.py.

  python -m lra_luna.campaign campaigns/mqar_quick.py --dir runs/mqar_quick
  python -m lra_luna.report runs/mqar_quick

The data is generated on first use (lra_luna/datasets/mqar.py); no download.
"""

from lra_luna import campaign
from lra_luna import registry

# The core set first (the models docs/mqar.md compares), then every other model.
CORE = ['transformer', 'luna16', 'luna128', 'luna256', 's5', 'lru', 's4d', 'mega']


def get_config():
  c = campaign.base_spec()
  c.name = 'mqar_quick'
  c.tasks = ['mqar']
  c.models = CORE + [m for m in registry.MODELS if m not in CORE]
  c.heads = []                             # MQAR predicts at the query positions (no pooling)
  c.seeds = [0, 1, 2]
  c.protocol = 'lra'
  c.variant = 'quick'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # Table 2 belongs to the LRA tasks
  return c
