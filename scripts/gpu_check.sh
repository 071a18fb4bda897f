#!/usr/bin/env bash
# The GPU check as one script: train transformer-base on Multi30k with precision auto (bf16 where
# supported) for GPU_TIME, then report tokens/s, GPU memory and BLEU, and the translation benchmark
# on the GPU. Results land in ${OUT:-work/gpu}.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=${OUT:-work/gpu}
GPU_TIME=${GPU_TIME:-4m}
DEVICE=${DEVICE:-cuda}
C=corpora/multi30k
mkdir -p "$OUT"
"$BIN/python" scripts/fetch_corpus.py multi30k --dest "$C" ${NMT_CORPUS_MIRROR:+--mirror "$NMT_CORPUS_MIRROR"}
"$BIN/nmt" preprocess --src-lang en --tgt-lang de --train "$C/train" --valid "$C/val" \
  --test "$C/test_2016_flickr" -o "$OUT/data" --vocab-size 8000 --force --quiet
"$BIN/python" -c "import torch; print('device:', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
"$BIN/nmt" train --preset transformer-base --data "$OUT/data" -o "$OUT/base" --device "$DEVICE" \
  --max-time "$GPU_TIME" --force --set training.precision=auto --set training.max_tokens=16000 \
  --set training.warmup=400 --set training.schedule=linear --set training.valid_every=300 \
  2>&1 | tee "$OUT/train.log"
"$BIN/nmt" evaluate -m "$OUT/base" --src "$C/test_2016_flickr.en" -r "$C/test_2016_flickr.de" \
  --device "$DEVICE" --json > "$OUT/bleu.json"
cat "$OUT/bleu.json"
"$BIN/python" scripts/bench_model.py --device "$DEVICE" --presets transformer-small,transformer-base \
  --precisions fp32,bf16 --json "$OUT/bench_model.json"
"$BIN/python" scripts/bench_translate.py -m "$OUT/base" --device "$DEVICE" --batch-tokens 16000 \
  --repeats 3 --precision fp32,bf16 | tee "$OUT/bench_translate.txt"
