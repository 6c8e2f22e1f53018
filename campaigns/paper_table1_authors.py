"""The grid of campaigns/paper_table1.py on the Luna authors' protocol (the config word `paper`,
lra_luna/protocols.py): their per-task sizes, rates, steps and batches, and each task's own head
(their [CLS] head, mean pooling of the final X for Pathfinder) rather than a fixed list.

  python -m lra_luna.campaign campaigns/paper_table1_authors.py --dir runs/paper_table1_authors
"""

import pathlib

from lra_luna import campaign


def get_config():
  c = campaign.load_spec(pathlib.Path(__file__).with_name('paper_table1.py'))
  c.name = 'paper_table1_authors'
  c.protocol = 'paper'
  c.heads = []  # each task's head under the authors' protocol
  return c
