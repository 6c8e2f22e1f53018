"""Building blocks every model shares: Linear with float32 parameters and hand-written kernel
gradients, 16-bit dropout masks, LayerNorm and the feed-forward block."""
