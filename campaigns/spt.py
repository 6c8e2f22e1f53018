"""The paper's Table 1 grid with self-pretraining (SPT; Amos, Berant and Gupta, ICLR 2024;
docs/spt.md): the tasks, models and seeds of campaigns/paper_table1.py, each run pretrained on
its task's training inputs (the word `spt`) before it fine-tunes; the five seeds of a group share
one pretraining (config.pretraining.seed 0, as the authors fine-tune from one checkpoint).

  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/spt_grid/scratch
  python -m lra_luna.campaign campaigns/spt.py --dir runs/spt_grid/spt
  python -m lra_luna.report runs/spt_grid    # table_spt: from scratch beside SPT

The two campaigns are the two columns of the comparison; the report over their common folder
puts each model from scratch (`<model>`) beside the same self-pretrained (`<model>+spt`).
"""

from lra_luna import campaign
from lra_luna import registry


def get_config():
  c = campaign.base_spec()
  c.name = 'spt'
  c.tasks = ['listops', 'text', 'retrieval', 'image', 'pathfinder']
  c.models = registry.table1_models()
  c.heads = ['cls']
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = 'spt'                        # configs/<task>.py:<model>,spt
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.config = 'configs/text.py'     # Table 2 as paper_table1.py's
  c.profile.lengths = [1024, 2048, 3072, 4096]
  c.profile.batch_size = 32
  return c
