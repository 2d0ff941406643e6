"""`solver/data/validated_range.json` is what `bench/validated_range.py` writes from the
published runs: regenerated here and compared (the training part from the in-repository
calibration set, `bench/data/calibration/published_runs.jsonl`)."""

from __future__ import annotations

import json
from typing import Any

from bench import validated_range as vr
from solver.warnings import VALIDATED_RANGE_FILE


def _committed() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VALIDATED_RANGE_FILE.read_text(encoding="utf-8"))
    return data


def test_the_script_writes_to_the_file_the_warnings_read() -> None:
    assert vr.OUTPUT == VALIDATED_RANGE_FILE


def test_serving_part_is_regenerated_identically() -> None:
    assert vr.serving_range() == _committed()["serving"]


def test_training_part_is_regenerated_identically() -> None:
    assert vr.render(vr.build()) == VALIDATED_RANGE_FILE.read_text(encoding="utf-8")


def test_spans_hold_their_rows() -> None:
    # independent of the script: H100 rows 23-31 are the Megatron-Core README's weak-scaling
    # table (48 to 6,144 GPUs at 4,096 tokens); row 1 is Narayanan et al.'s 32-GPU GPT-1.7B
    training = _committed()["training"]["accelerators"]
    h100 = training["h100-sxm"]["dense"]
    assert set(range(23, 32)) <= set(h100["ids"])
    assert h100["num_gpus"]["min"] <= 48 and h100["num_gpus"]["max"] >= 6144
    assert h100["sequence_length"]["min"] <= 4096 <= h100["sequence_length"]["max"]
    assert h100["num_cases"] == len(h100["ids"])
    assert 1 in training["a100-80gb"]["dense"]["ids"]
    serving = _committed()["serving"]["accelerators"]
    # NIM Llama-3.3-70B rows: 5000 prompt + 500 output tokens, the longest serving row
    assert serving["h100-sxm"]["dense"]["request_tokens"]["max"] == 5500
    assert serving["a100-80gb"]["dense"]["precisions"] == ["fp16"]
