"""The mid-size evidence (docs/mid.md): every registry model from scratch on ListOps-mid and
Pathfinder-mid (long inputs that need their range, trained on a 2-core CPU), plus the Transformer,
Luna-16 and S4D self-pretrained (the word spt) and the Transformer with rotary positions (the
word rotary); five seeds per group, vmapped. Resumable: rerun the same command.

  python -m lra_luna.campaign campaigns/mid.py --dir runs/mid
  python -m lra_luna.campaign campaigns/mid.py --dir runs/mid --status
  python -m lra_luna.probe runs/mid              # how much of each input the models use
  python -m lra_luna.report runs/mid --checkpoint best   # tables, groups, published orderings

Groups run one at a time (a 2-core CPU); each config's own head (the mid configs' [CLS], the
Pathfinder config's mean), as the spt and positions runs. The Luna paper's Table 3 ordering (P
head above [CLS]) needs Luna-16 with the P head beside it, a sweep into the same folder:

  python -m lra_luna.sweep --config configs/listops.py:luna16,mid --heads mean_p \
      --seeds 0,1,2,3,4 --mode vmap --sweep_dir runs/mid
"""

from lra_luna import campaign
from lra_luna import registry

# The core set first (docs/mid.md, in the order it was started), then every other model.
CORE = ['s4d', 'transformer', 'luna16', 'mega_chunk', 's5', 'lru']
SPT = ['transformer', 'luna16', 's4d']


def get_config():
  c = campaign.base_spec()
  c.name = 'mid'
  c.tasks = ['listops', 'pathfinder']
  rest = [m for m in registry.MODELS if m not in CORE]
  c.models = (CORE + ['transformer' + registry.ROTARY_SUFFIX]
              + [m + registry.SPT_SUFFIX for m in SPT] + rest)
  c.heads = []                             # each mid config's own head
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = 'mid'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # Table 2 belongs to the full sizes
  return c
