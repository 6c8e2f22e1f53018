"""MQAR at the quick size (docs/mqar.md), causal (as Zoology: each position reads only what
precedes it): every registry model with a causal form (spt.causal_models()), three seeds. Its
bidirectional twin, every model: campaigns/mqar_quick_bidirectional.py.

  python -m lra_luna.campaign campaigns/mqar_quick.py --dir runs/mqar_quick
  python -m lra_luna.report runs/mqar_quick

The data is generated on first use (lra_luna/datasets/mqar.py); no download.
"""

from lra_luna import campaign
from lra_luna import spt

# The models docs/mqar.md compares first, then the other models with a causal form.
CORE = ['transformer', 'luna16', 'luna128', 'luna256', 's5', 'lru', 's4d', 'mega']


def get_config():
  c = campaign.base_spec()
  c.name = 'mqar_quick'
  c.tasks = ['mqar']
  c.models = CORE + [m for m in spt.causal_models() if m not in CORE]
  c.heads = []                             # MQAR predicts at the query positions (no pooling)
  c.seeds = [0, 1, 2]
  c.protocol = 'lra'
  c.variant = 'quick'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # Table 2 belongs to the LRA tasks
  return c
