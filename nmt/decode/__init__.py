"""Turning a trained model into text: search, translators, forced decoding, line I/O."""
