"""The engine every method shares: inputs, batches, neuron capture, registries, progress."""
