"""ListOps (docs/data.md): 10-way classification of nested MIN/MAX/MED/SM expressions.

Run (full, LRA protocol):
  python run_lra.py --config configs/listops.py:luna16 --workdir runs/listops_luna16
The Luna authors' protocol (their released LRA scripts):
  python run_lra.py --config configs/listops.py:luna16,paper --workdir runs/listops_luna16_paper
Quick (2-core CPU, a few minutes, data generated on first use):
  python run_lra.py --config configs/listops.py:luna16,quick --workdir runs/listops_luna16_quick
Release data: `python data/import_lra_release.py <lra_release>` links listops-1000/ into the data
root, which data_source 'auto' then prefers; --config.data_source=release requires it.
Words after the colon (config_lib.WORDS): a model (transformer, luna16, luna128, ...), quick, mid
(long inputs at a 2-core CPU's budget, docs/mid.md; with long, 16 times its steps), paper (the Luna
authors' protocol; with quick: their model details, tokens and optimizer at the quick sizes, steps
and rates), fp16 (float16 compute with loss scaling), smoke (the whole pipeline in a few steps),
rotary (rotary positions) and spt (self-pretraining, then fine-tuning); `python run_lra.py --help`
describes each.
"""

import ml_collections

from lra_luna import config_lib
from lra_luna import protocols


def get_config(arg: str = 'luna16') -> ml_collections.ConfigDict:
  arg = config_lib.parse_arg(arg)
  c = config_lib.base_config()
  c.task = 'listops'
  c.dataset_name = 'listops-generated'  # folder of the generated set under the data root
  c.max_length = 2000              # longest generated expression is < 2000 tokens
  c.batch_size = 32                # LRA
  c.eval_batch_size = 64
  c.num_train_steps = 5000         # LRA
  c.warmup_steps = 1000            # LRA
  c.schedule = 'rsqrt'             # LRA: linear warmup, then inverse square root
  c.learning_rate = 1e-4           # Luna paper Table 4 (used for every model, as one protocol)
  c.weight_decay = 0.1             # LRA (the Luna reference script used 1e-4)
  c.eval_every = 500
  c.checkpoint_every = 500

  # Generator settings (docs/data.md); used only when the files are missing.
  c.listops = ml_collections.ConfigDict()
  c.listops.num_train = 96000      # examples per split: 96k / 2k / 2k (LRA)
  c.listops.num_val = 2000
  c.listops.num_test = 2000
  c.listops.min_length = 500       # keep trees with min_length < tokens < max_length
  c.listops.max_length = 2000
  c.listops.max_depth = 10         # maximum tree depth
  c.listops.max_args = 10          # arity is uniform in 2..max_args
  c.listops.seed = 0               # data seed (independent of the training seed)

  # Model: LRA's ListOps size (the Luna reference used 1 layer of 512 / FFN 2048; we follow LRA).
  m = c.model
  m.dim = 512                      # emb_dim
  m.num_heads = 8
  m.num_layers = 4
  m.ffn_dim = 1024                 # mlp_dim
  m.classifier_dim = 1024
  m.init = 'bert'                  # Luna reference for ListOps and Text (docs/protocols.md)
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The Luna authors' protocol: their sizes, rates, tokens and head (lra_luna/protocols.py).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # A smaller task and model that a 2-core CPU trains in minutes and still learns.
    c.data_source = 'generated'    # the quick set is always ours (release examples are longer)
    c.dataset_name = 'listops-quick'
    c.listops.update(num_train=10000, num_val=500, num_test=500, min_length=4, max_length=60,
                     max_depth=3, max_args=5)
    c.max_length = 60
    c.batch_size = 64
    c.eval_batch_size = 250
    c.num_train_steps = 1500
    c.warmup_steps = 150
    c.learning_rate = 2e-3
    c.weight_decay = 0.0
    c.log_every = 100
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 64, 4, 2, 128, 128
    m.dropout = m.attention_dropout = 0.0
  if arg.mid:
    # Long inputs that need their range, trained on a 2-core CPU (docs/mid.md): LRA's generator
    # (depth 10, up to 10 arguments) kept at 250 < tokens < 600 (median 416), 20k examples, and
    # a small model; five vmapped seeds fit about 30 minutes.
    c.data_source = 'generated'
    c.dataset_name = 'listops-mid'
    c.listops.update(num_train=20000, num_val=1000, num_test=1000, min_length=250,
                     max_length=600, max_depth=10, max_args=10)
    c.max_length = 600
    c.batch_size = 32
    c.eval_batch_size = 100
    c.num_train_steps = 1600         # SSMs leave the constant guess at 600-1000 steps
    c.warmup_steps = 100
    c.schedule = 'cosine'            # rsqrt left a sixth of the peak rate by step 1,400
    c.learning_rate = 4e-3           # S4D and S5 learn at it; at 2e-3 none did by step 1,200
    c.weight_decay = 0.0
    c.eval_every = c.checkpoint_every = 200
    c.log_every = 50
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 64, 4, 2, 128, 128
    m.dropout = m.attention_dropout = 0.0
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
