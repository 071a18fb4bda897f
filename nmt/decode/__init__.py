"""Turning a trained model into text, whatever the engine: options, the Engine contract, search,
lines and paragraphs, constraints, rescoring. The engines themselves are `nmt.engines`."""
