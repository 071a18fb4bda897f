"""scripts/count_flops.py: FLOPs counted on meta tensors (shapes only) equal torch's count of the
same batches run for real, and the parameter count is the model's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_training_loop import make_copy_data

REPO = Path(__file__).resolve().parent.parent


def load_script():
    spec = importlib.util.spec_from_file_location("count_flops", REPO / "scripts/count_flops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("preset", ["transformer-tiny", "seq2seq-tiny"])
@pytest.mark.slow
def test_meta_count_equals_real_count(tmp_path, preset):
    data = make_copy_data(tmp_path, 300, 20)
    script = load_script()
    meta = script.count(str(data), preset, 512)
    real = script.count(str(data), preset, 512, device="cpu")
    assert meta == real
    assert meta["parameters"] > 0 and meta["batches"] > 1
    assert meta["flops_per_target_token"] > 6 * meta["parameters"] * 0.5  # the 6N rule, roughly
