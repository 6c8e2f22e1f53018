"""The paper's Table 1 and Table 3 grid, and Table 2: five LRA tasks x every model of the Luna
paper's Table 1 (the Transformer, the ten LRA baselines, Luna-16/128/256: registry.table1_models())
x five seeds, [CLS] heads for every model and mean-pooled P for Luna.

  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/paper_table1          # local GPUs
  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/paper_table1 \\
      --launcher slurm --partition gpu --gpus_per_job 1 --time_min 1440              # Slurm

Protocol 'lra' (LRA's steps and batch sizes, configs/<task>.py); the same grid on the Luna
authors' protocol is campaigns/paper_table1_authors.py. Path-X is left out, as in the papers'
averages.
"""

from lra_luna import campaign
from lra_luna import registry


def get_config():
  c = campaign.base_spec()
  c.name = 'paper_table1'
  c.tasks = ['listops', 'text', 'retrieval', 'image', 'pathfinder']
  c.models = registry.table1_models()
  c.heads = ['cls', 'mean_p']              # mean_p runs for the Luna models only (Table 3)
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = ''
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  # Table 2: the paper's setting (byte-level Text, batch 32, lengths 1K-4K), on the jobs' device.
  c.profile.config = 'configs/text.py'
  c.profile.lengths = [1024, 2048, 3072, 4096]
  c.profile.batch_size = 32
  return c
