"""The setting of an MQAR run (report/recall.py's rows, report/runs.py's duplicate check): the
model, causal or not, L, N, the vocabulary V where it is not Zoology's, width, Luna's P and the
learning rate, from its config.json; in a record (report/record.py) it is the row's group, its
text ('luna16 causal L=64 N=4 D=64 P=16 lr=0.003', 'transformer bidirectional L=16 N=2 V=64 D=64
lr=0.001', Setting.group), read back by Setting.from_group."""

import dataclasses
import functools
import json
import pathlib
import re

from lra_luna import config_lib
from lra_luna.training import run_folder

TASK = 'mqar'
LUNA_ATTENTION = 'luna'     # model.attention of the Luna models: P is part of their setting
CAUSALITY = {True: 'causal', False: 'bidirectional'}
ZOOLOGY_VOCAB = 8192  # configs/mqar.py's mqar.vocab_size; a group names V only where it differs
COUNT = r'[1-9]\d*'  # L, N, D and P are positive integers
NUMBER = r'(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?'  # a float's text, as repr writes it
GROUP_PATTERN = re.compile(
    rf'(?P<model>\S+) (?P<causality>causal|bidirectional) L=(?P<length>{COUNT}) '
    rf'N=(?P<pairs>{COUNT})(?: V=(?P<vocab>{COUNT}))? D=(?P<dim>{COUNT})'
    rf'(?: P=(?P<pack>{COUNT}))? lr=(?P<lr>{NUMBER})')
GROUP_FORM = ('<model> causal|bidirectional L=<int> N=<int> [V=<int>] D=<int> [P=<int>] '
              'lr=<number>')


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
  vocab: int = ZOOLOGY_VOCAB  # V: mqar.vocab_size

  def words(self) -> str:
    """'causal L=64 N=4 D=64 P=16 lr=0.003' (V where it is not Zoology's, P for Luna only;
    the learning rate's shortest exact text, so that the words read back to the same float)."""
    pack = '' if self.pack is None else f' P={self.pack}'
    return (f'{CAUSALITY[self.causal]} L={self.length} N={self.pairs}{self.vocab_words()} '
            f'D={self.dim}{pack} lr={self.lr!r}')

  def vocab_words(self, form: str = ' V={}') -> str:
    """' V=64' (or `form` with V) where V is not Zoology's 8,192; '' where it is."""
    return '' if self.vocab == ZOOLOGY_VOCAB else form.format(self.vocab)

  def group(self) -> str:
    """The setting as a record's group: the model, then its words."""
    return f'{self.model} {self.words()}'

  @classmethod
  def from_group(cls, text: str) -> 'Setting':
    """The Setting of a record's group text (Setting.group); ValueError naming the text and
    the form it should have where it does not parse."""
    match = GROUP_PATTERN.fullmatch(text)
    if not match:
      raise ValueError(f'the MQAR group {text!r} is not "{GROUP_FORM}", e.g. '
                       "'transformer causal L=64 N=4 D=64 lr=0.003'.")
    pack, vocab = match['pack'], match['vocab']
    return cls(match['model'], match['causality'] == CAUSALITY[True], int(match['length']),
               int(match['pairs']), int(match['dim']), None if pack is None else int(pack),
               float(match['lr']), ZOOLOGY_VOCAB if vocab is None else int(vocab))

  def chance(self) -> float:
    """Test accuracy (%) of guessing among the sequence's N values: 1/N."""
    return 100 / self.pairs

  def label(self, pack: int | None = None) -> str:
    """'luna16 (causal)'; with `pack`, that P after the model's name ('luna16 P=8 (causal)')."""
    return (self.model + ('' if pack is None else f' P={pack}')
            + (' (causal)' if self.causal else ''))

  def order(self) -> tuple:
    """Models in config_lib.MODELS order, then L, N, V, D, P, learning rate."""
    models = list(config_lib.MODELS)
    rank = models.index(self.model) if self.model in models else len(models)
    return ((rank, self.model), self.causal, self.length, self.pairs, self.vocab, self.dim,
            self.pack or 0, self.lr)


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
                   int(model['dim']), pack, float(config['learning_rate']),
                   int(config['mqar'].get('vocab_size', ZOOLOGY_VOCAB)))
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'{path}: an MQAR run is reported by the L, N, V, D, P and learning rate of '
                     f'its config.json, which is missing or unreadable ({type(e).__name__}: '
                     f'{e}).') from None
