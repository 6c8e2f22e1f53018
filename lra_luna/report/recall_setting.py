"""The setting of an MQAR run (report/recall.py's rows, report/runs.py's duplicate check): the
model, causal or not, L, N, width, Luna's P and the learning rate, from its config.json."""

import dataclasses
import functools
import json
import pathlib

from lra_luna import config_lib
from lra_luna.training import run_folder

TASK = 'mqar'
LUNA_ATTENTION = 'luna'     # model.attention of the Luna models: P is part of their setting


@dataclasses.dataclass(frozen=True)
class Setting:
  """What one MQAR row trained: the model and its data, width and learning rate."""
  model: str
  causal: bool
  length: int        # L: config max_length
  pairs: int         # N: mqar.num_kv_pairs
  dim: int           # D: model.dim
  pack: int | None   # P: model.pack_length of a Luna model; None for any other
  lr: float

  def words(self) -> str:
    pack = '' if self.pack is None else f' P={self.pack}'
    return (f"{'causal' if self.causal else 'bidirectional'} L={self.length} N={self.pairs} "
            f'D={self.dim}{pack} lr={self.lr:g}')

  def label(self) -> str:
    return self.model + (' (causal)' if self.causal else '')

  def order(self) -> tuple:
    """Models in config_lib.MODELS order, then L, N, D, P, learning rate."""
    models = list(config_lib.MODELS)
    rank = models.index(self.model) if self.model in models else len(models)
    return ((rank, self.model), self.causal, self.length, self.pairs, self.dim, self.pack or 0,
            self.lr)


@functools.lru_cache(maxsize=None)
def read_config(path: pathlib.Path) -> dict:
  """A finished run's config.json, read once (runs.py's duplicate check and the rows ask)."""
  return json.loads(path.read_text())


def setting_of(result: dict) -> Setting:
  """The setting of an MQAR run, from its results.json and the config.json beside it."""
  path = pathlib.Path(result['workdir']) / run_folder.CONFIG_FILE
  try:
    config = read_config(path)
    model = config['model']
    pack = int(model['pack_length']) if model.get('attention') == LUNA_ATTENTION else None
    return Setting(result['model'], bool(result.get('causal', model.get('causal', False))),
                   int(config['max_length']), int(config['mqar']['num_kv_pairs']),
                   int(model['dim']), pack, float(config['learning_rate']))
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'{path}: an MQAR run is reported by the L, N, D, P and learning rate of '
                     f'its config.json, which is missing or unreadable ({type(e).__name__}: '
                     f'{e}).') from None
