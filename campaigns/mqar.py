"""MQAR's full grid, Zoology's Figure 2 (docs/mqar.md), causal as Zoology: every registry model
with a causal form (spt.causal_models()), three seeds, a cell per (L, N) x width x learning rate:
4 x 4 x 4 = 64 cells, each run as in Zoology (its batch and 64 epochs per L). With the registry's
10 causal models: 640 groups, 1,920 runs. A GPU or cluster job (Slurm: add --launcher slurm and
its flags, docs/campaign.md); its bidirectional twin is campaigns/mqar_bidirectional.py.

  python -m lra_luna.campaign campaigns/mqar.py --dir runs/mqar
  python -m lra_luna.report runs/mqar
"""

import numpy as np

from lra_luna import campaign
from lra_luna import spt

# Figure 2's (L, N) (their stored config comments out (512, 64)) and Zoology's batch per L (their
# configs: 512 up to L = 128, 256 at L = 256, 128 at L = 512), each trained 64 epochs of the
# 100,000 examples as theirs: 12,500 steps up to L = 128, which run records list as fewer than
# configs/mqar.py's 25,000 (its L = 256 run), and 50,000 at L = 512.
LENGTHS = ((64, 4, 512), (128, 8, 512), (256, 16, 256), (512, 64, 128))
WIDTHS = (64, 128, 256, 512)  # model.dim; 1 head (divides any width), 2 layers, ffn 128 kept
LEARNING_RATES = np.logspace(-4, -2, 4)  # 1e-4, 4.6e-4, 2.2e-3, 1e-2
EPOCHS, EXAMPLES = 64, 100_000


def cell(length: int, pairs: int, batch: int, width: int, lr: float) -> dict:
  return {'name': f'L{length}_N{pairs}_D{width}_lr{lr:.1e}',
          'overrides': [f'max_length={length}', f'mqar.num_kv_pairs={pairs}',
                        f'model.dim={width}', f'learning_rate={float(lr)!r}',
                        f'batch_size={batch}',
                        f'num_train_steps={EPOCHS * EXAMPLES // batch}']}


def get_config():
  c = campaign.base_spec()
  c.name = 'mqar'
  c.tasks = ['mqar']
  c.models = spt.causal_models()
  c.heads = []                             # MQAR predicts at the query positions (no pooling)
  c.seeds = [0, 1, 2]
  c.protocol = 'lra'
  c.variant = ''                           # causal (configs/mqar.py's default, Zoology's)
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.cells = [cell(length, pairs, batch, width, lr) for length, pairs, batch in LENGTHS
             for width in WIDTHS for lr in LEARNING_RATES]
  c.profile.enabled = False                # Table 2 belongs to the LRA tasks
  return c
