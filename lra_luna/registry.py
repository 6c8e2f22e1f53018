"""The model registry: every model of the suite declared once, by one `Model` entry.

An entry names the config word (`configs/<task>.py:<name>`), the label of the tables, the attention
(its class, imported only when a model is built), the class's default options (LRA's values, per
task where LRA's configs differ), the heads it can pool, and the published rows the paper's
tables print for it. Every tool reads it: the config words and `config_lib.set_model`, the
model builder, the profiler's labels and Table 2 paper rows, the report's published Table 1 rows,
the campaign specs' model lists and the tests' parametrisation. Adding a baseline is its
attention class plus one `register(Model(...))` line below.

No JAX here: the config layer and `report` import this module.
"""

import dataclasses
import importlib

from lra_luna import published
from lra_luna.published import (LRA_PAPER, LRU_PAPER, LUNA_PAPER, MEGA_PAPER, S4D_PAPER,
                                S5_PAPER)

HEADS = ('cls', 'mean', 'mean_p')  # sentence representations (classifier.pool)
NON_LUNA_HEADS = ('cls', 'mean')   # 'mean_p' pools Luna's P (paper §4.1)


@dataclasses.dataclass(frozen=True)
class Model:
  """One model of the suite."""
  name: str                         # the config word, and the model's name in results
  label: str                        # its name in the tables and figures
  attention: str                    # config.model.attention: 'softmax' | 'luna' | a baseline key
  attention_class: str = ''         # baselines: 'module:Class' of the attention, built on demand
  options: dict = dataclasses.field(default_factory=dict)       # the class's options: LRA's values
  task_options: dict = dataclasses.field(default_factory=dict)  # task -> options that differ there
  pack_length: int | None = None    # Luna: the length l of P
  implementation: str = 'vanilla'   # softmax only: 'vanilla' | 'fused'
  heads: tuple = NON_LUNA_HEADS     # the heads it can pool
  table1: tuple = ()                # published Table 1 rows (published.PublishedRow)
  table2: tuple | None = None       # Luna paper Table 2: ((steps/s at 1K-4K), (memory at 1K-4K))
  # Options that keep the attention cheap in the unit tests (dim 16, 2 heads, up to 64 tokens)
  # while still exercising its structure (several blocks, several buckets).
  test_options: dict = dataclasses.field(default_factory=dict)
  # A model that is no attention: 'module:Class' of its own encoder block (classifier.py's block
  # protocol), built on demand; its options are config.model.attention_options as well.
  block_class: str = ''
  # Config fields the model always sets (field -> value; set_model applies them for any protocol):
  # what the model is, e.g. S4D's own learning rate for its SSM parameters and no positions.
  settings: dict = dataclasses.field(default_factory=dict)
  paper_protocol: str = 'luna'      # whose protocol the config word `paper` applies (protocols.py)
  # Whether config.model.positions 'rotary' (RoFormer) is defined for its attention: queries and
  # keys with positions (docs/positions.md). Luna's P, Linformer's projected keys, Synthesizer's
  # synthetic scores and S4D have none.
  rotary: bool = False

  def options_for(self, task: str) -> dict:
    """The attention options a config of `task` starts from."""
    return {**self.options, **self.task_options.get(task, {})}


MODELS: dict[str, Model] = {}


def register(model: Model) -> Model:
  """Adds `model`; its name becomes a config word and a row of every tool."""
  if model.name in MODELS:
    raise ValueError(f'Model {model.name!r} is registered twice.')
  MODELS[model.name] = model
  return model


def get(name: str) -> Model:
  """The entry of `name`; ValueError listing the valid names."""
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; valid choices: {sorted(MODELS)}.')
  return MODELS[name]


# A run of a model with rotary positions is named `<model>+rotary`, a self-pretrained one
# `<model>+spt` (both: `<model>+rotary+spt`), in results, sweep folders and report rows.
ROTARY_SUFFIX = '+rotary'
SPT_SUFFIX = '+spt'


def base_name(name: str) -> str:
  """The registry name of a run's model name: without SPT_SUFFIX and ROTARY_SUFFIX."""
  return name.removesuffix(SPT_SUFFIX).removesuffix(ROTARY_SUFFIX)


def run_model_names() -> list[str]:
  """What a campaign spec's models may name: every model, and `<model>+rotary` for those that
  take rotary positions (its runs add the config word `rotary`)."""
  return [*MODELS, *(name + ROTARY_SUFFIX for name in rotary_models())]


def label(name: str) -> str:
  """A model's table label ('Transformer + rotary' for 'transformer+rotary', '... + SPT' for a
  self-pretrained run); a name that is no entry (a plug-in's class name) as it is."""
  base = base_name(name)
  if base not in MODELS:
    return name
  rotary = name.removesuffix(SPT_SUFFIX).endswith(ROTARY_SUFFIX)
  return (MODELS[base].label + (' + rotary' if rotary else '')
          + (' + SPT' if name.endswith(SPT_SUFFIX) else ''))


def heads_of(attention: str) -> tuple:
  """The heads a model with this attention can pool ('mean_p' only where there is a P)."""
  for model in MODELS.values():
    if model.attention == attention:
      return model.heads
  return NON_LUNA_HEADS


def rotary_models() -> list[str]:
  """The models that take config.model.positions 'rotary' (their `rotary` field)."""
  return [m.name for m in MODELS.values() if m.rotary]


def takes_rotary(attention: str) -> bool:
  """Whether the models with this attention key take rotary positions (plug-ins: no)."""
  return any(m.rotary for m in MODELS.values() if m.attention == attention)


def baseline_classes() -> dict[str, str]:
  """{attention key: 'module:Class'} of every baseline attention."""
  return {m.attention: m.attention_class for m in MODELS.values() if m.attention_class}


def block_classes() -> dict[str, str]:
  """{attention key: 'module:Class'} of every model that brings its own encoder block."""
  return {m.attention: m.block_class for m in MODELS.values() if m.block_class}


def _import(spec: str):
  module, _, class_name = spec.partition(':')
  return getattr(importlib.import_module(module), class_name)


def attention_class(attention: str):
  """The class of a baseline attention key (imports its module: needs JAX)."""
  classes = baseline_classes()
  if attention not in classes:
    raise ValueError(f'Unknown attention {attention!r}; valid choices: '
                     f"{sorted(['softmax', 'luna', *classes])} or a plug-in "
                     "'path/to/file.py:Class'.")
  return _import(classes[attention])


def block_class(attention: str):
  """The block class of a model with its own block (imports its module: needs JAX)."""
  return _import(block_classes()[attention])


def options_class(attention: str):
  """The class whose CONFIG_OPTIONS and check_options govern config.model.attention_options:
  a baseline's attention or a model's own block; None for softmax, Luna and plug-ins."""
  if attention in baseline_classes():
    return attention_class(attention)
  if attention in block_classes():
    return block_class(attention)
  return None


def table1_rows() -> tuple:
  """Every published Table 1 row, in registry order."""
  return tuple(row for model in MODELS.values() for row in model.table1)


def table1_models() -> list[str]:
  """The models with a row in the Luna paper's Table 1 (its own or LRA's): the paper's
  comparison (campaigns/paper_table1.py)."""
  return [m.name for m in MODELS.values()
          if any(r.paper in (LRA_PAPER, LUNA_PAPER) for r in m.table1)]


def table2_rows() -> dict:
  """{name: ((steps/s), (memory))} of the models with a Luna paper Table 2 row."""
  return {m.name: m.table2 for m in MODELS.values() if m.table2}


def _table1(name, label, paper, values, average, average_no_retrieval, head=None, note=''):
  """A Luna paper Table 1 row (its baseline rows are LRA's Table 1; Luna added 'w/o rtl')."""
  return published.row(label, name, head, paper, 'Table 1', values, average,
                       average_no_retrieval, note)


def _baseline(name, label, attention_class, options, table1, table2=None, test_options=None,
              **fields):
  """An LRA baseline: its attention key is its name; LRA's Table 1 row."""
  row = _table1(name, label, LRA_PAPER, *table1[:3], note=table1[3] if len(table1) > 3 else '')
  return register(Model(name, label, name, attention_class, options, table1=(row,),
                        table2=table2, test_options=test_options or {}, **fields))


def _luna(length, table1, table2):
  name, label = f'luna{length}', f'Luna-{length}'
  return register(Model(name, label, 'luna', pack_length=length, heads=HEADS,
                        table1=(_table1(name, label, LUNA_PAPER, *table1, head='cls'),),
                        table2=table2))


_MODULES = 'lra_luna.models.'
# Rows in the order of the Luna paper's Table 1 (report rows follow this order); Table 2 values
# as printed there (Text, relative to the Transformer), Table 1 values as printed (averages too).
register(Model('transformer', 'Transformer', 'softmax', rotary=True, table1=(
    _table1('transformer', 'Transformer', LRA_PAPER, (36.37, 64.27, 57.46, 42.44, 71.40), 54.39,
            53.62),
    # Luna trained Retrieval 20k steps instead of LRA's 5k, hence 79 vs 57.
    _table1('transformer', 'Transformer (re-impl)', LUNA_PAPER,
            (37.11, 65.21, 79.14, 42.94, 71.83), 59.24, 54.27))))
# jax.nn.dot_product_attention: the same model; fused kernels where the backend has one.
register(Model('transformer_fused', 'Transformer (fused)', 'softmax', implementation='fused',
               rotary=True))
_baseline('local', 'Local Attention', _MODULES + 'attention.baselines:LocalAttention', {'block_size': 50},
          ((15.82, 52.98, 53.39, 41.46, 66.63), 46.06, 44.22),
          (('1.1', '1.7', '3.2', '5.3'), ('0.49', '0.29', '0.19', '0.14')),
          {'block_size': 16}, rotary=True)
# Sparse Transformer's fixed pattern (l = 50, c = 10) and Longformer's window (512): LRA's values.
_baseline('sparse_transformer', 'Sparse Trans.',
          _MODULES + 'attention.sparse_patterns:SparseTransformerAttention',
          {'block_length': 50, 'summary_columns': 10},
          ((17.07, 63.58, 59.59, 44.24, 71.71), 51.24, 49.15), None,
          {'block_length': 8, 'summary_columns': 2}, rotary=True)
_baseline('longformer', 'Longformer', _MODULES + 'attention.sparse_patterns:LongformerAttention',
          {'window': 512}, ((35.63, 62.85, 56.89, 42.22, 69.71), 53.46, 52.60), None,
          {'window': 9}, rotary=True)
_baseline('linformer', 'Linformer', _MODULES + 'attention.baselines:LinformerAttention',
          {'projected_length': 256}, ((35.70, 53.94, 52.27, 38.56, 76.34), 51.36, 51.14),
          (('1.2', '1.9', '3.7', '5.5'), ('0.44', '0.21', '0.18', '0.10')),
          {'projected_length': 8})
# Reformer: 1 hash round, 10 buckets (LRA).
_baseline('reformer', 'Reformer', _MODULES + 'attention.reformer:ReformerAttention',
          {'num_hashes': 1, 'num_buckets': 10},
          ((37.27, 56.10, 53.40, 38.07, 68.50), 50.67, 49.99),
          (('0.5', '0.4', '0.7', '0.8'), ('0.56', '0.37', '0.28', '0.24')),
          {'num_hashes': 2, 'num_buckets': 4}, rotary=True)
# Sinkhorn: blocks of 50, of 64 on the pixel tasks (LRA's cifar10 and pathfinder32 configs).
_baseline('sinkhorn', 'Sinkhorn Trans.', _MODULES + 'attention.block_sparse:SinkhornAttention',
          {'block_size': 50},
          ((33.67, 61.20, 53.83, 41.23, 67.45), 51.39, 50.89,
           'Avg. as printed (LRA README: 51.29); its five scores average 51.48.'),
          (('1.1', '1.6', '2.9', '3.8'), ('0.55', '0.31', '0.21', '0.16')),
          {'block_size': 8}, rotary=True,
          task_options={task: {'block_size': 64} for task in ('image', 'pathfinder', 'pathx')})
# Synthesizer: LRA ran 'random' + dot product on every task.
_baseline('synthesizer', 'Synthesizer', _MODULES + 'attention.synthesizer:SynthesizerAttention',
          {'mode': 'random', 'dot_product': True},
          ((36.99, 61.68, 54.67, 41.61, 69.45), 52.88, 52.43),
          (('1.1', '1.2', '2.9', '1.4'), ('0.76', '0.75', '0.74', '0.74')))
# BigBird: blocks of 64, 3 random blocks per row, first and last block global (LRA).
_baseline('bigbird', 'BigBird', _MODULES + 'attention.block_sparse:BigBirdAttention',
          {'block_size': 64, 'num_random_blocks': 3},
          ((36.05, 64.02, 59.29, 40.83, 74.87), 55.01, 53.94),
          (('0.9', '0.8', '1.2', '1.1'), ('0.91', '0.56', '0.40', '0.30')),
          {'block_size': 4, 'num_random_blocks': 2}, rotary=True)
_baseline('linear_transformer', 'Linear Trans.',
          _MODULES + 'attention.baselines:LinearTransformerAttention', {},
          ((16.13, 65.90, 53.09, 42.34, 75.30), 50.55, 49.92),
          (('1.1', '1.9', '3.7', '5.6'), ('0.44', '0.22', '0.15', '0.11')), rotary=True)
_baseline('performer', 'Performer', _MODULES + 'attention.baselines:PerformerAttention',
          {'num_features': 256, 'redraw_features': False},
          ((18.01, 65.40, 53.82, 42.77, 77.05), 51.41, 50.81),
          (('1.2', '1.9', '3.8', '5.7'), ('0.44', '0.22', '0.15', '0.11')),
          {'num_features': 32}, rotary=True)
_luna(16, ((37.43, 65.74, 79.38, 46.39, 78.36), 61.46, 56.98),
      (('1.2', '1.8', '3.7', '5.5'), ('0.44', '0.23', '0.17', '0.10')))
_luna(128, ((38.01, 65.74, 79.55, 47.47, 78.89), 61.93, 57.53),
      (('1.1', '1.7', '3.4', '5.1'), ('0.49', '0.28', '0.21', '0.14')))
_luna(256, ((37.98, 65.78, 79.56, 47.86, 78.55), 61.95, 57.54),
      (('1.1', '1.7', '3.3', '4.9'), ('0.60', '0.33', '0.23', '0.16')))
# Today's LRA leaders, beside the Luna paper's comparison.
def _s4d_row(label, values, pathx, average, note=''):
  """A row of the S4D paper's LRA table: five tasks and Path-X where it was solved (None: the
  model failed it). Its Avg. is over six tasks, Path-X included."""
  accuracy = dict(zip(published.TASKS, values), **({'pathx': pathx} if pathx else {}))
  return published.PublishedRow(label, 's4d', None, S4D_PAPER, 'LRA table', accuracy, average,
                                None, note)


# S4D (models/blocks/s4d.py): its own block; options at the S4D paper's defaults (N = 64, S4D-Inv,
# dt in [1e-3, 1e-1], bidirectional, pre-norm); always no positions (the convolution knows
# them), no embedding LayerNorm, mean pooling and the SSM's own rate without weight decay.
# The authors' per-task LRA settings are the 'paper' protocol (protocols.S4D_TASKS).
register(Model(
    's4d', 'S4D', 's4d', block_class=_MODULES + 'blocks.s4d:S4DBlock',
    options={'state_dim': 64, 'init': 'inv', 'dt_min': 1e-3, 'dt_max': 1e-1,
             'bidirectional': True, 'prenorm': True, 'num_ssm': 0},
    settings={'model.positions': 'none', 'model.embedding_layernorm': False,
              'model.head': 'mean', 'ssm_learning_rate': 1e-3},
    paper_protocol='s4d', test_options={'state_dim': 4},
    table1=(_s4d_row('S4D-LegS', (60.47, 86.18, 89.46, 88.19, 93.06), 91.95, 84.89),
            _s4d_row('S4D-Inv', (60.18, 87.34, 91.09, 87.83, 93.78), 92.80, 85.50),
            _s4d_row('S4D-Lin', (60.52, 86.97, 90.96, 87.93, 93.96), None, 78.39,
                     'the S4D rows average six tasks, Path-X included, a failed Path-X (x) '
                     'counted as 50; its five scores average 84.07.'))))


def _mega_row(name, label, values, pathx, average):
  """A row of the Mega paper's LRA table (its Table 2): five tasks and Path-X; its Avg. is over
  the six tasks, Path-X included."""
  accuracy = dict(zip(published.TASKS, values), pathx=pathx)
  return published.PublishedRow(label, name, None, MEGA_PAPER, 'Table 2', accuracy, average)


# Mega (models/blocks/mega.py): its own block. The options per task are the authors' LRA model (their
# fairseq LRA scripts): softmax attention and post-norm on the text tasks (scalenorm on Text and
# Retrieval), laplace attention and pre-norm on the pixel tasks (their batchnorm there is a
# LayerNorm here, docs/mega.md), EMA kernels cut at 1024 lags (4096 on Path-X), the simple
# relative position bias. Always no position embeddings (EMA and bias know positions), no
# embedding LayerNorm and mean pooling. Their per-task sizes and optimizer are the 'paper'
# protocol (protocols.MEGA_TASKS). Mega-chunk: chunks of 128 (4096 on Path-X; the paper's §4.1).
_MEGA_TEXT = {'attention_function': 'softmax', 'prenorm': False, 'norm': 'scalenorm'}
_MEGA_PIXELS = {'attention_function': 'laplace', 'prenorm': True, 'norm': 'layernorm'}
_MEGA_TASK_OPTIONS = {'listops': {**_MEGA_TEXT, 'norm': 'layernorm'}, 'text': _MEGA_TEXT,
                      'retrieval': _MEGA_TEXT, 'image': _MEGA_PIXELS,
                      'pathfinder': _MEGA_PIXELS, 'pathx': {**_MEGA_PIXELS, 'truncation': 4096}}
_MEGA_SETTINGS = {'model.positions': 'none', 'model.embedding_layernorm': False,
                  'model.head': 'mean'}
register(Model(
    'mega', 'Mega', 'mega', block_class=_MODULES + 'blocks.mega:MegaBlock',
    options={'z_dim': 64, 'ema_dim': 16, 'truncation': 1024, 'position_bias': 'simple'},
    task_options=_MEGA_TASK_OPTIONS, settings=_MEGA_SETTINGS, paper_protocol='mega',
    test_options={'z_dim': 8, 'ema_dim': 2}, rotary=True,
    table1=(_mega_row('mega', 'Mega', (63.14, 90.43, 91.25, 90.44, 96.01), 97.98, 88.21),)))
register(Model(
    'mega_chunk', 'Mega-chunk', 'mega_chunk', block_class=_MODULES + 'blocks.mega:MegaBlock',
    options={'z_dim': 64, 'ema_dim': 16, 'truncation': 1024, 'position_bias': 'simple',
             'chunk_size': 128},
    task_options={**_MEGA_TASK_OPTIONS,
                  'pathx': {**_MEGA_TASK_OPTIONS['pathx'], 'chunk_size': 4096}},
    settings=_MEGA_SETTINGS, paper_protocol='mega', rotary=True,
    test_options={'z_dim': 8, 'ema_dim': 2, 'chunk_size': 8},
    table1=(_mega_row('mega_chunk', 'Mega-chunk', (58.76, 90.19, 90.97, 85.80, 94.41), 93.81,
                      85.66),)))


# S5 (models/blocks/s5.py): its own block. Options: the authors' run_train.py defaults (P 256, J 8,
# C~ trunc_standard_normal, ZOH, conjugate symmetry, dt in [1e-3, 1e-1], half_glu1, pre-norm) with
# their LRA scripts' model choices per task (bin/run_experiments/run_lra_*.sh: P, J, C_init,
# activation, clip_eigs, dt_min; the same under both protocols; their BatchNorm is a LayerNorm
# here, docs/s5_lru.md). Always no positions, no embedding LayerNorm, mean pooling and the SSM's
# own rate (ssm_lr_base 1e-3) without weight decay. Their sizes and optimizer are the 'paper'
# protocol (protocols.S5_TASKS).
_S5_TASK_OPTIONS = {
    'listops': {'state_dim': 16, 'blocks': 8, 'c_init': 'lecun_normal',
                'activation': 'half_glu2'},
    'text': {'state_dim': 192, 'blocks': 12, 'c_init': 'lecun_normal',
             'activation': 'half_glu2'},
    'retrieval': {'state_dim': 256, 'blocks': 16},
    'image': {'state_dim': 384, 'blocks': 3, 'c_init': 'lecun_normal', 'clip_eigs': True},
    'pathfinder': {'state_dim': 256, 'blocks': 8},
    'pathx': {'state_dim': 256, 'blocks': 16, 'c_init': 'complex_normal', 'dt_min': 1e-4},
}
_SSM_SETTINGS = {'model.positions': 'none', 'model.embedding_layernorm': False,
                 'model.head': 'mean', 'ssm_learning_rate': 1e-3}
register(Model(
    's5', 'S5', 's5', block_class=_MODULES + 'blocks.s5:S5Block',
    options={'state_dim': 256, 'blocks': 8, 'c_init': 'trunc_standard_normal',
             'discretization': 'zoh', 'conj_sym': True, 'clip_eigs': False,
             'bidirectional': True, 'dt_min': 1e-3, 'dt_max': 1e-1, 'activation': 'half_glu1',
             'prenorm': True, 'scan': 'sequential', 'chunk': 64},
    task_options=_S5_TASK_OPTIONS, settings=_SSM_SETTINGS, paper_protocol='s5',
    test_options={'state_dim': 4, 'blocks': 2},
    # Its Table 1: five tasks and Path-X; its Avg. is over the six, Path-X included.
    table1=(published.PublishedRow(
        'S5', 's5', None, S5_PAPER, 'Table 1',
        dict(zip(published.TASKS, (62.15, 89.31, 91.40, 88.00, 95.33)), pathx=98.58), 87.46),)))
# LRU (models/blocks/lru.py): its own block, the paper's (GLU, pre-norm), ring init r in [0, 1], phases
# in [0, 2 pi], N = 256, bidirectional as S5 on LRA; the same settings as S5 (its recurrence's
# parameters at their own rate without weight decay). Its recurrence runs as a sequential
# lax.scan, as S5's: on a 2-core CPU faster than the associative and the chunked scans at 60 tokens
# and at 4K (docs/s5_lru.md). 'lru,paper' is refused
# (protocols.lru_settings).
register(Model(
    'lru', 'LRU', 'lru', block_class=_MODULES + 'blocks.lru:LRUBlock',
    options={'state_dim': 256, 'r_min': 0.0, 'r_max': 1.0, 'max_phase': 6.283185307179586,
             'bidirectional': True, 'activation': 'full_glu', 'prenorm': True,
             'scan': 'sequential', 'chunk': 64},
    settings=_SSM_SETTINGS, paper_protocol='lru', test_options={'state_dim': 4},
    # Its Table 3 (mean over 3 seeds). Its sCIFAR (89.0) is of coloured images, not LRA's grey
    # Image task: left out of the Image column, and so out of every average.
    table1=(published.PublishedRow(
        'LRU', 'lru', None, LRU_PAPER, 'Table 3',
        {'listops': 60.2, 'text': 89.4, 'retrieval': 89.9, 'pathfinder': 95.1, 'pathx': 94.2},
        None, note="no Image cell: the paper's sCIFAR (89.0) is coloured CIFAR-10, not LRA's "
        'grey-scale Image task; no average is printed (the five cells here average 85.76).'),)))
