"""Image (docs/data.md): grayscale CIFAR-10, 10 classes, 1024 pixel tokens, no padding.

Data: TFDS `cifar10`, prepared once on a machine with internet (runs never download):
  python -c "import tensorflow_datasets as tfds; tfds.builder('cifar10', data_dir='data/store/tfds').download_and_prepare()"
then copy data/store/tfds to the same place here (or pass --config.tfds_data_dir=<copy>).
Run (full, LRA protocol):
  python run_lra.py --config configs/image.py:luna16 --workdir runs/image_luna16
The Luna authors' protocol (their released LRA scripts):
  python run_lra.py --config configs/image.py:luna16,paper --workdir runs/image_luna16_paper
Quick (2-core CPU: ~1 min with luna16, ~9 with the transformer's 1025 x 1025 attention):
  python run_lra.py --config configs/image.py:luna16,quick --workdir runs/image_luna16_quick
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
  c.task = 'image'
  c.dataset_name = 'image'         # folder of the token-array cache under the data root
  c.tfds_data_dir = ''             # prepared TFDS data; '' = <data root>/tfds
  c.max_length = 1024              # 32 x 32 pixels, fixed
  c.batch_size = 256               # LRA
  c.eval_batch_size = 256
  c.num_train_steps = 35000        # LRA (200 epochs of 45k)
  c.warmup_steps = 175             # LRA (the Luna reference script used 4000)
  c.schedule = 'cosine'            # LRA: linear warmup, then cosine decay
  c.learning_rate = 5e-3           # Luna paper Table 4 (LRA: 5e-4)
  c.eval_every = 1000
  c.checkpoint_every = 1000

  # Model: LRA's Image size (its qkv_dim 64 has no counterpart here: attention works at dim).
  m = c.model
  m.dim = 128                      # emb_dim (the Luna reference script used 64)
  m.num_heads = 8
  m.num_layers = 1
  m.ffn_dim = 128                  # mlp_dim
  m.classifier_dim = 128
  # Dropout 0.1 (the default) and attention dropout 0.3: Luna paper Table 4; LRA used 0.3 / 0.2
  # and the Luna reference script 0.3 / 0.1: we follow the paper.
  m.attention_dropout = 0.3
  m.mask_padding = False           # pixel 0 is black, not padding (LRA masked it: docs/data.md)
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The Luna authors' protocol: their sizes, rates, tokens and head (lra_luna/protocols.py).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # The full 1024-pixel images and a tiny model: a 2-core CPU trains it in minutes.
    c.batch_size = 32
    c.eval_batch_size = 8            # small batches evaluate faster on a CPU
    c.num_train_steps = 200
    c.warmup_steps = 20
    c.learning_rate = 2e-3
    c.eval_every = 200
    c.checkpoint_every = 200
    c.log_every = 50
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 32, 2, 1, 64, 64
    m.dropout = m.attention_dropout = 0.0
  if arg.mid:
    # LRA's 32 x 32 grey images (1,024 tokens) and the mid model: the mid size of ListOps and
    # Pathfinder (docs/mid.md), not calibrated here (no CIFAR-10 data on that machine).
    config_lib.use_uncalibrated_mid_settings(c, batch_size=32, eval_batch_size=100)
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
