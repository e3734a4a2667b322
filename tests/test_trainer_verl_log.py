"""The trainer's verl-style metrics log: the keys rlsim fit reads, consistent with its timeline."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rlsim.logs import read_log
from rlsim.trainer.verl_log import verl_rows

torch = pytest.importorskip("torch")


def test_sync_trainer_writes_a_verl_log_that_fit_reads(tmp_path):
    from rlsim.trainer.sync_loop import SyncConfig, run_sync

    metrics = tmp_path / "metrics.jsonl"
    cfg = SyncConfig(steps=3, warmup_steps=5, threads=1, recompute_logprobs=True, out_path=str(tmp_path / "t.json"))
    doc = run_sync(replace(cfg, metrics_path=str(metrics)))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert rows == verl_rows(doc) and [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:  # the phases are parts of the step
        parts = r["timing_s/gen"] + r["timing_s/old_log_prob"] + r["timing_s/update_actor"]
        assert 0 < parts <= r["timing_s/step"] + 1e-9 and r["timing_s/update_weights"] == 0.0
        assert 1 <= r["response_length/min"] <= r["response_length/mean"] <= r["response_length/max"] <= 8
    log = read_log(str(metrics))
    assert log.format == "verl-jsonl" and log.steps[1].old_log_prob_s == rows[1]["timing_s/old_log_prob"]


def test_verl_rows_by_hand():
    doc = {
        "config": {"max_new_tokens": 4},
        "intervals": [
            {"pool": "training", "state": "idle-waiting-for-data", "start_s": 0.0, "end_s": 2.0, "step": 0},
            {"pool": "inference", "state": "decode", "start_s": 0.0, "end_s": 1.5, "step": 0},
            {"pool": "training", "state": "logprob", "start_s": 2.0, "end_s": 2.5, "step": 0},
            {"pool": "training", "state": "train", "start_s": 2.5, "end_s": 3.5, "step": 0},
            {"pool": "training", "state": "optimizer", "start_s": 3.5, "end_s": 3.75, "step": 0},
        ],
        "samples": [{"step": 0, "dropped": False, "response_tokens": n} for n in (1, 4, 4)]
        + [{"step": None, "dropped": True, "response_tokens": 2}],
        "steps": [{"step": 0, "timing/step_end_s": 4.0}],
    }
    (row,) = verl_rows(doc)
    assert row == {
        "step": 0,
        "timing_s/update_weights": 0.0,
        "timing_s/gen": 2.0,
        "timing_s/old_log_prob": 0.5,
        "timing_s/update_actor": 1.25,
        "timing_s/step": 4.0,
        "response_length/mean": 3.0,
        "response_length/max": 4,
        "response_length/min": 1,
        "response_length/clip_ratio": 2 / 3,
    }
