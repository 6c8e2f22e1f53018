"""Self-pretraining at the quick sizes, on a 2-core CPU: quick Pathfinder and quick ListOps, the
Transformer, Luna-16 and S4D, five seeds each, every run pretrained on its task's training inputs
first (one pretraining per model and task, seed 0, shared by the five fine-tuning seeds).

  python -m lra_luna.campaign campaigns/spt_quick.py --dir runs/evidence/spt_quick
  python -m lra_luna.campaign campaigns/positions_quick.py --dir runs/evidence/positions_quick
  python -m lra_luna.report runs/evidence     # table_spt: from scratch beside SPT

The from-scratch column is campaigns/positions_quick.py's learned-position runs of the same
models (the same quick configs and heads); docs/spt.md gives what it measured.
"""

from lra_luna import campaign


def get_config():
  c = campaign.base_spec()
  c.name = 'spt_quick'
  c.tasks = ['pathfinder', 'listops']
  c.models = ['luna16', 's4d', 'transformer']
  c.heads = []                             # each quick config's own head, as the scratch runs
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = 'quick,spt'
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False
  return c
