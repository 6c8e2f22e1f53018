"""The two training protocols of the task configs, and the tables of the authors' LRA runs.

'lra' (every `configs/<task>.py:<model>`): LRA's model sizes and schedules with the Luna paper's
Table 4 rates, the same for every model, so that models compare with one another.
'paper' (`configs/<task>.py:<model>,paper`): the model's own paper's protocol (its registry
entry's `paper_protocol`). For Luna, the Transformer and the 2021 baselines: the settings of the
Luna authors' released LRA code, which is what produced the Luna paper's Table 1 (lra.md §3
"Luna reference LRA scripts", luna.md §5). For S4D: the S4 authors' LRA experiment configs
(S4D_TASKS below). For Mega and Mega-chunk: the Mega authors' LRA scripts (MEGA_TASKS below).

Sources, cited below by these names:
  script  examples/luna/README.lra.md of the authors' fairseq fork (XuezheMax/fairseq-apollo,
          2021-11-18 release, commit 6135e5b): the five training commands.
  arch    fairseq/models/luna_lra/model.py of the same commit: the `luna_lra_<task>`
          architectures (sizes, classifier, pooling, max_positions) and their defaults.
  task    fairseq/tasks/long_range_arena.py of the same commit: [CLS] prepended to the binarised
          lines (which end in fairseq's end-of-sequence token), then cut to max_positions.
  Table 4 the Luna paper's appendix table of tuned rates.
Where Table 4 and the scripts disagree the scripts win (they are what ran): Retrieval lr 5e-4
(Table 4: 5e-5), Image dropout 0.3 / attention dropout 0.1 (Table 4: 0.1 / 0.3).
"""

import dataclasses

from lra_luna import tasks

from lra_luna import registry

PROTOCOLS = ('lra', 'paper')


@dataclasses.dataclass(frozen=True)
class AuthorsTask:
  """One row of the authors' per-task settings (field names are the config fields they set)."""
  dim: int                  # model.dim: --encoder-embed-dim (arch)
  ffn_dim: int              # model.ffn_dim: --encoder-ffn-embed-dim (arch)
  num_heads: int            # model.num_heads: --encoder-attention-heads (arch); pack heads equal
  num_layers: int           # model.num_layers: --encoder-layers (arch; ListOps: script)
  classifier_dim: int       # model.classifier_dim: classifier_out_dim (arch)
  learning_rate: float      # --lr (script)
  weight_decay: float       # --weight-decay (script)
  warmup_steps: int         # --warmup-updates (script)
  num_train_steps: int      # --max-update (script)
  batch_size: int           # --batch-size (script)
  dropout: float            # model.dropout: --dropout (script, else arch default 0.1)
  attention_dropout: float  # model.attention_dropout: --attention-dropout (script, else 0.1)
  init: str                 # model.init: 'bert' where apply_bert_init is on (arch, script)
  head: str                 # model.head: sen_rep_type 'first' -> 'cls', 'mp' -> 'mean' (arch)
  max_length: int           # tokens after the end-of-sequence token is appended ([CLS] not
                            # counted): max_positions - 1 (arch), but see Image


# The authors' LRA runs, one row per task (lra.md §3, luna.md §5; sources in each comment).
AUTHORS_TASKS = {
    # script: --lr 1e-4 --weight-decay 1e-4 --warmup 1000 --max-update 5000 --batch 32
    # --apply-bert-init --encoder-layers 1; arch base: 512 / 2048 / 8 heads, classifier 2048,
    # max_positions 2001; dropout 0.1 / 0.1 (arch default).
    'listops': AuthorsTask(512, 2048, 8, 1, 2048, 1e-4, 1e-4, 1000, 5000, 32, 0.1, 0.1, 'bert',
                           'cls', 2000),
    # script: --lr 5e-5 --dropout 0.3 --attention-dropout 0.3 --weight-decay 1e-4, 8000 / 20000,
    # batch 32; arch luna_lra_imdb: 256 / 1024 / 4 / 4, classifier 1024, max_positions 4002,
    # BERT init (arch base default).
    'text': AuthorsTask(256, 1024, 4, 4, 1024, 5e-5, 1e-4, 8000, 20000, 32, 0.3, 0.3, 'bert',
                        'cls', 4001),
    # script: --lr 5e-4 (Table 4: 5e-5; we follow the script), --weight-decay 1e-4, 8000 / 20000,
    # batch 32; arch luna_lra_aan: 128 / 512 / 4 / 4, classifier 512 on [second, first],
    # max_positions 4002 per document, no BERT init.
    'retrieval': AuthorsTask(128, 512, 4, 4, 512, 5e-4, 1e-4, 8000, 20000, 32, 0.1, 0.1,
                             'reference', 'cls', 4001),
    # script: --lr 5e-3 --dropout 0.3 --attention-dropout 0.1 (Table 4: 0.1 / 0.3; we follow the
    # script), --weight-decay 0, 4000 / 35000, batch 256; arch luna_lra_cifar10: 64 / 128 / 8 / 1,
    # classifier 128, max_positions 1024. That limit cuts [CLS] + 1024 pixels + EOS to 1024
    # tokens: the last pixel and the EOS are dropped, a bug we do not copy: max_length 1025 keeps
    # every pixel and the EOS (--config.max_length=1023 reproduces the authors' cut exactly).
    'image': AuthorsTask(64, 128, 8, 1, 128, 5e-3, 0.0, 4000, 35000, 256, 0.3, 0.1, 'reference',
                         'cls', 1025),
    # script: --lr 1e-3 --dropout 0.2 --weight-decay 0, 4000 / 62500; arch luna_lra_pf32:
    # 128 / 128 / 4 / 1, classifier 256, sen_rep_type 'mp', max_positions 1026. Batch 256: the
    # release that came with the paper (2021-11-18); the script's 512 is a 2022 edit made with
    # the authors' later Mega work, after the Luna results.
    'pathfinder': AuthorsTask(128, 128, 4, 1, 256, 1e-3, 0.0, 4000, 62500, 256, 0.2, 0.1,
                              'reference', 'mean', 1025),
}

# What every authors' run shares: config field -> value (sources in the comments).
AUTHORS_COMMON = {
    'schedule': 'rsqrt',              # --lr-scheduler inverse_sqrt, warmup from 1e-7 (script)
    'adam_b1': 0.9,                   # --adam-betas '(0.9, 0.98)' (script)
    'adam_b2': 0.98,
    'adam_eps': 1e-8,                 # fairseq's Adam default
    'grad_clip_norm': 0.0,            # --clip-norm 0.0 (script)
    'append_eos': True,               # fairseq-preprocess ends every line with </s> (task)
    'model.positions': 'learned',     # learned_pos_embedding=True (arch)
    'model.embedding_layernorm': True,  # layernorm_embedding=True (arch)
    'model.normalize_before': False,  # post-LN layers (luna_lra_encoder default)
    'model.tie_kv': False,            # tie_kv False (arch)
    'model.num_pack_heads': 0,        # num_projected_attention_heads = heads (arch)
    'model.contextual_p': True,       # P' feeds the next layer (luna_lra_encoder)
    'model.p_init': 'learned',        # projected_embeddings N(0, D^-1/2) (luna_lra_encoder)
    'model.classifier_bias': False,   # sentence_projection_layer bias=False (arch)
    'model.mean_includes_cls': True,  # 'mp' is x.mean(dim=0) over every position (encoder)
    'model.dual_head_layers': 1,      # classifier_layers = 1 on the pair (arch)
    'model.pair_features': 'concat_reversed',  # cat([second doc, first doc]) (arch forward)
}


def authors_settings(task: str) -> dict:
  """Config field -> value of the authors' protocol for `task` (AUTHORS_TASKS + AUTHORS_COMMON).

  ValueError naming the tasks that have one (the authors released no Path-X run).
  """
  if task not in AUTHORS_TASKS:
    raise ValueError(f"The 'paper' variant (the Luna authors' protocol) has no {task!r} run: "
                     f'the authors released scripts for {", ".join(AUTHORS_TASKS)} only; drop '
                     f"',paper' to train {task} under the LRA protocol.")
  model_fields = ('dim', 'ffn_dim', 'num_heads', 'num_layers', 'classifier_dim', 'dropout',
                  'attention_dropout', 'init', 'head')
  row = dataclasses.asdict(AUTHORS_TASKS[task])
  settings = {(f'model.{k}' if k in model_fields else k): v for k, v in row.items()}
  return {**settings, **AUTHORS_COMMON}


def use_authors_protocol(config) -> None:
  """Sets config to the protocol of its model's own paper for config.task (the registry entry's
  paper_protocol: the Luna authors' for Luna, the Transformer and the 2021 baselines, the S4
  authors' for S4D, the Mega authors' for Mega and Mega-chunk, the S5 authors' for S5, the LRU
  paper's for LRU; Luna's pack length l, from the
  model name, stays) and records config.protocol = 'paper'."""
  settings = {'luna': authors_settings, 's4d': s4d_settings, 'mega': mega_settings,
              's5': s5_settings, 'lru': lru_settings}
  protocol = registry.get(config.model_name).paper_protocol
  for field, value in settings[protocol](config.task).items():
    *sections, key = field.split('.')
    node = config
    for section in sections:
      node = node[section]
    node[key] = value
  config.protocol = 'paper'


# ----------------------------------------------------------------------------------------------
# S4D: the S4 authors' LRA runs. Source, cited as 'exp': configs/experiment/lra/s4-<task>.yaml of
# state-spaces/s4 (the S4 v3 / S4D-paper settings; commit e757cef), with configs/model/s4.yaml,
# configs/model/base.yaml, configs/optimizer/adamw.yaml and configs/dataset/<task>.yaml for the
# defaults they keep. Epochs are the scheduler's num_training_steps there (epochs x batches).
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class S4DTask:
  """One row of the S4 authors' per-task LRA settings (exp)."""
  dim: int                  # model.dim: model.d_model
  num_layers: int           # model.num_layers: model.n_layers
  state_dim: int            # attention_options.state_dim: model.layer.d_state
  prenorm: bool             # attention_options.prenorm: model.prenorm
  dropout: float            # model.dropout: model.dropout
  learning_rate: float      # optimizer.lr
  weight_decay: float       # optimizer.weight_decay
  batch_size: int           # loader.batch_size
  num_train_steps: int      # scheduler.num_training_steps (= max_epochs x batches per epoch)
  warmup_steps: int         # scheduler.num_warmup_steps
  dt_min: float             # attention_options.dt_min: model.layer.dt_min
  num_ssm: int              # attention_options.num_ssm: model.layer.n_ssm (null: 0, per feature)


S4D_TASKS = {
    # exp s4-listops: 40 epochs of 96k / 32; d_state 4, post-norm; dt at the main rate (lr.dt null).
    'listops': S4DTask(256, 6, 4, False, 0.0, 1e-2, 0.05, 32, 120000, 12000, 1e-3, 1),
    # exp s4-imdb: 32 epochs of 25k / 16; l_max 4096.
    'text': S4DTask(256, 6, 4, True, 0.0, 1e-2, 0.05, 16, 50000, 5000, 1e-3, 1),
    # exp s4-aan: 20 epochs of 147k / 64 (rounded to 50000 there).
    'retrieval': S4DTask(256, 6, 4, True, 0.0, 1e-2, 0.05, 64, 50000, 5000, 1e-3, 1),
    # exp s4-cifar: 200 epochs of 45k / 50, grayscale, d_state 64, post-norm, dropout 0.1.
    'image': S4DTask(512, 6, 64, False, 0.1, 1e-2, 0.05, 50, 180000, 18000, 1e-3, 1),
    # exp s4-pathfinder: 200 epochs of 160k / 64.
    'pathfinder': S4DTask(256, 6, 64, True, 0.0, 4e-3, 0.05, 64, 500000, 50000, 1e-3, 0),
    # exp s4-pathx: 50 epochs of 160k / 16; dt_min 1e-4.
    'pathx': S4DTask(256, 6, 64, True, 0.0, 1e-3, 0.05, 16, 500000, 50000, 1e-4, 0),
}

# What every S4 authors' LRA run shares (sources in the comments).
S4D_COMMON = {
    'schedule': 'cosine',             # scheduler cosine_warmup: linear warmup, cosine to 0 (exp)
    'adam_b1': 0.9,                   # AdamW betas (0.9, 0.999) (optimizer/adamw.yaml)
    'adam_b2': 0.999,
    'adam_eps': 1e-8,                 # PyTorch's AdamW default
    'grad_clip_norm': 0.0,            # trainer gradient_clip_val null
    'ssm_learning_rate': 1e-3,        # model.layer.lr 0.001 for A (and B, dt), weight decay 0
    'model.positions': 'none',        # encoder 'embedding' only (pipeline)
    'model.embedding_layernorm': False,
    'model.head': 'mean',             # decoder mode 'pool' over the real tokens (use_lengths)
    'model.pair_features': 'full',    # Retrieval: RetrievalHead nli=True: [a, b, a*b, a-b]
    'model.dual_head_layers': 1,      # one hidden layer of d_model (decoder d_model null)
    'model.attention_options.bidirectional': True,  # model.layer.bidirectional
    'model.attention_options.dt_max': 0.1,         # model.layer.dt_max
}


def s4d_settings(task: str) -> dict:
  """Config field -> value of the S4 authors' LRA protocol for `task` (S4D_TASKS + S4D_COMMON):
  every task, Path-X included."""
  row = S4D_TASKS[task]
  options = 'model.attention_options.'
  return {'model.dim': row.dim, 'model.classifier_dim': row.dim,
          'model.num_layers': row.num_layers, 'model.dropout': row.dropout,
          options + 'state_dim': row.state_dim, options + 'prenorm': row.prenorm,
          options + 'dt_min': row.dt_min, options + 'num_ssm': row.num_ssm,
          'learning_rate': row.learning_rate,
          'weight_decay': row.weight_decay, 'batch_size': row.batch_size,
          'num_train_steps': row.num_train_steps, 'warmup_steps': row.warmup_steps,
          **S4D_COMMON}


# ----------------------------------------------------------------------------------------------
# Mega: the Mega authors' LRA runs. Sources, cited as 'script': examples/mega/README.lra.md of
# facebookresearch/mega (commit aeaa4b4), the six training commands; 'arch': the mega_lra_<task>
# architectures and base_architecture in fairseq/models/lra/model.py of the same commit.
# Batch = --batch-size x --update-freq (x 8 GPUs on Path-X). Their model options per task
# (attention function, norm, pre/post-norm, truncation, chunk size) are the registry's
# task_options of 'mega' and 'mega_chunk', the same under both protocols.
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MegaTask:
  """One row of the Mega authors' per-task LRA settings (script, arch)."""
  dim: int                  # model.dim: encoder_embed_dim (arch)
  z_dim: int                # attention_options.z_dim: z_dim (arch)
  hidden_dim: int           # attention_options.hidden_dim: encoder_hidden_dim v (arch; 2 D)
  num_layers: int           # model.num_layers: --encoder-layers (script)
  learning_rate: float      # --lr (script)
  weight_decay: float       # --weight-decay (script; fairseq's Adam decays decoupled, as AdamW)
  batch_size: int           # --batch-size x --update-freq (script)
  num_train_steps: int      # --max-update = --total-num-update (script)
  warmup_steps: int         # --warmup-updates (script)
  dropout: float            # model.dropout: --dropout (script); attention and act dropout 0
  max_length: int           # tokens ([CLS] not counted): max_positions (arch), EOS included


MEGA_TASKS = {
    # script: lr 1e-3, wd 0.01, batch 64, 90000 / 3000, dropout 0.1, layernorm; arch mega_lra_listop
    # 80 / z 64 / v 160, max_positions 2002.
    'listops': MegaTask(80, 64, 160, 6, 1e-3, 0.01, 64, 90000, 3000, 0.1, 2001),
    # script: lr 4e-3, wd 0.01, batch 25 x 2, 25000 / 10000, scalenorm; arch mega_lra_imdb
    # 128 / 64 / 256, max_positions 4002.
    'text': MegaTask(128, 64, 256, 4, 4e-3, 0.01, 50, 25000, 10000, 0.1, 4001),
    # script: lr 3e-3, wd 0.04, batch 8 x 8, 91960 / 10000, scalenorm; arch mega_lra_aan 128 / 64 /
    # 256, max_positions 4002 per document.
    'retrieval': MegaTask(128, 64, 256, 6, 3e-3, 0.04, 64, 91960, 10000, 0.1, 4001),
    # script: lr 1e-2, wd 0.02, batch 50, 180000 / 9000, dropout 0, laplace, batchnorm, prenorm;
    # arch mega_lra_cifar10 160 / 96 / 320.
    'image': MegaTask(160, 96, 320, 8, 1e-2, 0.02, 50, 180000, 9000, 0.0, 1024),
    # script: lr 1e-2, wd 0.01, batch 128, 250000 / 50000, dropout 0, laplace, batchnorm, prenorm;
    # arch mega_lra_pf32 128 / 64 / 256.
    'pathfinder': MegaTask(128, 64, 256, 6, 1e-2, 0.01, 128, 250000, 50000, 0.0, 1024),
    # script: lr 1e-2, wd 0.01, batch 2 x 8 x 8 GPUs, 125000 / 25000 (warmup power 2: a quadratic
    # warmup, linear here), laplace, syncbatchnorm, prenorm; arch mega_lra_pf128 64 / 32 / 128,
    # truncation 4096.
    'pathx': MegaTask(64, 32, 128, 4, 1e-2, 0.01, 128, 125000, 25000, 0.0, 16384),
}

# What every Mega authors' LRA run shares (sources in the comments).
MEGA_COMMON = {
    'schedule': 'linear',             # --lr-scheduler linear_decay to 0, warmup from 1e-7 (script)
    'adam_b1': 0.9,                   # --adam-betas '(0.9, 0.98)' --adam-eps 1e-8 (script)
    'adam_b2': 0.98,
    'adam_eps': 1e-8,
    'grad_clip_norm': 1.0,            # --clip-norm 1.0 (script)
    'model.num_heads': 1,             # single-head gated attention
    'model.attention_dropout': 0.0,   # --attention-dropout 0.0 (script)
    'model.attention_options.hidden_dropout': 0.0,  # --act-dropout 0.0 (script)
    'model.attention_options.ema_dim': 16,          # --n-dim 16 (script)
    'model.init': 'reference',        # apply_bert_init False (arch); the block inits itself
    'model.classifier_bias': False,   # sentence_projection_layer bias=False (model.py)
    'model.mean_includes_cls': False,  # 'mp' averages the real tokens; no [CLS] there
    'model.dual_head_layers': 1,      # classifier_layers 1 on the pair (arch)
    'model.pair_features': 'concat_reversed',  # cat([second doc, first doc]) (model.py forward)
}


def mega_settings(task: str) -> dict:
  """Config field -> value of the Mega authors' LRA protocol for `task` (MEGA_TASKS +
  MEGA_COMMON): every task, Path-X included."""
  row = MEGA_TASKS[task]
  options = 'model.attention_options.'
  return {'model.dim': row.dim, 'model.ffn_dim': row.hidden_dim,
          'model.classifier_dim': 2 * row.dim, 'model.num_layers': row.num_layers,
          'model.dropout': row.dropout, options + 'z_dim': row.z_dim,
          options + 'hidden_dim': row.hidden_dim, 'learning_rate': row.learning_rate,
          'weight_decay': row.weight_decay, 'batch_size': row.batch_size,
          'num_train_steps': row.num_train_steps, 'warmup_steps': row.warmup_steps,
          'max_length': row.max_length,
          # Text tasks end every line with fairseq's end-of-sequence token; pixels come raw.
          'append_eos': not tasks.get(task).full_length, **MEGA_COMMON}


# ----------------------------------------------------------------------------------------------
# S5: the S5 authors' LRA runs. Source, cited as 'script': bin/run_experiments/run_lra_<task>.sh
# of lindermanlab/S5 (commit 3c18fdb), with run_train.py's defaults for what a script leaves out
# and s5/train.py, s5/train_helpers.py for how they are used: the peak rate is lr_factor x
# ssm_lr_base, the SSM's (Lambda, B~, steps) is ssm_lr_base; one linear warmup epoch (warmup_end)
# then cosine annealing to lr_min 0 per step; steps = epochs x floor(train examples / batch).
# Their model choices per task (P, J, C_init, activation, clip_eigs, dt_min) are the registry's
# task_options of 's5', the same under both protocols.
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class S5Task:
  """One row of the S5 authors' per-task LRA settings (script)."""
  dim: int                  # model.dim: --d_model
  num_layers: int           # model.num_layers: --n_layers
  dropout: float            # model.dropout: --p_dropout
  ssm_learning_rate: float  # --ssm_lr_base
  lr_factor: float          # --lr_factor: learning_rate = lr_factor x ssm_lr_base
  weight_decay: float       # --weight_decay
  batch_size: int           # --bsz
  epochs: int               # --epochs
  train_examples: int       # training set size of their loader (epochs -> steps)
  warmup_epochs: int        # --warmup_end


S5_TASKS = {
    # script: 8 x 128, bsz 50, 40 epochs, lr_factor 3, ssm_lr 1e-3, wd 0.04, dropout 0; 96k.
    'listops': S5Task(128, 8, 0.0, 1e-3, 3, 0.04, 50, 40, 96000, 1),
    # script: 6 x 256, bsz 50, 35 epochs, lr_factor 4, wd 0.07, dropout 0.1, warmup_end 0; 25k.
    'text': S5Task(256, 6, 0.1, 1e-3, 4, 0.07, 50, 35, 25000, 0),
    # script: 6 x 128, bsz 32, 20 epochs, lr_factor 2, wd 0.05, dropout 0; 147,086 pairs.
    'retrieval': S5Task(128, 6, 0.0, 1e-3, 2, 0.05, 32, 20, 147086, 1),
    # script: 6 x 512, bsz 50, 250 epochs, lr_factor 4.5, wd 0.07, dropout 0.1; 45k (10% val).
    'image': S5Task(512, 6, 0.1, 1e-3, 4.5, 0.07, 50, 250, 45000, 1),
    # script: 6 x 192, bsz 64, 200 epochs, lr_factor 5, ssm_lr 9e-4, wd 0.03, dropout 0.05; 160k.
    'pathfinder': S5Task(192, 6, 0.05, 9e-4, 5, 0.03, 64, 200, 160000, 1),
    # script: 6 x 128, bsz 32, 75 epochs, lr_factor 3, ssm_lr 6e-4, wd 0.06, dropout 0; 160k.
    'pathx': S5Task(128, 6, 0.0, 6e-4, 3, 0.06, 32, 75, 160000, 1),
}

# What every S5 authors' LRA run shares (sources in the comments).
S5_COMMON = {
    'schedule': 'cosine',             # linear_warmup then cosine_annealing to lr_min 0 (train.py)
    'adam_b1': 0.9,                   # optax.adam / adamw defaults (train_helpers.py)
    'adam_b2': 0.999,
    'adam_eps': 1e-8,
    'grad_clip_norm': 0.0,            # no clipping (train_helpers.py)
    'model.head': 'mean',             # mode 'pool': masked mean over the real tokens (seq_model.py)
    'model.pair_features': 'full',    # Retrieval: RetrievalDecoder on [a, b, a*b, a-b]
    'model.dual_head_layers': 1,      # one GELU hidden layer of d_model (RetrievalDecoder)
    'model.attention_options.bidirectional': True,  # --bidirectional=True (script)
    'model.attention_options.prenorm': True,        # --prenorm default True (run_train.py)
}


def s5_settings(task: str) -> dict:
  """Config field -> value of the S5 authors' LRA protocol for `task` (S5_TASKS + S5_COMMON):
  every task, Path-X included."""
  row = S5_TASKS[task]
  steps_per_epoch = row.train_examples // row.batch_size
  return {'model.dim': row.dim, 'model.classifier_dim': row.dim,
          'model.num_layers': row.num_layers, 'model.dropout': row.dropout,
          'learning_rate': row.lr_factor * row.ssm_learning_rate,
          'ssm_learning_rate': row.ssm_learning_rate, 'weight_decay': row.weight_decay,
          'batch_size': row.batch_size, 'num_train_steps': row.epochs * steps_per_epoch,
          'warmup_steps': row.warmup_epochs * steps_per_epoch, **S5_COMMON}


def lru_settings(task: str) -> dict:
  """The LRU paper's LRA protocol: not in the suite. Its per-task settings (Orvieto et al. 2023,
  Appendix) were not found in a stored copy of the paper, and the authors released no LRA code;
  ValueError saying so in one line."""
  raise ValueError(f"The 'paper' variant of lru has no {task!r} run: the LRU paper's per-task "
                   'LRA settings are not in this suite (docs/s5_lru.md); drop \',paper\' to '
                   f'train lru on {task} under the LRA protocol.')
