"""The positions ablation (issue 39; Miralles-González et al. 2025, arXiv 2501.14850): the
attention models of the Luna paper's Table 1 grid with their learned absolute positions and with
rotary positions (RoFormer) instead, on the five LRA tasks, five seeds, [CLS] heads. Luna-16/128/256
and Linformer, Synthesizer take no rotary positions (docs/positions.md) and run once, as the
reference.

  python -m lra_luna.campaign campaigns/positions.py --dir runs/positions
  python -m lra_luna.probe runs/positions         # how much of each input the models use

The report gives Table 1 with a `+rotary` row under each model, and the positions table
(positions.md: learned vs rotary per task and their difference). Protocol 'lra'; set
`c.variant = 'quick'` for the 2-core CPU variant (ListOps and Pathfinder quick sets).
"""

from lra_luna import campaign
from lra_luna import registry


def get_config():
  c = campaign.base_spec()
  c.name = 'positions'
  c.tasks = ['listops', 'text', 'retrieval', 'image', 'pathfinder']
  models = registry.table1_models()
  rotary = set(registry.rotary_models())
  c.models = [name for model in models
              for name in [model] + ([model + registry.ROTARY_SUFFIX] if model in rotary else [])]
  c.heads = ['cls']
  c.seeds = [0, 1, 2, 3, 4]
  c.protocol = 'lra'
  c.variant = ''
  c.overrides = ['progress_bar=False']     # job logs are files: no progress bar
  c.profile.enabled = False                # rotary costs what its model costs: Table 2 elsewhere
  c.profile.models = models
  return c
