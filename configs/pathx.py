"""Path-X (docs/data.md): Pathfinder at 128 x 128 px, hard level: 16384 pixel tokens.

Data: <data root>/pathfinder128/curv_contour_length_14 from the LRA release
(`python data/import_lra_release.py <lra_release folder>`; one of the release's two pathfinder128
copies is reported unlearnable, so the import names any second copy) or generated beforehand:
  python data/generate_pathfinder.py --resolution 128 --difficulty hard
Run (full, paper values):
  python run_lra.py --config configs/pathx.py:luna16 --workdir runs/pathx_luna16
Quick (2-core CPU, a minute with a Luna model; 400 images generated under
<data root>/pathx-quick; softmax attention over 16385 tokens needs ~26 GB at this batch of 4,
so run the transformer's quick variant on a GPU):
  python run_lra.py --config configs/pathx.py:luna16,quick --workdir runs/pathx_luna16_quick
Words after the colon (config_lib.WORDS): a model (transformer, luna16, luna128, ...), quick, mid
(refused: Path-X is long only at 128 x 128), long (refused with mid), paper (refused for the Luna
protocol, whose authors released no Path-X run; `s4d,paper` is the S4 authors' Path-X run,
lra_luna/protocols.py), fp16 (float16 compute with loss scaling), smoke (the whole pipeline in a
few steps), rotary (rotary positions) and spt (self-pretraining, then fine-tuning); `python
run_lra.py --help` describes each.
"""

import ml_collections

from lra_luna import config_lib
from lra_luna import protocols


def get_config(arg: str = 'luna16') -> ml_collections.ConfigDict:
  arg = config_lib.parse_arg(arg)
  c = config_lib.base_config()
  c.task = 'pathx'
  # data_source 'auto' (the default): the release's <root>/pathfinder<res>/ if there, else ours.
  c.dataset_name = 'pathfinder-generated'  # folder of generated sets under the data root
  c.max_length = 16384             # 128 x 128 pixels, fixed
  c.batch_size = 64                # LRA
  c.eval_batch_size = 64
  c.num_train_steps = 500000       # LRA
  c.warmup_steps = 2500            # LRA
  c.schedule = 'cosine'            # LRA: linear warmup, then cosine decay
  c.learning_rate = 1e-3           # LRA (the Luna paper has no Path-X row)
  c.grad_clip_norm = 1.0           # LRA
  c.eval_every = 10000
  c.checkpoint_every = 10000

  # Data (docs/data.md): generating 200k images of 128 px takes long, so it is never implicit.
  c.pathfinder = ml_collections.ConfigDict()
  c.pathfinder.resolution = 128    # pixels per side
  c.pathfinder.difficulty = 'hard'  # 'easy' | 'intermediate' | 'hard' (the paper's Path-X)
  # True leaves out missing or empty PNGs with a warning; False stops at the first with a
  # DataError naming it.
  c.pathfinder.skip_bad_images = False
  c.pathfinder.generate_if_missing = False  # run data/generate_pathfinder.py (above) instead
  c.pathfinder.num_images = 200000  # generation only: 80/10/10 train/val/test in file order
  c.pathfinder.images_per_batch = 1000  # generation only: images per imgs/<batch> folder
  c.pathfinder.seed = 0            # generation seed (independent of the training seed)

  # Model: LRA's Path-X size.
  m = c.model
  m.dim = 32                       # emb_dim
  m.num_heads = 2
  m.num_layers = 1
  m.ffn_dim = 32                   # mlp_dim (LRA's qkv_dim 16 has no counterpart here)
  m.classifier_dim = 32
  m.dropout = 0.2                  # Luna paper Table 4, Pathfinder row (no Path-X row)
  m.head = 'mean'                  # LRA's table (MEAN); override with --config.model.head=cls
  m.mask_padding = False           # pixel 0 is black, not padding (docs/data.md)
  config_lib.set_model(c, arg.model)

  if arg.paper:
    # The model's own paper's protocol: S4D's has a Path-X run; the Luna protocol is refused in
    # one line naming the tasks that have one (the Luna authors released no Path-X run).
    protocols.use_authors_protocol(c)

  if arg.quick:
    # 400 freshly generated 128 px images (in their own folder, dataset_name, so they never
    # mix with the full set), full 16384-token inputs, a tiny model: a
    # smoke test of the pipeline at Path-X length, not a result.
    c.data_source = 'generated'
    c.dataset_name = 'pathx-quick'
    c.pathfinder.generate_if_missing = True
    c.pathfinder.num_images = 400
    c.pathfinder.images_per_batch = 200
    c.batch_size = 4
    c.eval_batch_size = 4
    c.num_train_steps = 100
    c.warmup_steps = 10
    c.eval_every = 100
    c.checkpoint_every = 100
    c.log_every = 20
    m.dim, m.num_heads, m.num_layers, m.ffn_dim, m.classifier_dim = 16, 2, 1, 32, 32
    m.dropout = m.attention_dropout = 0.0
  if arg.mid:
    raise ValueError('configs/pathx.py has no mid size: Path-X is long only at 128 x 128 '
                     '(16,384 tokens), beyond a CPU; configs/pathfinder.py:<model>,mid is the '
                     'mid pixel task (docs/mid.md).')
  if arg.fp16:
    m.dtype = 'float16'            # steps.py turns dynamic loss scaling on for float16
  return c
