"""A CPU campaign: quick configs, two tasks, two models, two seeds (2-core CPU, under 20 minutes).

  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick

Both tasks' quick sets are generated on first use (ListOps expressions, Pathfinder images), so it
needs no download. Its report says it is cut short (quick configs, fewer steps and seeds).
"""

from lra_luna import campaign


def get_config():
  c = campaign.base_spec()
  c.name = 'quick'
  c.tasks = ['listops', 'pathfinder']
  c.models = ['transformer', 'luna16']
  c.heads = ['cls']
  c.seeds = [0, 1]
  c.protocol = 'lra'
  c.variant = 'quick'
  c.overrides = ['progress_bar=False']   # job logs are files: no progress bar
  # Table 2 at the quick configs' scale (ListOps quick model), a few timed steps.
  c.profile.config = 'configs/listops.py:quick'
  c.profile.lengths = [64, 128]
  c.profile.batch_size = 16
  c.profile.repeats = 5
  c.profile.warmup = 1
  return c
