#!/usr/bin/env bash
# The attention experiment (docs/attention-experiment.md): an attention-free RNN encoder-decoder
# (Cho et al. 2014), the attentional one (Bahdanau et al. 2015) and a Transformer, trained on
# Multi30k en->de for the same wall-clock budget each, scored on test_2016_flickr and on a
# synthetic long-sentence set, BLEU by source length (docs/attention_by_length.png) and training
# curves (docs/attention_curves.png); the results table goes to $WORK/attention_table.md.
#
#   scripts/attention_experiment.sh                  # BUDGET=15m per model (~50 min on 2 cores)
#   BUDGET=20s TINY=1 WORK=/tmp/att DOCS=/tmp/att scripts/attention_experiment.sh   # smoke run
#
# Environment: BUDGET (per model, nmt's duration syntax), WORK (outputs), DOCS (where the two
# PNGs go), TINY=1 (seq2seq-tiny / transformer-tiny sizes, for a smoke run), BEAM (default 5),
# DEVICE (default auto), TRAIN_ARGS (extra `nmt train` options; default: lr 2e-3, warmup 100, validation
# every 100 steps for all three), THREADS (torch threads per process; default: all cores),
# CORPUS (a folder with Multi30k's train/val/test_2016_flickr .en/.de), VOCAB (default 8000).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n "${THREADS:-}" ]] && export OMP_NUM_THREADS=$THREADS
BIN=${BIN:-.venv/bin}
WORK=${WORK:-work/attention}
DOCS=${DOCS:-docs}
BUDGET=${BUDGET:-15m}
BEAM=${BEAM:-5}
DEVICE=${DEVICE:-auto}
# One optimisation setting for all three: on a budget of minutes the presets' warmups (500 for the
# RNNs) would not end and their one validation per 500 steps would draw no curve.
TRAIN_ARGS=${TRAIN_ARGS:---set training.lr=0.002 --set training.warmup=100 --set training.valid_every=100}
VOCAB=${VOCAB:-8000}
C=${CORPUS:-corpora/multi30k}
SRC=en
TGT=de
mkdir -p "$WORK" "$DOCS"

# name, preset, one --set override or "-": the three systems (same data, budget and decoding)
if [[ "${TINY:-0}" == 1 ]]; then
  SYSTEMS=("seq2seq-noattn seq2seq-tiny model.attention=none"
           "seq2seq-bahdanau seq2seq-tiny model.attention=bahdanau"
           "transformer-small transformer-tiny -")
else
  SYSTEMS=("seq2seq-noattn seq2seq-noattn -"
           "seq2seq-bahdanau seq2seq-bahdanau -"
           "transformer-small transformer-small -")
fi

echo "== 1/6 preprocess: Multi30k $SRC->$TGT, joint SentencePiece $VOCAB (reused when present)"
if [[ ! -f "$WORK/data/manifest.json" ]]; then
  "$BIN/nmt" preprocess --src-lang "$SRC" --tgt-lang "$TGT" --train "$C/train" --valid "$C/val" \
    --test "$C/test_2016_flickr" -o "$WORK/data" --vocab-size "$VOCAB" --force
fi

echo "== 2/6 long-sentence test set (synthetic: k = 1..4 consecutive lines joined)"
"$BIN/python" scripts/make_long_test.py "$C/test_2016_flickr" -o "$WORK/long/test_long" --langs "$SRC,$TGT"

MODELS=()
LABELS=()
for sys in "${SYSTEMS[@]}"; do
  read -r name preset set <<<"$sys"
  over=()
  [[ "$set" != - ]] && over=(--set "$set")
  echo "== 3/6 train: $name (preset $preset ${over[*]}) for $BUDGET"
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
  "$BIN/nmt" train --preset "$preset" "${over[@]}" --data "$WORK/data" -o "$WORK/$name" \
    --max-time "$BUDGET" --device "$DEVICE" --force --quiet $TRAIN_ARGS
  MODELS+=("$WORK/$name")
  LABELS+=(--label "$name")
  echo "== 4/6 translate: test_2016_flickr and the long set with $name (beam $BEAM)"
  for set_name in test_2016_flickr long; do
    src_file="$C/test_2016_flickr.$SRC"
    [[ "$set_name" == long ]] && src_file="$WORK/long/test_long.$SRC"
    "$BIN/nmt" translate -m "$WORK/$name" "$src_file" -o "$WORK/$name/$set_name.hyp.$TGT" \
      --beam-size "$BEAM" --device "$DEVICE" --quiet
  done
done

echo "== 5/6 score: sacreBLEU and chrF on both test sets"
for set_name in test_2016_flickr long; do
  ref="$C/test_2016_flickr.$TGT"
  [[ "$set_name" == long ]] && ref="$WORK/long/test_long.$TGT"
  hyps=()
  for m in "${MODELS[@]}"; do hyps+=("$m/$set_name.hyp.$TGT"); done
  "$BIN/nmt" score "${hyps[@]}" -r "$ref" -m bleu -m chrf
  "$BIN/nmt" score "${hyps[@]}" -r "$ref" -m bleu -m chrf --json >"$WORK/scores.$set_name.json"
done

echo "== 6/6 BLEU by source length (long set) and training curves"
long_hyps=()
for m in "${MODELS[@]}"; do long_hyps+=("$m/long.hyp.$TGT"); done
"$BIN/nmt" score --by-length "$WORK/long/test_long.$SRC" "${long_hyps[@]}" -r "$WORK/long/test_long.$TGT" \
  -m bleu -m chrf "${LABELS[@]}" --plot "$DOCS/attention_by_length.png"
"$BIN/nmt" score --by-length "$WORK/long/test_long.$SRC" "${long_hyps[@]}" -r "$WORK/long/test_long.$TGT" \
  -m bleu "${LABELS[@]}" --json >"$WORK/by_length.json"
"$BIN/nmt" plot "${MODELS[@]}" -o "$DOCS/attention_curves.png" --x minutes --y bleu
"$BIN/nmt" plot "${MODELS[@]}" --x minutes --y bleu --json >"$WORK/curves.json"

# The markdown table: one row per system, sacreBLEU and chrF on both sets, BLEU by length.
"$BIN/python" - "$WORK" "$BUDGET beam $BEAM" "${SYSTEMS[@]}" >"$WORK/attention_table.md" <<'PY'
import json, sys
work, budget, systems = sys.argv[1], sys.argv[2], [s.split()[0] for s in sys.argv[3:]]
scores = {s: json.load(open(f"{work}/scores.{s}.json")) for s in ("test_2016_flickr", "long")}
by_len = json.load(open(f"{work}/by_length.json"))
buckets = list(dict.fromkeys(r["bucket"] for r in by_len))
lines = {r["bucket"]: r["lines"] for r in by_len}
def cell(rows, i, name):
    return next(f"{r['score']:.1f}" for r in rows[2 * i : 2 * i + 2] if r["name"].startswith(name))
print(f"Training budget per model and search: {budget}; sacreBLEU / chrF2 (signatures in the logs).\n")
head = ["system", "test2016 BLEU", "test2016 chrF", "long BLEU", "long chrF"]
head += [f"long {b} (n={lines[b]})" for b in buckets]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for i, name in enumerate(systems):
    row = [name]
    for s in ("test_2016_flickr", "long"):
        row += [cell(scores[s], i, "BLEU"), cell(scores[s], i, "chrF")]
    for b in buckets:
        r = next(r for r in by_len if r["system"] == name and r["bucket"] == b)
        row.append("-" if r["score"] is None else f"{r['score']:.1f}")
    print("| " + " | ".join(row) + " |")
PY
cat "$WORK/attention_table.md"
echo "wrote $WORK/attention_table.md, $DOCS/attention_by_length.png, $DOCS/attention_curves.png"
