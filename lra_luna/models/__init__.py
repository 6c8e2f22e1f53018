"""The models: attention (Luna, softmax, baselines, causal Luna), layers, LRA classifiers, plug-ins."""
