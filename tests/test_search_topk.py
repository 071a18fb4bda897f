"""The two-stage top-k / argmax that beam and greedy search use on vocabulary-wide rows: the
same values and indices as torch's own, -inf rows and ragged widths included."""

from __future__ import annotations

import pytest
import torch

from nmt.decode.search.topk import BLOCK, max_rows, topk_rows


def rows(n: int, width: int, seed: int = 0) -> torch.Tensor:
    """Log-probability-like rows with -inf entries: banned columns and whole dead rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(n, width, generator=g) * 3, -1)
    x[:, :2] = float("-inf")
    x[3] = float("-inf")  # a dead hypothesis
    x[5, :] = float("-inf")
    x[5, 7] = -0.5  # a forced row: one possible token
    return x


@pytest.mark.parametrize("width", [40 * BLOCK, 40 * BLOCK + 17, 5 * BLOCK])
@pytest.mark.parametrize("k", [1, 10])
def test_topk_rows_equals_torch_topk(width, k):
    x = rows(12, width)
    values, index = topk_rows(x, k)
    ref = x.topk(k, dim=1)
    torch.testing.assert_close(values, ref.values, atol=0, rtol=0)
    finite = ref.values > float("-inf")  # which -inf entries come back is arbitrary
    assert torch.equal(index[finite], ref.indices[finite])
    assert torch.equal(x.gather(1, index), values)


@pytest.mark.parametrize("width", [40 * BLOCK, 40 * BLOCK + 17, 5 * BLOCK])
def test_max_rows_equals_torch_max_with_first_occurrence(width):
    x = rows(12, width)
    x[0, 100] = x[0, width // 2] = x[0, width - 1] = 10.0  # ties: the first one counts
    x[1, width - 1] = 10.0  # the best is in the ragged tail (when there is one)
    values, index = max_rows(x)
    ref = x.max(dim=1)
    assert torch.equal(values, ref.values) and torch.equal(index, ref.indices)
    assert index[0] == 100 and index[1] == width - 1


def test_beam_rows_of_a_flattened_beam_keep_their_hypothesis():
    """The beam search ranks (sentences, k * V) views: an index splits into (beam, token)."""
    k, vocab = 5, 8000
    lp = rows(4 * k, vocab).view(4, k * vocab)
    _, index = topk_rows(lp, 2 * k)
    ref = lp.topk(2 * k, dim=1).indices
    assert torch.equal(index // vocab, ref // vocab) and torch.equal(index % vocab, ref % vocab)
