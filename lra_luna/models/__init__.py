"""The models, laid out by what each folder holds:

  attention/   attention mechanisms (softmax, Luna's pack and unpack, causal Luna, the baselines)
               and `attention/base.py`, what they are built from (`QKVOutAttention`)
  blocks/      encoder blocks that are no attention (S4D, Mega, S5, LRU)
  encoder/     the one encoder: embedding, Luna's P and layers, the block encoder and its protocol
  heads/       what reads the encoder's output (classification: pooling and the MLP;
               pretraining: the token head)
  objectives/  self-pretraining's objectives: masking and the losses (masked, next-token)
  nn/          building blocks shared by all (Linear, dropout, LayerNorm, feed-forward)
  classifier.py      encoder + classification head: the LRA task models, `build_model`
  pretraining.py     encoder + token head: the pretraining models, `transfer_encoder`
  model_config.py    every model setting (no JAX)
  plugins.py         your own attention from a file
"""

import importlib

# Modules of the flat layout before these folders. Plug-ins written then
# (`from lra_luna.models import layers`) keep working; each loads only when asked for.
_MOVED = {'baselines': 'attention.baselines', 'block_sparse': 'attention.block_sparse',
          'causal': 'attention.causal_luna', 'reformer': 'attention.reformer',
          'sparse_patterns': 'attention.sparse_patterns', 'synthesizer': 'attention.synthesizer',
          'dropout': 'nn.dropout', 'layers': 'nn.layers', 'linear': 'nn.linear',
          'mega': 'blocks.mega', 's4d': 'blocks.s4d'}


def __getattr__(name: str):
  if name in _MOVED:
    return importlib.import_module(f'{__name__}.{_MOVED[name]}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
