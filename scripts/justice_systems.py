"""The systems of the Canadian-law experiment (scripts/justice_experiment.py): presets, caps in
updates, the smoke stand-ins, and how the report cuts the test set by source length.

Not run on its own: the justice scripts import it.
"""

from __future__ import annotations

SRC, TGT = "en", "fr"
# 10-word bins out to 70+; the relative figure is against 10-20 (0-10 is headings and names)
BUCKETS = "0-10,10-20,20-30,30-40,40-50,50-60,60-70,70+"
RELATIVE_TO = "10-20"
DOCUMENTS = 37  # test documents, for a document bootstrap when the corpus has no document ids
BASELINE = "noattn"  # the fixed-vector system the attentional ones are measured against
TRANSFORMER = ("model.max_positions=512", "training.schedule=inverse_sqrt", "training.warmup=1000")
SYSTEMS = {
    "noattn": ("seq2seq-noattn", ()),
    "bahdanau": ("seq2seq-bahdanau", ()),
    "transformer": ("transformer-small", TRANSFORMER),
}
# Most updates a system trains: the RNNs to the same count (their schedules are fixed in updates,
# so a higher cap continues a run exactly), the Transformer to its own.
CAPS = {"noattn": 12000, "bahdanau": 12000, "transformer": 9600}
SMOKE = {
    "noattn": ("seq2seq-tiny", ("model.attention=none",)),
    "bahdanau": ("seq2seq-tiny", ("model.attention=bahdanau",)),
    "transformer": ("transformer-tiny", ("model.max_positions=512",)),
}
