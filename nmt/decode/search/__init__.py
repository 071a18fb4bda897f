"""Greedy search, sampling and beam search over the decoding contract of nmt/models/base.py.

All three are batched over sentences (beam search flattens batch x beam into rows), advance
one token a step through `decode_step` and its cache (the prefix is never recomputed), and drop
finished sentences from the active batch (in groups: see RETIRE_EVERY in `rows`). They never ask
which architecture they drive, and take their options as one `ResolvedOptions`
(nmt.decode.options).

`rows` holds what every search shares, `greedy` the token-by-token loop of greedy search and
sampling, `sampling` how a token is drawn, `beam` beam search with its stopping rules in `stop`,
and `topk` the top-k / argmax over vocabulary-wide rows they use.

Conventions shared by all:
- A hypothesis of n tokens costs n + 1 predictions (its tokens and eos); its length for the GNMT
  length penalty lp(L) = ((5 + L) / 6) ** alpha is L = n + 1, and `score = log_prob / lp(L)`.
- The maximum length of sentence i is n <= floor(a * |src_i| + b) tokens, where |src_i| is the
  source length without its eos, capped so every position fits `model.max_positions` (at
  NO_LENGTH_CAP without one); at that length eos is forced (with the model's log-probability).
- pad and bos are never produced.
- eos is forbidden while fewer than `min_len` tokens have been produced (min_len is capped at
  the maximum length, so forced eos wins).
- `attention` (when asked) is (n + 1, layers, heads, |src_i| + 1): one row per prediction, eos
  included, one column per source token, eos included.
"""
