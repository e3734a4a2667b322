"""The Chrome trace: strict trace-event-format checks, lane names, tiling, counters, CLI option.

The Perfetto round trip is in test_trace_perfetto.py; these checks need nothing but Python and
follow the Trace Event Format document (JSON object format; phases X, C, M; microsecond ts).
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from typer.testing import CliRunner

from rlsim.report.lanes import gpu_lanes, gpu_span, timeline_rows
from rlsim.report.trace import chrome_trace
from rlsim.runs import run_modes
from rlsim.scenario import load_scenario

METADATA_NAMES = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "thread_name",
    "thread_sort_index",
}


@pytest.fixture(scope="module")
def runs():
    return run_modes(load_scenario("small-budget", ["steps=3"]))


@pytest.fixture(scope="module")
def doc(runs):
    return json.loads(json.dumps(chrome_trace(runs)))  # what a consumer reads back


def _check_event(e: dict) -> None:
    """One event against the spec: required keys and types per phase."""
    assert isinstance(e["name"], str) and e["name"]
    assert e["ph"] in {"X", "C", "M"}
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    assert isinstance(e.get("args", {}), dict)
    if e["ph"] == "M":
        assert e["name"] in METADATA_NAMES and "ts" not in e
        return
    assert isinstance(e["ts"], int) and e["ts"] >= 0
    if e["ph"] == "X":
        assert isinstance(e["dur"], int) and e["dur"] > 0
        assert isinstance(e["cat"], str)
    else:
        assert e["args"] and all(isinstance(v, int | float) and not isinstance(v, bool) for v in e["args"].values())


def test_trace_follows_the_trace_event_format(doc):
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["displayTimeUnit"] in {"ms", "ns"}
    for e in doc["traceEvents"]:
        _check_event(e)


def test_slices_on_a_thread_never_overlap(doc):
    """Perfetto rejects partially overlapping slices on one thread; ours tile exactly."""
    by_thread = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert spans[0][0] == 0
        pairs = zip(spans, spans[1:], strict=False)
        assert all(a_end == b_start for (_, a_end), (b_start, _) in pairs)


def test_every_slice_thread_and_process_is_named(doc):
    named_threads = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    named_procs = {e["pid"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in named_threads
        assert e["pid"] in named_procs
    tids = [tid for _, tid in named_threads]
    assert len(tids) == len(set(tids)), "tids are unique across the file"


def test_processes_and_lanes_are_named_like_rl_trainers(doc):
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert procs == {
        "colocated",
        "sync/rollout",
        "sync/actor",
        "one_step_off/rollout",
        "one_step_off/actor",
        "async/rollout",
        "async/actor",
        "streaming/rollout",
        "streaming/actor",
    }
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {
        "rollout/engine0/gpu0",
        "rollout/engine1/gpu1",
        "actor/train/gpu2",
        "actor/train/gpu3",
        *(f"actor_rollout/gpu{g}" for g in range(4)),
    }


def test_slice_durations_tile_each_gpu_timeline(runs, doc):
    sync = runs[1]
    rec = sync.result.recorder
    pid_of = {e["args"]["name"]: e["pid"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    for lane in gpu_lanes(rec):
        pid = pid_of[f"sync/{lane.role}"]
        got = defaultdict(int)
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["pid"] == pid and e["tid"] == pid * 1000 + lane.gpu:
                got[e["name"]] += e["dur"]
        want = defaultdict(float)
        for iv in rec.gpu_timeline(lane.gpu):
            want[iv.state] += iv.end_s - iv.start_s
        for state, seconds in want.items():
            assert got[state] / 1e6 == pytest.approx(seconds, abs=1e-5)


def test_args_carry_policy_version_everywhere_and_step_on_the_trainer(doc):
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all("policy_version" in e["args"] for e in slices)
    assert all("step" in e["args"] for e in slices if e["args"]["actor"] == "trainer")
    assert not any("step" in e["args"] for e in slices if e["args"]["actor"] != "trainer")
    assert max(e["args"]["step"] for e in slices if "step" in e["args"]) == 2


def test_counters_match_the_recorder(runs, doc):
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert {"batch_size/engine0", "batch_size/engine1", "rollout_buffer", "staleness"} <= names
    for run in runs:
        steps = run.result.recorder.steps
        assert sum(1 for e in counters if e["name"] == "staleness") >= len(steps)
    async_run = runs[3]
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("args", {}).get("name") == "async/actor")
    top = max(e["args"]["max"] for e in counters if e["name"] == "staleness" and e["pid"] == pid)
    assert top == async_run.metrics.staleness_max


def test_tensor_parallel_engines_span_their_gpus():
    runs = run_modes(load_scenario("llama70b-multinode", ["steps=2"]), ["sync"])
    rec = runs[0].result.recorder
    lanes = {lane.gpu: lane.name for lane in gpu_lanes(rec)}
    assert [lanes[g] for g in range(4)] == [f"rollout/engine0/gpu{g}" for g in range(4)]
    assert lanes[16] == "actor/train/gpu16"
    rows, hidden = timeline_rows(rec)
    assert [r.label for r in rows] == [
        "rollout/engine0 gpu0-3",
        "rollout/engine1 gpu4-7",
        "rollout/engine2 gpu8-11",
        "rollout/engine3 gpu12-15",
        "actor/train gpu16-31",
    ]
    assert hidden == 0
    rows, hidden = timeline_rows(rec, max_rows=3)
    assert len(rows) == 3 and hidden == 2 and rows[-1].label.startswith("actor/train")


def test_gpu_span():
    assert gpu_span((4, 5, 6, 7)) == "gpu4-7"
    assert gpu_span((0, 2)) == "gpu0,2"
    assert gpu_span((3,)) == "gpu3"


def test_cli_writes_the_trace(tmp_path):
    from rlsim.cli import app

    path = tmp_path / "t.json"
    res = CliRunner().invoke(app, ["simulate", "small-budget", "--steps", "2", "--mode", "sync", "--trace", str(path)])
    assert res.exit_code == 0, res.output
    assert "Trace" in res.output
    doc = json.loads(path.read_text())
    assert doc["otherData"]["modes"] == ["sync"]
    res = CliRunner().invoke(app, ["simulate", "small-budget", "--steps", "2", "--trace", str(path)])
    assert res.exit_code == 2 and "--force" in res.output


def test_cli_trace_to_stdout_prints_only_json(tmp_path):
    from rlsim.cli import app

    res = CliRunner().invoke(app, ["simulate", "small-budget", "--steps", "2", "--mode", "async", "--trace", "-"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["traceEvents"]
