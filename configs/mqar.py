"""MQAR (Zoology's multi-query associative recall, lra_luna/datasets/mqar.py): after N key-value
pairs, each key again as a query; the model predicts its value at the query.

Causal by default (as Zoology: each position reads only what precedes it), for the models with a
causal form; the word bidirectional lets the encoder read the whole sequence (every model):
  python run_lra.py --config configs/mqar.py:transformer,quick --workdir runs/mqar_transformer
  python run_lra.py --config configs/mqar.py:linformer,quick,bidirectional --workdir runs/mqar_lf
Words: a model, quick, smoke and bidirectional.
"""

import ml_collections

from lra_luna import config_lib
from lra_luna import spt
from lra_luna.models import model_config


def get_config(arg: str = 'transformer') -> ml_collections.ConfigDict:
  arg = config_lib.parse_arg(arg, model='transformer', bidirectional=False)
  c = config_lib.base_config()
  c.task = 'mqar'
  c.dataset_name = 'mqar'
  c.data_source = 'generated'
  c.max_length = 256               # L (Zoology's Figure 2: 64, 128, 256, 512)
  c.batch_size = 256               # Zoology at L = 256
  c.eval_batch_size = 500
  c.num_train_steps = 25000        # 64 epochs of 100,000 examples at batch 256 (Zoology)
  c.warmup_steps = 1000
  c.schedule = 'cosine'
  c.learning_rate = 2.2e-3         # one of Zoology's logspace(-4, -2, 4)
  c.weight_decay = 0.1
  c.eval_every = c.checkpoint_every = 1000

  c.mqar = ml_collections.ConfigDict()
  c.mqar.num_kv_pairs = 16         # N (Zoology at L = 256)
  c.mqar.vocab_size = 8192         # keys from 1..V/2-1, values from V/2..V-1
  c.mqar.power_a = 0.01            # the query gaps' power law
  c.mqar.random_non_queries = False  # 0 between the queries (Figure 2); True: random tokens
  c.mqar.num_train = 100000
  c.mqar.num_val = 1000            # seed + 1
  c.mqar.num_test = 3000           # seed + 10 (Zoology)
  c.mqar.seed = 0                  # data seed (independent of the training seed)

  m = c.model
  m.predict = 'queries'            # logits at the query positions only (models/recall.py)
  m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 64, 1, 2, 128, 128
  m.dropout = m.attention_dropout = 0.0
  m.init = 'lecun'                 # the reference init's q/k stall at chance in the quick budget
  # mask_padding stays True: the zeros between queries are padding (pad id 0, as in every text
  # task); read as tokens, as Zoology's models do, the quick Transformer stays at chance.
  m.causal = not arg.bidirectional  # Zoology's setting
  config_lib.set_model(c, arg.model)
  if m.causal and (m.attention not in model_config.CAUSAL_ATTENTIONS
                   or m.attention_implementation != 'vanilla'):
    raise ValueError(f'configs/mqar.py:{arg.model} is causal (the default) and {arg.model} has '
                     f'no causal form: add the word bidirectional '
                     f'(configs/mqar.py:{arg.model},bidirectional); the models with a causal '
                     f'form: {", ".join(spt.causal_models())}.')
  if arg.quick:
    # A 2-core CPU's size: L = 256 with Zoology's smallest number of pairs (N = 4) and its
    # 100,000 examples, 2,000 steps of 64. Causal, the Transformer passes 99% by step 1,500
    # (docs/mqar_calibration.md).
    c.max_length = 256
    c.mqar.update(num_kv_pairs=4, num_train=100000, num_val=500, num_test=1000)
    c.batch_size = 64
    c.eval_batch_size = 250
    c.num_train_steps = 2000
    c.warmup_steps = 200
    c.schedule = 'constant'        # a decaying rate can end before recall appears
    c.learning_rate = 3e-3
    c.weight_decay = 0.0
    c.eval_every = c.checkpoint_every = 500
    c.log_every = 100
  return c

