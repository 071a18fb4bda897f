#!/usr/bin/env bash
# The attention experiment (docs/attention-experiment.md) on naturally long sentences: five systems
# trained on wmt-news-de-en (German->English news) for the same wall-clock budget each, translated
# with beam search, scored with sacreBLEU and chrF on newstest2014 by source length (buckets up to
# 50+ words). Writes BLEU by length (docs/attention_by_length.png), BLEU by length relative to each
# system's 0-10-word bucket (docs/attention_relative.png), the validation curves
# (docs/attention_curves.png) and the tables to $WORK/attention_table.md.
#
#   scripts/attention_experiment.sh                   # BUDGET=20m per system, JOBS=2 THREADS=1 (~75 min)
#   BUDGET=20s TINY=1 WORK=/tmp/att DOCS=/tmp/att scripts/attention_experiment.sh   # smoke run
#
# Environment: BUDGET (per system, nmt's duration syntax), JOBS (systems trained at once; default 2),
# THREADS (torch threads per process; default 1, so two systems on two cores do not share one),
# WORK (outputs), DOCS (where the PNGs go), TINY=1 (tiny sizes, for a smoke run), BEAM (default 5),
# DEVICE (default auto), TRAIN_ARGS (extra `nmt train` options, the same for all five), VOCAB
# (default 8000), MIRROR (a folder of corpora or of wmt-news-de-en's .gz files; default
# $NMT_CORPUS_MIRROR, else ../shared/corpora). A system whose test translation exists in $WORK is
# reused, not retrained: remove $WORK/NAME to run it again. ONLY="name name" trains only those
# systems; the scores and figures cover every system whose translation is in $WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
WORK=${WORK:-work/attention}
DOCS=${DOCS:-docs}
BUDGET=${BUDGET:-20m}
JOBS=${JOBS:-2}
export OMP_NUM_THREADS=${THREADS:-1}
BEAM=${BEAM:-5}
DEVICE=${DEVICE:-auto}
# One optimisation setting for all five: on a budget of minutes the RNN presets' warmup (500) would
# barely end; validation greedy-decodes the first 1,000 lines of newstest2013 every 200 updates.
TRAIN_ARGS=${TRAIN_ARGS:---set training.lr=0.002 --set training.warmup=100 --set training.valid_every=200 --set training.valid_max_sentences=1000}
VOCAB=${VOCAB:-8000}
MIRROR=${MIRROR:-${NMT_CORPUS_MIRROR:-../shared/corpora}}
C=corpora/wmt-news-de-en
SRC=de
TGT=en
TEST=newstest2014
mkdir -p "$WORK" "$DOCS"

# name, preset, one --set override or "-": the five systems (same data, budget and decoding)
if [[ "${TINY:-0}" == 1 ]]; then
  SYSTEMS=("seq2seq-noattn seq2seq-tiny model.attention=none"
           "seq2seq-bahdanau seq2seq-tiny model.attention=bahdanau"
           "seq2seq-dot seq2seq-tiny model.attention=dot"
           "seq2seq-general seq2seq-tiny model.attention=general"
           "transformer-small transformer-tiny -")
else
  SYSTEMS=("seq2seq-noattn seq2seq-noattn -"
           "seq2seq-bahdanau seq2seq-bahdanau -"
           "seq2seq-dot seq2seq-bahdanau model.attention=dot"
           "seq2seq-general seq2seq-bahdanau model.attention=general"
           "transformer-small transformer-small -")
fi

echo "== 1/5 corpus: wmt-news-de-en from $MIRROR (checksums verified)"
"$BIN/python" scripts/fetch_corpus.py wmt-news-de-en --dest "$C" --mirror "$MIRROR" --quiet

echo "== 2/5 preprocess: $SRC->$TGT, joint SentencePiece $VOCAB (reused when present)"
if [[ ! -f "$WORK/data/manifest.json" ]]; then
  "$BIN/nmt" preprocess --src-lang "$SRC" --tgt-lang "$TGT" --train "$C/train" --valid "$C/newstest2013" \
    --test "$C/$TEST" -o "$WORK/data" --vocab-size "$VOCAB" --force --quiet
fi

# Train one system for BUDGET, then translate the test set with beam search.
run_system() {
  local name=$1 preset=$2 set=$3 over=()
  local hyp="$WORK/$name/$TEST.hyp.$TGT"
  if [[ -f "$hyp" ]]; then
    echo "   $name: reusing $hyp"
    return
  fi
  [[ "$set" != - ]] && over=(--set "$set")
  echo "   $name: training (preset $preset ${over[*]}) for $BUDGET, $OMP_NUM_THREADS thread(s)"
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
  "$BIN/nmt" train --preset "$preset" "${over[@]}" --data "$WORK/data" -o "$WORK/$name" \
    --max-time "$BUDGET" --device "$DEVICE" --force --quiet $TRAIN_ARGS
  # --whole-lines: a line is one test item, translated whole, never split into sentences
  "$BIN/nmt" translate -m "$WORK/$name" "$C/$TEST.$SRC" -o "$hyp.tmp" --beam-size "$BEAM" \
    --device "$DEVICE" --whole-lines --quiet
  mv "$hyp.tmp" "$hyp"
  echo "   $name: done"
}

echo "== 3/5 train and translate $TEST: ${#SYSTEMS[@]} systems, $JOBS at a time"
for sys in "${SYSTEMS[@]}"; do
  read -r name preset set <<<"$sys"
  [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]] && continue
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
  run_system "$name" "$preset" "$set" &
done
for pid in $(jobs -p); do wait "$pid"; done

MODELS=()
LABELS=()
HYPS=()
for sys in "${SYSTEMS[@]}"; do
  read -r name _ <<<"$sys"
  [[ -f "$WORK/$name/$TEST.hyp.$TGT" ]] || continue
  MODELS+=("$WORK/$name")
  LABELS+=(--label "$name")
  HYPS+=("$WORK/$name/$TEST.hyp.$TGT")
done

echo "== 4/5 score $TEST: sacreBLEU and chrF, whole and by source length"
REF="$C/$TEST.$TGT"
"$BIN/nmt" score "${HYPS[@]}" -r "$REF" -m bleu -m chrf
"$BIN/nmt" score "${HYPS[@]}" -r "$REF" -m bleu -m chrf -w 2 --json >"$WORK/scores.json"
"$BIN/nmt" score --by-length "$C/$TEST.$SRC" "${HYPS[@]}" -r "$REF" -m bleu -m chrf "${LABELS[@]}" \
  --plot "$DOCS/attention_by_length.png" --plot-relative "$DOCS/attention_relative.png"
"$BIN/nmt" score --by-length "$C/$TEST.$SRC" "${HYPS[@]}" -r "$REF" -m bleu -m chrf "${LABELS[@]}" \
  -w 2 --json >"$WORK/by_length.json"

echo "== 5/5 validation curves and the tables"
"$BIN/nmt" plot "${MODELS[@]}" -o "$DOCS/attention_curves.png" --x minutes --y bleu
"$BIN/python" scripts/attention_table.py "$WORK" "${MODELS[@]}" --source "$C/$TEST.$SRC" \
  --hyp "$TEST.hyp.$TGT" >"$WORK/attention_table.md.tmp"
mv "$WORK/attention_table.md.tmp" "$WORK/attention_table.md"
cat "$WORK/attention_table.md"
echo "wrote $WORK/attention_table.md, $DOCS/attention_by_length.png, $DOCS/attention_relative.png," \
  "$DOCS/attention_curves.png"
