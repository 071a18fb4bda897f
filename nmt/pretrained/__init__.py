"""Pretrained models brought in as ordinary model directories (`nmt import`): Hugging Face Marian
checkpoints, as OPUS-MT publishes them."""
