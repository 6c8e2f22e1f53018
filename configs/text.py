"""Text (docs/data.md): byte-level IMDb sentiment, 2 classes, reviews cut to 4000 bytes.

Data: TFDS `imdb_reviews`, prepared once on a machine with internet (runs never download):
  python -c "import tensorflow_datasets as tfds; tfds.builder('imdb_reviews', data_dir='data/store/tfds').download_and_prepare()"
then copy data/store/tfds to the same place here (or pass --config.tfds_data_dir=<copy>).
Run (full, LRA protocol):
  python run_lra.py --config configs/text.py:luna16 --workdir runs/text_luna16
The Luna authors' protocol (their released LRA scripts):
  python run_lra.py --config configs/text.py:luna16,paper --workdir runs/text_luna16_paper
Quick (2-core CPU: ~1 min with luna16, ~3 with the transformer; 256 bytes, a tiny model):
  python run_lra.py --config configs/text.py:luna16,quick --workdir runs/text_luna16_quick
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
  c.task = 'text'
  c.dataset_name = 'text'          # folder of the token-array cache under the data root
  c.tfds_data_dir = ''             # prepared TFDS data; '' = <data root>/tfds
  c.max_length = 4000              # Luna and LRA papers (LRA's released config said 1000)
  c.max_truncated_fraction = 1.0   # LRA cuts reviews at max_length by design (counted, reported)
  # 'test': LRA validated on the test split, so its "validation" and test numbers are the same
  # data; we follow it for comparable numbers. 'heldout': the last text_heldout training
  # reviews (file order) validate instead, and train keeps 25000 - text_heldout.
  c.text_validation = 'test'
  c.text_heldout = 2500            # used only with text_validation = 'heldout'
  c.batch_size = 32                # LRA
  c.eval_batch_size = 32           # as training: 4000-token batches are what fits
  c.num_train_steps = 20000        # LRA
  c.warmup_steps = 8000            # LRA
  c.schedule = 'rsqrt'             # LRA: linear warmup, then inverse square root
  c.learning_rate = 5e-5           # Luna paper Table 4 (the reference script agrees)
  c.weight_decay = 0.1             # LRA (the Luna reference script used 1e-4)
  c.eval_every = 1000
  c.checkpoint_every = 1000

  # Model: LRA's Text size (the Luna reference script uses the same).
  m = c.model
  m.dim = 256                      # emb_dim
  m.num_heads = 4
  m.num_layers = 4
  m.ffn_dim = 1024                 # mlp_dim
  m.classifier_dim = 1024
  m.dropout = 0.3                  # Luna paper Table 4
  m.attention_dropout = 0.3        # Luna paper Table 4
  m.init = 'bert'                  # Luna reference for ListOps and Text (docs/protocols.md)
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The Luna authors' protocol: their sizes, rates, tokens and head (lra_luna/protocols.py).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # The same reviews cut to 256 bytes and a tiny model: a 2-core CPU trains it in minutes.
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
    # Reviews cut at 1,000 bytes (LRA's released config) and the mid model: the mid size of
    # ListOps and Pathfinder (docs/mid.md), not calibrated here (no Text data on that machine).
    c.max_length = 1000
    c.weight_decay = 0.0
    config_lib.use_uncalibrated_mid_settings(c, batch_size=16, eval_batch_size=32)
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
