"""Retrieval (docs/data.md): do two ACL Anthology Network papers cite each other? 2 x 4000 bytes.

Data: the LRA release files new_aan_pairs.{train,eval,test}.tsv in <data root>/aan; link them
there from the unpacked release with
  python data/import_lra_release.py <lra_release folder>
Run (full, LRA protocol):
  python run_lra.py --config configs/retrieval.py:luna16 --workdir runs/retrieval_luna16
The Luna authors' protocol (their released LRA scripts):
  python run_lra.py --config configs/retrieval.py:luna16,paper --workdir runs/retrieval_luna16_paper
Quick (2-core CPU: ~1 min with luna16, ~5 with the transformer; 256 bytes per document):
  python run_lra.py --config configs/retrieval.py:luna16,quick --workdir runs/retrieval_luna16_quick
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
  c.task = 'retrieval'
  c.dataset_name = 'aan'           # folder of new_aan_pairs.{train,eval,test}.tsv
  c.max_length = 4000              # per document, after LRA's cut to the first 10000 bytes
  c.max_truncated_fraction = 1.0   # LRA cuts papers at max_length by design (counted, reported)
  c.batch_size = 32                # LRA
  c.eval_batch_size = 32           # as training: two 4000-token documents per example
  c.num_train_steps = 20000        # Luna paper (LRA trained 5000)
  c.warmup_steps = 8000            # LRA
  c.schedule = 'rsqrt'             # LRA: linear warmup, then inverse square root
  c.learning_rate = 5e-5           # Luna paper Table 4; we follow it (reference script: 5e-4)
  c.weight_decay = 0.1             # LRA (the Luna reference script used 1e-4)
  c.eval_every = 1000
  c.checkpoint_every = 1000

  # Model: LRA's Retrieval size (the Luna reference script uses the same).
  m = c.model
  m.dim = 128                      # emb_dim
  m.num_heads = 4
  m.num_layers = 4
  m.ffn_dim = 512                  # mlp_dim
  m.classifier_dim = 512           # dual head hidden widths: 512, then 256 (LRA)
  m.dual_encoder = True            # one shared encoder reads each document
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The Luna authors' protocol: their sizes, rates, tokens and head (lra_luna/protocols.py).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # The same pairs cut to 256 bytes per document and a tiny model: minutes on a 2-core CPU.
    c.max_length = 256
    c.eval_batch_size = 32           # small batches evaluate faster on a CPU
    c.num_train_steps = 300
    c.warmup_steps = 30
    c.learning_rate = 2e-3
    c.weight_decay = 0.0
    c.eval_every = 300
    c.checkpoint_every = 300
    c.log_every = 50
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 32, 2, 1, 64, 64
    m.dropout = m.attention_dropout = 0.0
  if arg.mid:
    # Papers cut at 1,000 bytes each and the mid model: the mid size of ListOps and Pathfinder
    # (docs/mid.md), not calibrated here (no AAN data on that machine).
    c.max_length = 1000
    c.weight_decay = 0.0
    config_lib.use_uncalibrated_mid_settings(c, batch_size=16, eval_batch_size=32)
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
