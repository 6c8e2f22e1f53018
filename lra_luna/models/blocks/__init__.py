"""Encoder blocks that are no attention, each bringing its own block by the block protocol
(`encoder/transformer.py`): S4D (`s4d`) and Mega (`mega`)."""
