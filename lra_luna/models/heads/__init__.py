"""Heads on top of the encoder: classification (`classification`: pooling and the MLP) and
pretraining's token logits (`token_prediction`: masked and next-token objectives)."""
