"""Attention mechanisms, one file each: `softmax` (the Transformer), `luna` (pack and unpack),
`causal_luna`, the LRA baselines (`baselines`, `sparse_patterns`, `block_sparse`, `reformer`,
`synthesizer`), `rotary` (RoFormer's rotary positions) and `base`, what they are all built from.

The names below are the plug-in API (README, "Your own attention"): what an attention written
outside the package builds on, importable as `from lra_luna.models import attention`.
"""

from lra_luna.models.attention.base import (MASKED_SCORE, QKVOutAttention, RandomFeatures,
                                            check_option, einsum32, is_count, masked_softmax,
                                            merge_heads, project_together, projection,
                                            projection_init, scaled_dot_product, split_heads,
                                            xavier_uniform)
from lra_luna.models.attention.luna import LunaAttention
from lra_luna.models.attention.rotary import apply_rotary, rotate_queries_and_keys
from lra_luna.models.attention.softmax import (SoftmaxAttention, attention_implementation,
                                               current_platform, fused_implementation,
                                               pad_to_even, target_platform)

__all__ = ['MASKED_SCORE', 'QKVOutAttention', 'RandomFeatures', 'check_option', 'einsum32',
           'is_count', 'masked_softmax', 'merge_heads', 'project_together', 'projection',
           'projection_init', 'scaled_dot_product', 'split_heads', 'xavier_uniform', 'LunaAttention',
           'SoftmaxAttention', 'apply_rotary', 'rotate_queries_and_keys',
           'attention_implementation', 'current_platform',
           'fused_implementation', 'pad_to_even', 'target_platform']
