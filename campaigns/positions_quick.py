"""The positions ablation at the quick sizes, on a 2-core CPU: quick Pathfinder and quick ListOps
(both generated on first use), the Transformer with learned and with rotary positions, Luna-16,
S4D and Mega, five seeds each (docs/positions.md gives what it measured).

  python -m lra_luna.campaign campaigns/positions_quick.py --dir runs/evidence/positions_quick
  python -m lra_luna.probe runs/evidence/positions_quick   # how much of each input they use
  python -m lra_luna.report runs/evidence                  # with campaigns/spt_quick.py's runs

Each model keeps its quick config's own head (Transformer and Luna [CLS], S4D and Mega mean).
"""

from lra_luna import campaign
from lra_luna import registry


def get_config():
  c = campaign.base_spec()
  c.name = 'positions_quick'
  c.tasks = ['pathfinder', 'listops']
  c.models = ['transformer', 'transformer' + registry.ROTARY_SUFFIX, 'luna16', 's4d', 'mega']
  c.heads = []                             # each quick config's own head
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = 'quick'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # speed is Table 2's business (campaigns/quick.py)
  return c
