"""The two training protocols of the task configs, and the one table of the Luna authors' LRA runs.

'lra' (every `configs/<task>.py:<model>`): LRA's model sizes and schedules with the Luna paper's
Table 4 rates, the same for every model, so that models compare with one another.
'paper' (`configs/<task>.py:<model>,paper`): the settings of the Luna authors' released LRA code,
which is what produced the paper's Table 1 (lra.md §3 "Luna reference LRA scripts", luna.md §5).

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
  """Sets config to the Luna authors' protocol for config.task (pack length l, from the model
  name, stays) and records config.protocol = 'paper'."""
  for field, value in authors_settings(config.task).items():
    section, _, key = field.rpartition('.')
    (config[section] if section else config)[key] = value
  config.protocol = 'paper'
