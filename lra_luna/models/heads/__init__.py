"""Heads on top of the encoder: classification (`classification`: pooling and the MLP)."""
