"""Encoder blocks that are no attention, each bringing its own block by the block protocol
(`encoder/transformer.py`): S4D (`s4d`), Mega (`mega`), S5 (`s5`) and LRU (`lru`)."""
