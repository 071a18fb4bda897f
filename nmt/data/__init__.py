"""Corpora to binary training data: reading, cleaning, SentencePiece, encoding, batches."""
