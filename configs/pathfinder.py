"""Pathfinder (docs/data.md): are the two circles joined by one path? 32 x 32 px, hard level.

Data: <data root>/pathfinder32/curv_contour_length_14 from the LRA release
(`python data/import_lra_release.py <lra_release folder>`), or generated on first use (200k
images; or beforehand: `python data/generate_pathfinder.py --resolution 32 --difficulty hard`).
Run (full, LRA protocol):
  python run_lra.py --config configs/pathfinder.py:luna16 --workdir runs/pathfinder_luna16
The Luna authors' protocol (their released LRA scripts):
  python run_lra.py --config configs/pathfinder.py:luna16,paper --workdir runs/pathfinder_luna16_paper
Quick (2-core CPU: ~1 min with luna16, several with the transformer; 2000 images generated
under <data root>/pathfinder-quick):
  python run_lra.py --config configs/pathfinder.py:luna16,quick --workdir runs/pathfinder_luna16_quick
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
  c.task = 'pathfinder'
  # data_source 'auto' (the default): the release's <root>/pathfinder<res>/ if there, else ours.
  c.dataset_name = 'pathfinder-generated'  # folder of generated sets under the data root
  c.max_length = 1024              # 32 x 32 pixels, fixed
  c.batch_size = 512               # LRA
  c.eval_batch_size = 512
  c.num_train_steps = 62400        # LRA (200 epochs of 160k)
  c.warmup_steps = 312             # LRA (the Luna reference script used 4000)
  c.schedule = 'cosine'            # LRA: linear warmup, then cosine decay
  c.learning_rate = 1e-3           # Luna paper Table 4 and LRA
  c.eval_every = 2000
  c.checkpoint_every = 2000

  # Data: which set, and how to make it when it is missing (docs/data.md).
  c.pathfinder = ml_collections.ConfigDict()
  c.pathfinder.resolution = 32     # pixels per side: 32 (Pathfinder), 64, 128 (Path-X), 256
  c.pathfinder.difficulty = 'hard'  # 'easy' | 'intermediate' | 'hard' (the paper's Pathfinder)
  # True leaves out missing or empty PNGs with a warning (the release has one empty image, in
  # pathfinder32/curv_baseline); False stops at the first with a DataError naming it.
  c.pathfinder.skip_bad_images = False
  c.pathfinder.generate_if_missing = True  # generate with our seeded generator if no data is there
  c.pathfinder.num_images = 200000  # generation only: 80/10/10 train/val/test in file order
  c.pathfinder.images_per_batch = 1000  # generation only: images per imgs/<batch> folder
  c.pathfinder.seed = 0            # generation seed (independent of the training seed)

  # Model: LRA's Pathfinder size (the Luna reference script used 1 layer of 128).
  m = c.model
  m.dim = 32                       # emb_dim
  m.num_heads = 4
  m.num_layers = 4
  m.ffn_dim = 32                   # mlp_dim (LRA's qkv_dim 16 has no counterpart here)
  m.classifier_dim = 32
  m.dropout = 0.2                  # Luna paper Table 4 and LRA
  m.head = 'mean'                  # LRA's table (MEAN); override with --config.model.head=cls
  m.mask_padding = False           # pixel 0 is black, not padding (docs/data.md)
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The Luna authors' protocol: their sizes, rates, tokens and head (lra_luna/protocols.py).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # 2000 freshly generated images and a tiny model: a 2-core CPU runs it in minutes (above
    # chance only by luck: Pathfinder needs the full set). The quick set gets its own folder
    # (dataset_name), so it never mixes with the full one.
    c.data_source = 'generated'
    c.dataset_name = 'pathfinder-quick'
    c.pathfinder.num_images = 2000
    c.pathfinder.images_per_batch = 500
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
    # LRA's 32 x 32 images (1,024 tokens) at the difficulty a small model learns on a 2-core
    # CPU, a small model; five vmapped seeds fit about 30 minutes (docs/mid.md).
    c.data_source = 'generated'
    c.dataset_name = 'pathfinder-mid'
    c.pathfinder.difficulty = 'easy'
    c.pathfinder.num_images = 20000
    c.pathfinder.images_per_batch = 1000
    c.batch_size = 32
    c.eval_batch_size = 100
    c.num_train_steps = 400
    c.warmup_steps = 40
    c.learning_rate = 2e-3
    c.eval_every = c.checkpoint_every = 200
    c.log_every = 50
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 32, 2, 2, 64, 64
    m.dropout = m.attention_dropout = 0.0
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
