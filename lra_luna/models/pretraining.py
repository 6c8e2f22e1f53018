"""Pretraining models: the shared encoder (`encoder/`) with a token head
(`heads/token_prediction.py`) in place of the classification head, for the objectives of
`objectives/` (self-pretraining, Amos et al. 2024, §3). Fine-tuning (`classifier.py`) then starts
from exactly this encoder with a fresh classification head (`transfer_encoder`).
"""

from flax import nnx

from lra_luna.models.encoder import build_encoder, with_cls
from lra_luna.models.encoder.embedding import compute_dtype
from lra_luna.models.heads.token_prediction import TokenPredictionHead
from lra_luna.models.model_config import ModelConfig

# The parameter and constant subtree that classifiers and token predictors share.
ENCODER = 'encoder'


class TokenPredictor(nnx.Module):
  """Encoder + token head: ids [B, n] -> outputs [B, n + 1, outputs] over the sequence with
  [CLS] at position 0 (the masked objective reads rows 1..n, the causal one rows 0..n-1):
  logits over the vocabulary (outputs = vocab_size), or one pixel value (outputs = 1, the L1
  loss)."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, outputs: int | None = None):
    self.mask_padding = cfg.mask_padding
    self.encoder = build_encoder(cfg, rngs)
    self.token_head = TokenPredictionHead(cfg.dim, outputs or cfg.vocab_size, init=cfg.init,
                                          dtype=compute_dtype(cfg), rngs=rngs)

  def __call__(self, ids, *, deterministic=True, rngs=None):
    ids, mask = with_cls(ids, self.encoder.embedding.cls_id, self.mask_padding)
    x, _ = self.encoder(ids, mask, deterministic=deterministic, rngs=rngs)
    return self.token_head(x)


def build_token_predictor(cfg: ModelConfig, seed: int, outputs: int | None = None
                          ) -> TokenPredictor:
  """The pretraining model that `cfg` describes, its parameters drawn from `seed`; `outputs` per
  position (default: the vocabulary's logits)."""
  return TokenPredictor(cfg, nnx.Rngs(params=seed), outputs)


def transfer_encoder(state: dict, pretrained: dict) -> dict:
  """`state` ({'params', 'constants', ...} of a classifier) with its encoder's parameters and
  constants replaced by those of `pretrained` (a token predictor's state): the same arrays,
  every other leaf (the classification head) as it was."""
  new = dict(state)
  for part in ('params', 'constants'):
    if ENCODER in state[part]:
      new[part] = {**state[part], ENCODER: pretrained[part][ENCODER]}
  return new
