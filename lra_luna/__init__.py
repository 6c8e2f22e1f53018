"""lra_luna: Luna (Ma et al., NeurIPS 2021) and baselines on the Long Range Arena, in JAX/Flax NNX."""
