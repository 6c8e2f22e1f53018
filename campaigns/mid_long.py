"""The mid size trained long enough to read the whole input (docs/mid.md): ListOps-mid at the word
long, 25,600 steps (41 epochs) instead of the mid config's 1,600, where S4D and S5 pass majority +
20 and the probe finds them reading past the first tokens; the SSMs of the core set, S5
self-pretrained for as many steps (the word spt), and the Transformer, whose group is hours a seed
on a 2-core CPU (a GPU's job, docs/gpu.md). Resumable: rerun the command.

  python -m lra_luna.campaign campaigns/mid_long.py --dir runs/mid_long
  python -m lra_luna.report runs/mid_long --checkpoint best   # the groups and their orderings
  python -m lra_luna.probe runs/mid_long/listops/s5 --windows 1,52,75,600

On a 2-core CPU one seed at a time ran faster than five vmapped for S5 (16 steps/s a seed against
1.4 for the five, docs/mid.md); the same groups seed by seed, into the same folders:

  python -m lra_luna.sweep --config configs/listops.py:s5,mid,long --seeds 0,1,2,3,4 \
      --mode sequential --sweep_dir runs/mid_long --override progress_bar=False
"""

from lra_luna import campaign
from lra_luna import registry

MODELS = ['s5', 's4d', 'lru', 's5' + registry.SPT_SUFFIX, 'transformer']


def get_config():
  c = campaign.base_spec()
  c.name = 'mid_long'
  c.tasks = ['listops']
  c.models = MODELS
  c.heads = []                             # each mid config's own head
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = 'mid,long'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # Table 2 belongs to the full sizes
  return c
