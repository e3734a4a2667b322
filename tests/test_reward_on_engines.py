"""A reward model on the inference engines' GPUs (issue 16, feature 1, placement with_inference):
the engines score when they have nothing to generate, so a sync or colocated step adds exactly
the scoring time; its weights take the engines' KV room. Pinned by hand with constant lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import check_set_override, runner
from small_scenarios import make

from rlsim.catalog import get_llm
from rlsim.cli import app
from rlsim.metrics.summary import summarize
from rlsim.models import footprint, prefill
from rlsim.models.kv_cache import kv_budget_bytes
from rlsim.placement import resolve
from rlsim.pools import INFERENCE
from rlsim.report.lanes import gpu_lanes
from rlsim.simulator import states
from rlsim.simulator.run import simulate

PROMPT, RESPONSE, B, G = 100, 200, 4, 4
RM = {"model": "qwen2.5-1.5b", "placement": "with_inference", "max_batch_sequences": G}


def _scenario(mode: str = "sync", reward_model: dict | None = None, response: dict | None = None, **over):
    """Constant lengths: 2 engines (tp 1) and a trainer on 2 GPUs, or all 2 GPUs colocated."""
    pipeline = {"mode": mode, "inference": {"gpus": 2, "max_batch": 64}, "training": {"gpus": 2}}
    if mode == "colocated":
        pipeline = {"mode": mode, "inference": {"max_batch": 64}, "training": {}}
    data = {
        "cluster": {"gpu": "h100-sxm", "gpus_per_node": 2 if mode == "colocated" else 4},
        "algorithm": {"prompts_per_step": B, "group_size": G, "minibatches": 1},
        "workload": {
            "prompt_tokens": {"kind": "constant", "value": PROMPT},
            "response_tokens": response or {"kind": "constant", "value": RESPONSE},
            "reward": {"kind": "none"},
        },
        "pipeline": pipeline,
        "steps": 4,
        **over,
    }
    if reward_model is not None:
        data["pipeline"]["reward_model"] = reward_model
    return make(data)


def _group_score_s(sc) -> float:
    """One group's forward on one engine's GPUs, straight from the prefill model."""
    profile = resolve(sc).profile_of(INFERENCE)
    return prefill.prefill_s(get_llm("qwen2.5-1.5b"), profile, 1, [PROMPT + RESPONSE] * G)


@pytest.mark.parametrize("mode", ["sync", "colocated"])
def test_step_adds_exactly_the_scoring_time_on_the_engines(mode: str) -> None:
    """Every completion finishes at once; the 4 groups, one per forward, go to the 2 idle engines:
    2 forwards each, so every step grows by exactly 2 x prefill(G x 300) and training is unchanged."""
    base = simulate(_scenario(mode))
    with_rm = simulate(_scenario(mode, reward_model=RM))
    per_step = 2 * _group_score_s(with_rm.scenario)
    assert per_step > 0.001
    for a, b in zip(base.recorder.steps, with_rm.recorder.steps, strict=True):
        assert b.end_s - b.start_s == pytest.approx(a.end_s - a.start_s, rel=1e-9)  # training unchanged
    for k, (s, s0) in enumerate(zip(with_rm.recorder.steps, base.recorder.steps, strict=True)):
        assert s.end_s - s0.end_s == pytest.approx((k + 1) * per_step, rel=1e-9)
    m = summarize(with_rm)
    assert [p.pool for p in m.pools] == ["inference", "training"]  # no pool of its own
    score_s = m.pool("inference").gpu_seconds_by_state["score"]
    assert score_s == pytest.approx(2 * 4 * 2 * _group_score_s(with_rm.scenario))  # 2 GPUs x 4 steps x 2 forwards


def test_weights_take_the_engines_kv_room() -> None:
    """Per engine, the reward model's bf16 weights come out of the KV budget, token for token."""
    base, shared = resolve(_scenario()), resolve(_scenario(reward_model=RM))
    llm, profile = base.llm, base.profile_of(INFERENCE)
    inf = base.scenario.pipeline.inference
    budget = kv_budget_bytes(llm, profile, inf.tp, inf.kv_memory_fraction)
    rm_bytes = footprint.weight_bytes(get_llm("qwen2.5-1.5b"))
    assert base.kv_capacity_tokens == int(budget // llm.kv_bytes_per_token())
    assert shared.kv_capacity_tokens == int((budget - rm_bytes) // llm.kv_bytes_per_token())
    assert base.kv_capacity_tokens - shared.kv_capacity_tokens > 100_000  # ~3 GB of a 0.5B policy's KV
    six = {"gpu": "h100-sxm", "gpus_per_node": 6}
    own = resolve(_scenario(reward_model={**RM, "placement": "own_pool", "gpus": 2}, cluster=six))
    assert own.kv_capacity_tokens == base.kv_capacity_tokens  # on its own GPUs it takes no KV room


def test_the_engines_score_only_with_nothing_to_generate() -> None:
    """Async, lognormal lengths: an engine scores only with an empty batch (verl: generation, then
    scoring, on the same GPUs), and each score interval belongs to the engine's own timeline."""
    response = {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1024}
    result = simulate(_scenario("async", reward_model={**RM, "max_batch_sequences": 2}, response=response, steps=5))
    rec = result.recorder
    for name in ("engine0", "engine1"):
        times, sizes = rec.running_log(name)
        scores = [iv for iv in rec.actor_intervals[name] if iv.state == states.SCORE]
        assert scores, name
        for iv in scores:
            i = max(j for j, t in enumerate(times) if t <= iv.start_s)
            assert sizes[i] == 0, (name, iv.start_s)  # nothing running while it scores
            assert all(t <= iv.start_s or t >= iv.end_s for t in times), (name, iv.start_s)  # nor admitted
    m = summarize(result)
    assert sum(m.gpu_seconds_by_state.values()) == pytest.approx(4 * m.wall_time_s, rel=1e-9)


def test_every_output_shows_the_engines_scoring(tmp_path: Path) -> None:
    """Tables, JSON, trace lanes and the report show the inference GPUs' `score` time."""
    sc = _scenario(reward_model=RM)
    lanes = gpu_lanes(simulate(sc).recorder)
    assert [lane.role for lane in lanes] == ["rollout"] * 2 + ["actor"] * 2
    assert lanes[0].owner(states.SCORE) == "engine0"
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude={"base_dir"})))
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    res = runner.invoke(app, ["simulate", str(path), "--mode", "sync", "--json", str(out), "--trace", str(trace)])
    assert res.exit_code == 0, res.output
    assert "infer scoring" in res.output
    metrics = json.loads(out.read_text())["modes"][0]["metrics"]
    assert [p["pool"] for p in metrics["pools"]] == ["inference", "training"]
    assert metrics["pools"][0]["gpu_seconds_by_state"]["score"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    rollout = {e["pid"] for e in events if e.get("name") == "process_name" and "rollout" in e["args"]["name"]}
    assert any(e.get("name") == "score" and e.get("ph") == "X" and e["pid"] in rollout for e in events)
    report = tmp_path / "review.md"
    res = runner.invoke(app, ["report", str(path), "-o", str(report), "--modes", "sync,one_step_off"])
    assert res.exit_code == 0, res.output
    assert "inference engines' GPUs" in report.read_text()


def test_schema_documents_the_placement() -> None:
    res = runner.invoke(app, ["schema"])
    assert res.exit_code == 0
    field = json.loads(res.output)["$defs"]["RewardModel"]["properties"]["placement"]
    assert "with_inference" in field["enum"] and "with_inference" in field["description"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("pipeline.reward_model.tp=2", "reward_model.tp"),  # the engines' TP group is 1
        ("pipeline.reward_model.gpus=2", "reward_model"),
        ("pipeline.reward_model.model=qwen2.5-32b", "pipeline.reward_model.placement"),  # no KV room left
        ("pipeline.reward_model.tp=1", None),  # valid: the engines' tp
    ],
)
def test_bad_combination_is_one_line(tmp_path: Path, change: str, field: str | None) -> None:
    sc = _scenario(reward_model=RM, model="qwen2.5-7b")
    check_set_override(tmp_path / "rm.yaml", sc, change, field)
