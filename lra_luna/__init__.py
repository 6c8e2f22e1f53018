"""lra_luna: Luna (Ma et al., NeurIPS 2021) and baselines on the Long Range Arena, in JAX/Flax NNX.

The package is laid out by layer: `models/` (attention, blocks, encoder, heads, plug-ins),
`datasets/` (readers, generators, input pipeline), `training/` (loop, steps, checkpoints,
metrics, run folder), and the tools on top (`evaluate`, `predict`, `profile`, `sweep`, `report`).
"""

import importlib
import pathlib

# The source checkout this package runs from (a clone, or `pip install -e .`), or None when it is
# installed on its own (`pip install .`): the task configs and the default data root live there.
_PARENT = pathlib.Path(__file__).resolve().parent.parent
CHECKOUT = (_PARENT if (_PARENT / 'configs').is_dir() and (_PARENT / 'pyproject.toml').is_file()
            else None)

# Modules that lived at the top of the package before the layout by layer. Plug-ins written then
# (`from lra_luna import attention`) keep working; the modules load only when asked for, so that
# tools such as `report` never import JAX.
_MOVED = {'attention': 'lra_luna.models.attention',
          'baselines': 'lra_luna.models.attention.baselines',
          'causal': 'lra_luna.models.attention.causal_luna',
          'layers': 'lra_luna.models.nn.layers',
          'plugins': 'lra_luna.models.plugins'}


def __getattr__(name: str):
  if name in _MOVED:
    return importlib.import_module(_MOVED[name])
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
