"""The trainer's timeline recorder and JSON file: no torch needed."""

import json
import os
import subprocess
import sys

import pytest

from rlsim.trainer import timeline


def test_importing_the_trainer_package_and_timeline_leaves_torch_out():
    code = "import sys, rlsim, rlsim.trainer, rlsim.trainer.timeline; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _doc() -> dict:
    tl = timeline.Timeline()
    tl.add("inference", "prefill", 0.0, 1.0, 0, 0, tokens=8)
    tl.add("inference", "decode", 1.0, 3.0, 0, 0, tokens=4)
    tl.add("training", "idle-waiting-for-data", 0.0, 3.0, 0, 0)
    tl.add("training", "train", 3.0, 6.0, 0, 0)
    tl.add("inference", "idle-waiting-for-weights", 3.0, 6.0, 0, 0)
    for version_started, dropped in [(0, False), (0, False), (1, True)]:
        tl.sample(
            prompt_tokens=4,
            response_tokens=3,
            version_started=version_started,
            version_trained=None if dropped else 2,
            reward=1.0,
            dropped=dropped,
            step=None if dropped else 0,
        )
    tl.log_step(0, {"rollout/reward_mean": 0.25, "timing/step_end_s": 6.0})
    tl.log_step(1, {"rollout/reward_mean": 0.75, "timing/step_end_s": 8.0})
    return tl.to_dict()


def test_summarize_by_hand():
    s = timeline.summarize(timeline.merge([_doc()]))
    assert s["timing/wall_s"] == 6.0
    assert s["timing/inference/decode_total_s"] == 2.0
    assert s["timing/training/train_mean_s"] == 3.0
    assert s["timing/inference/busy_fraction"] == pytest.approx(3.0 / 6.0)
    assert s["timing/training/busy_fraction"] == pytest.approx(3.0 / 6.0)
    assert s["timing/step_s"] == 2.0
    assert (s["rollout/reward_start"], s["rollout/reward_end"]) == (0.25, 0.75)
    assert s["rollout/samples_trained"] == 2 and s["rollout/samples_dropped"] == 1
    assert s["rollout/tokens_dropped"] == 3  # generated tokens only
    assert s["rollout/lag_mean"] == 2.0


def test_unknown_state_is_refused():
    with pytest.raises(AssertionError):
        timeline.Timeline().add("inference", "generate", 0.0, 1.0, 0, 0)


def test_phase_records_even_when_the_body_raises():
    tl = timeline.Timeline()
    with pytest.raises(RuntimeError), tl.phase("training", "train", step=3, version=2):
        raise RuntimeError("boom")
    (interval,) = tl.intervals
    assert (interval["state"], interval["step"], interval["version"]) == ("train", 3, 2)
    assert interval["end_s"] >= interval["start_s"]


def test_clock_offset_from_the_run_start():
    import time

    tl = timeline.Timeline(run_start_wall_s=time.time() - 5.0)
    assert 5.0 <= tl.now() < 6.0


def test_write_json_is_atomic_and_complete(tmp_path):
    path = tmp_path / "sub" / "t.json"
    doc = timeline.build_document("sync", {"steps": 2}, {"num_hidden_layers": 1}, [_doc()])
    timeline.write_json(str(path), doc)
    assert json.loads(path.read_text()) == doc
    assert os.listdir(path.parent) == ["t.json"]  # no temporary file left behind
    assert doc["schema"] == timeline.SCHEMA and doc["status"] == "completed"


def test_logger_pattern():
    logged = []

    class ListLogger:
        def log(self, metrics, step):
            logged.append((step, metrics))

    tl = timeline.Timeline(logger=ListLogger())
    tl.log_step(7, {"train/loss": 1.0})
    assert logged == [(7, {"train/loss": 1.0})]
    timeline.Timeline().log_step(0, {"train/loss": 1.0})  # the null logger accepts anything
