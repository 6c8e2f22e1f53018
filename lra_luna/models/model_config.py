"""The typed model config: every model field, its default, its valid choices and its rules.

`ModelConfig` is the schema of `config.model` (config_lib.base_config builds that section from
its defaults) and what the model constructors take. `ModelConfig.from_config(config.model,
vocab_size=..., num_classes=..., max_length=...)` builds it and checks every choice and rule,
here and nowhere else (flax examples/lm1b's TransformerConfig is the pattern). Adding a model
field is one line below. No JAX here: the config layer and `report` import this module.
"""

import dataclasses

from lra_luna import cli
# The heads, and which a model's attention can pool, belong to the model registry.
from lra_luna.registry import (HEADS, heads_of, rotary_models,  # pylint: disable=unused-import
                               takes_rotary)

# 'none': the blocks know positions (S4D); 'rotary': RoFormer's rotation of queries and keys
# inside the attention (models/attention/rotary.py), only where registry.rotary_models() says.
POSITIONS = ('learned', 'sinusoidal', 'none', 'rotary')
INITS = ('reference', 'bert', 'lecun')
P_INITS = ('learned', 'sinusoidal')
DTYPES = ('float32', 'bfloat16', 'float16')
PAIR_FEATURES = ('concat', 'full', 'concat_reversed')
DUAL_HEAD_LAYERS = (1, 2)
ATTENTION_IMPLEMENTATIONS = ('vanilla', 'fused')
PREDICTIONS = ('class', 'queries')
# The attentions (and blocks) with a causal form (`causal`: position t reads positions <= t):
# the softmax Transformer (vanilla), Luna (eq. 7, attention/causal_luna.py), S4D (its one-sided
# kernel), Mega and chunked Mega (its one-sided EMA, causal attention), the Linear Transformer
# (prefix sums, Katharopoulos et al. eq. 9), S5 and LRU (the forward scan alone).
CAUSAL_ATTENTIONS = ('softmax', 'luna', 's4d', 'mega', 'mega_chunk', 'linear_transformer', 's5',
                     'lru')
# The pretraining objectives (config.pretraining.objective; models/objectives, spt.py).
PRETRAINING_OBJECTIVES = ('masked', 'causal')


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """config.model, typed. Defaults are the task-neutral ones; sizes come from the task config."""
  attention: str = 'softmax'        # a MODELS attention (set_model) or a plug-in 'x.py:Class'
  attention_implementation: str = 'vanilla'  # softmax only: 'vanilla' (n x n matrix) | 'fused'
  # Constructor options of a baseline, a plug-in or a model's own block (S4D).
  attention_options: dict = dataclasses.field(default_factory=dict)
  dim: int = 0                      # model width D (set by each task config)
  num_heads: int = 0                # heads H (Luna: unpack heads; set by each task config)
  num_pack_heads: int = 0           # Luna pack heads Hp; 0 = same as num_heads (reference LRA)
  num_layers: int = 0               # encoder layers (set by each task config)
  ffn_dim: int = 0                  # feed-forward hidden width (set by each task config)
  classifier_dim: int = 0           # classifier hidden width (set by each task config)
  dropout: float = 0.1              # residual, embedding and P dropout
  attention_dropout: float = 0.1    # dropout on attention probabilities
  positions: str = 'learned'        # 'learned' | 'sinusoidal' | 'none' | 'rotary' (POSITIONS)
  embedding_layernorm: bool = True  # LayerNorm after the embedding (Luna reference; LRA: none)
  init: str = 'reference'           # 'reference' (xavier, luna.md §1) | 'bert' (N(0, 0.02)) |
                                    # 'lecun' (LeCun-normal projections, Flax's default)
  head: str = 'cls'                 # sentence representation: 'cls' | 'mean' | 'mean_p'
  mask_padding: bool = True         # pad id 0 is masked; False for pixel tasks (0 is black)
  dual_encoder: bool = False        # Retrieval: two documents through one shared encoder
  # Dual head input: 'concat' [a, b] | 'full' [a, b, a*b, a-b] | 'concat_reversed' [b, a]
  # (Luna authors: the second document first).
  pair_features: str = 'concat'
  dual_head_layers: int = 2         # dual head hidden layers: 2 (LRA: classifier_dim, then half) | 1
  classifier_bias: bool = True      # bias in the classifier's last Linear (Luna authors: none)
  mean_includes_cls: bool = False   # head 'mean' averages [CLS] too (Luna authors' 'mp' pooling)
  dtype: str = 'float32'            # compute dtype: 'float32' | 'bfloat16' | 'float16'
  # The last layer computes only the rows of X the head reads (cls: [CLS]; mean_p: none); the
  # logits and gradients are the same up to float rounding. False: every row (for comparisons).
  prune_last_layer: bool = True
  # Luna only.
  pack_length: int = 16             # l, length of the extra sequence P
  tie_kv: bool = False              # one projection for key and value (paper §4.2 "tied kv")
  normalize_before: bool = False    # pre-LN layers (reference option); default post-LN (eq. 6)
  contextual_p: bool = True         # P' of layer i feeds layer i+1; False = own P per layer
  p_init: str = 'learned'           # P at the input: 'learned' table | 'sinusoidal' (fixed)
  # Self-pretraining (config.pretraining, models/objectives): the embedding holds a row for the
  # mask id (vocab_size + 1) of the masked objective; the encoder is causal (the causal
  # objective: position t reads positions <= t only, in pretraining and fine-tuning alike).
  mask_token: bool = False
  causal: bool = False
  # What the model outputs: 'class' one label per sequence (LRA) | 'queries' a token at each of
  # batch['query_positions'] (MQAR, models/recall.py).
  predict: str = 'class'
  # Filled in from the data at run time.
  vocab_size: int = 0               # token ids are 0..vocab_size-1 ([CLS] is vocab_size)
  num_classes: int = 0              # output classes
  max_length: int = 0               # = config.max_length

  @classmethod
  def from_config(cls, model, **sizes) -> 'ModelConfig':
    """The checked ModelConfig of `model` (config.model, or any mapping of its fields), with
    `sizes` (vocab_size, num_classes, max_length) filled in. A field the mapping lacks (a
    config.json written before the field existed) keeps its default. ValueError names the first
    bad field and its valid choices."""
    values = {field.name: model[field.name] for field in dataclasses.fields(cls)
              if field.name in model}
    options = values.get('attention_options') or {}
    values['attention_options'] = dict(options.to_dict() if hasattr(options, 'to_dict')
                                       else options)
    model_config = cls(**{**values, **sizes})
    model_config.check()
    return model_config

  def check(self) -> None:
    """ValueError for the first field with a value outside its choices, or a broken rule."""
    for field, choices in (('head', HEADS), ('positions', POSITIONS), ('init', INITS),
                           ('p_init', P_INITS), ('dtype', DTYPES),
                           ('pair_features', PAIR_FEATURES),
                           ('dual_head_layers', DUAL_HEAD_LAYERS),
                           ('attention_implementation', ATTENTION_IMPLEMENTATIONS),
                           ('predict', PREDICTIONS)):
      value = getattr(self, field)
      if value not in choices:
        close = cli.closest(value, choices)
        hint = f' Did you mean {close!r}?' if close else ''
        raise ValueError(f'config.model.{field} = {value!r} is not valid; valid choices: '
                         f'{list(choices)}.{hint}')
    if self.positions == 'rotary' and not takes_rotary(self.attention):
      raise ValueError(f"config.model.positions = 'rotary' needs queries and keys with positions, "
                       f'which attention {self.attention!r} has not; the models that take it: '
                       f'{", ".join(rotary_models())}.')
    check_causal(self)
    if self.head not in heads_of(self.attention):
      raise ValueError(f'config.model.head = {self.head!r} needs a Luna model (attention '
                       f"'luna'), not attention {self.attention!r}; use one of "
                       f'{list(heads_of(self.attention))}, or a luna model.')


def check_causal(cfg) -> None:
  """ValueError for a causal config whose attention has no causal form (CAUSAL_ATTENTIONS,
  vanilla): a causal encoder never reads the future (fused softmax has no causal mask)."""
  if cfg.causal and (cfg.attention not in CAUSAL_ATTENTIONS
                     or cfg.attention_implementation != 'vanilla'):
    raise ValueError(f'config.model.causal needs an attention with a causal form; '
                     f'{cfg.attention!r} ({cfg.attention_implementation}) has none; those '
                     f'with one: {list(CAUSAL_ATTENTIONS)} (vanilla).')
