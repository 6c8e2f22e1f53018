"""MQAR at the quick size (docs/mqar.md), causal (as Zoology: each position reads only what
precedes it): every registry model with a causal form (spt.causal_models()), three seeds, at two
learning rates (a cell each; the report takes the better one per model, as Zoology reports the
best of its sweep). Its bidirectional twin, every model: campaigns/mqar_quick_bidirectional.py.

  python -m lra_luna.campaign campaigns/mqar_quick.py --dir runs/mqar_quick
  python -m lra_luna.report runs/mqar_quick

The data is generated on first use (lra_luna/datasets/mqar.py); no download.
"""

from lra_luna import campaign
from lra_luna import spt

# The models docs/mqar.md compares first, then the other models with a causal form.
CORE = ['transformer', 'luna16', 'luna128', 'luna256', 's5', 'lru', 's4d', 'mega']
# The quick config's 3e-3 and 1e-3: Luna recalls on a 16-token MQAR at 1e-3 only (docs/mqar.md).
LEARNING_RATES = (3e-3, 1e-3)


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
  c.cells = [{'name': f'lr{lr:g}', 'overrides': [f'learning_rate={lr!r}']}
             for lr in LEARNING_RATES]
  c.profile.enabled = False                # Table 2 belongs to the LRA tasks
  return c
