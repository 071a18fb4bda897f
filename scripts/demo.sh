#!/usr/bin/env bash
# The main job end to end on Multi30k: preprocess -> train -> translate (beam 5) -> score.
# Called by `make demo` after the corpus is fetched; DEMO_TIME bounds training (default 10m);
# DEMO_LOWERCASE=1 preprocesses with --lowercase (the published setting) and scores lowercased.
# The recipe is the transformer-multi30k preset (docs/recipes/multi30k.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
WORK=${WORK:-work/demo}
SRC=${SRC:-en}
TGT=${TGT:-de}
DEMO_TIME=${DEMO_TIME:-10m}
PRESET=${PRESET:-transformer-multi30k}
LOWER=()
case "${DEMO_LOWERCASE:-0}" in
  1) LOWER=(--lowercase) ;;
  0) ;;
  *) echo "DEMO_LOWERCASE must be 0 or 1, got '$DEMO_LOWERCASE'" >&2; exit 2 ;;
esac
C=corpora/multi30k
mkdir -p "$WORK"

echo "== 1/4 preprocess: Multi30k $SRC->$TGT, joint SentencePiece 8k ${LOWER[*]:-}"
"$BIN/nmt" preprocess --src-lang "$SRC" --tgt-lang "$TGT" --train "$C/train" --valid "$C/val" \
  --test "$C/test_2016_flickr" --test "$C/test_2017_flickr" -o "$WORK/data" --vocab-size 8000 --force \
  ${LOWER[@]+"${LOWER[@]}"}

echo "== 2/4 train: $PRESET for $DEMO_TIME"
"$BIN/nmt" train --preset "$PRESET" --data "$WORK/data" -o "$WORK/model" --max-time "$DEMO_TIME" --force

for t in test_2016_flickr test_2017_flickr; do
  echo "== 3/4 translate: $t, beam 5"
  "$BIN/nmt" translate -m "$WORK/model" "$C/$t.$SRC" -o "$WORK/$t.hyp.$TGT" --beam-size 5
  if [ ${#LOWER[@]} -eq 0 ]; then
    echo "== 4/4 score $t: sacreBLEU and chrF, cased, then lowercased"
    "$BIN/nmt" score "$WORK/$t.hyp.$TGT" -r "$C/$t.$TGT" -m bleu -m chrf
  else
    echo "== 4/4 score $t: sacreBLEU and chrF, lowercased (the model writes lowercase)"
    "$BIN/nmt" score "$WORK/$t.hyp.$TGT" -r "$C/$t.$TGT" -m chrf --lowercase
  fi
  "$BIN/nmt" score "$WORK/$t.hyp.$TGT" -r "$C/$t.$TGT" -m bleu --lowercase
done

echo "== examples (source / reference / nmt)"
for i in 1 7 42; do
  echo "  src: $(sed -n "${i}p" "$C/test_2016_flickr.$SRC")"
  echo "  ref: $(sed -n "${i}p" "$C/test_2016_flickr.$TGT")"
  echo "  nmt: $(sed -n "${i}p" "$WORK/test_2016_flickr.hyp.$TGT")"
  echo
done
