"""Model registry: `build(config, vocab)` picks the architecture by `model.type`."""
