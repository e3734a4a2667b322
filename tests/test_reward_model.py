"""GPU reward models (issue 16, feature 1): a scoring pool whose time the step pays in sync mode
and hides in one-step-off, computed by hand from the prefill model with constant lengths."""

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
from rlsim.models import prefill
from rlsim.models.decode import gemm_layer_params, iteration_cost, tokens_half
from rlsim.placement import resolve
from rlsim.report.lanes import gpu_lanes
from rlsim.simulator import states
from rlsim.simulator.run import simulate

PROMPT, RESPONSE, B, G = 100, 200, 4, 4


def _scenario(mode: str = "sync", reward_model: dict | None = None, response: dict | None = None, **over):
    """Constant lengths on 8 GPUs: 2 engines, a trainer on 2, and (optionally) 2 scoring engines."""
    data = {
        "cluster": {"gpu": "h100-sxm", "gpus_per_node": 8},
        "algorithm": {"prompts_per_step": B, "group_size": G, "minibatches": 1},
        "workload": {
            "prompt_tokens": {"kind": "constant", "value": PROMPT},
            "response_tokens": response or {"kind": "constant", "value": RESPONSE},
            "reward": {"kind": "none"},
        },
        "pipeline": {"mode": mode, "inference": {"gpus": 2, "max_batch": 64}, "training": {"gpus": 2}},
        "steps": 4,
        **over,
    }
    if reward_model is not None:
        data["pipeline"]["reward_model"] = reward_model
    return make(data)


RM = {"model": "qwen2.5-1.5b", "gpus": 2, "tp": 1, "max_batch_sequences": G}


def _group_score_s(sc) -> float:
    """One group's forward on one scoring engine, straight from the prefill model."""
    res = resolve(sc)
    return prefill.prefill_s(get_llm("qwen2.5-1.5b"), res.profile, 1, [PROMPT + RESPONSE] * G)


def test_sync_step_pays_exactly_the_scoring_time() -> None:
    """Every completion finishes at once (constant lengths); 4 groups on 2 scoring engines, one
    group per forward, take 2 forwards: each sync step grows by exactly 2 x prefill(G x 300)."""
    base = simulate(_scenario())
    with_rm = simulate(_scenario(reward_model=RM))
    per_step = 2 * _group_score_s(with_rm.scenario)
    assert per_step > 0.001
    for a, b in zip(base.recorder.steps, with_rm.recorder.steps, strict=True):
        assert b.end_s - b.start_s == pytest.approx(a.end_s - a.start_s, rel=1e-9)  # training unchanged
    walls = [s.end_s for s in with_rm.recorder.steps]
    base_walls = [s.end_s for s in base.recorder.steps]
    for k, (w, w0) in enumerate(zip(walls, base_walls, strict=True)):
        assert w - w0 == pytest.approx((k + 1) * per_step, rel=1e-9)
    m = summarize(with_rm)
    reward = m.pool("reward")
    assert reward.gpus == 2
    # each scoring GPU scores 2 forwards per step, for 4 steps
    assert reward.gpu_seconds_by_state["score"] == pytest.approx(2 * 4 * 2 * _group_score_s(with_rm.scenario))


def test_one_big_forward_when_the_batch_holds_every_group() -> None:
    """max_batch_sequences = B x G: the first engine takes all four groups in one prefill."""
    rm = {**RM, "max_batch_sequences": B * G}
    base, with_rm = simulate(_scenario()), simulate(_scenario(reward_model=rm))
    res = resolve(with_rm.scenario)
    one = prefill.prefill_s(get_llm("qwen2.5-1.5b"), res.profile, 1, [PROMPT + RESPONSE] * (B * G))
    assert with_rm.recorder.steps[0].end_s - base.recorder.steps[0].end_s == pytest.approx(one, rel=1e-9)


def test_generative_judge_also_decodes_its_verdict() -> None:
    verdict = 16
    judge = {**RM, "kind": "generative_judge", "verdict_tokens": verdict}
    plain, judged = simulate(_scenario(reward_model=RM)), simulate(_scenario(reward_model=judge))
    res = resolve(judged.scenario)
    decode = iteration_cost(get_llm("qwen2.5-1.5b"), res.profile, 1, G).span_s(float(G * (PROMPT + RESPONSE)), verdict)
    extra = judged.recorder.steps[0].end_s - plain.recorder.steps[0].end_s
    assert extra == pytest.approx(2 * decode, rel=1e-9)  # two forwards per scoring engine


def test_a_teacher_computes_logits_on_every_token() -> None:
    """A distillation teacher needs each token's log-prob, so its forward runs the LM head on all
    G x 300 positions where a reward model's runs it on each completion's last: 2 x 151,936 x
    1,536 FLOPs on 1,196 more positions a forward (Qwen2.5-1.5B), compute-bound at 1,200 tokens
    on an H100, two forwards a step on each scoring engine."""
    teacher = {**RM, "kind": "teacher"}
    plain, taught = simulate(_scenario(reward_model=RM)), simulate(_scenario(reward_model=teacher))
    profile = resolve(taught.scenario).profile
    tokens = G * (PROMPT + RESPONSE)
    half = tokens_half(profile, gemm_layer_params(get_llm("qwen2.5-1.5b"), 1))  # the layer size's
    rate = profile.matmul_tflops * 1e12 * tokens / (tokens + half)
    lm_head = 151_936 * 1_536
    extra = taught.recorder.steps[0].end_s - plain.recorder.steps[0].end_s
    assert extra == pytest.approx(2 * 2.0 * lm_head * (tokens - G) / rate, rel=1e-9)


def test_one_step_off_hides_scoring_when_generation_dominates() -> None:
    """Long responses: the engines generate batch s+1 while batch s is scored and trained, so
    the steady step stays the generation time; sync pays generation + scoring + training."""
    long = {"kind": "constant", "value": 3000}
    big_rm = {**RM, "model": "qwen2.5-7b", "max_batch_sequences": G}
    sync0 = summarize(simulate(_scenario("sync", response=long, steps=6)))
    sync1 = summarize(simulate(_scenario("sync", reward_model=big_rm, response=long, steps=6)))
    off0 = summarize(simulate(_scenario("one_step_off", response=long, steps=6)))
    off1 = summarize(simulate(_scenario("one_step_off", reward_model=big_rm, response=long, steps=6)))
    score = 2 * prefill.prefill_s(get_llm("qwen2.5-7b"), resolve(_scenario()).profile, 1, [PROMPT + 3000] * G)
    assert sync1.steady_step_time_s - sync0.steady_step_time_s == pytest.approx(score, rel=1e-6)
    assert off1.steady_step_time_s == pytest.approx(off0.steady_step_time_s, rel=1e-9)
    assert off0.steady_step_time_s < sync0.steady_step_time_s


def test_reward_model_on_the_trainer_gpus_never_overlaps_training() -> None:
    """with_training: the scoring engine waits for the trainer's step and the trainer for a forward."""
    rm = {"model": "qwen2.5-0.5b", "placement": "with_training", "tp": 1, "max_batch_sequences": 2}
    response = {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1024}
    result = simulate(_scenario("async", reward_model=rm, response=response, steps=5))
    rec = result.recorder
    train = [(iv.start_s, iv.end_s) for iv in rec.actor_intervals["trainer"] if iv.state in states.BUSY_STATES]
    for name in ("scorer0", "scorer1"):
        scores = [(iv.start_s, iv.end_s) for iv in rec.actor_intervals[name] if iv.state == states.SCORE]
        assert scores
        for s0, s1 in scores:
            assert all(s1 <= t0 or t1 <= s0 for t0, t1 in train), (name, s0, s1)
    m = summarize(result)
    assert m.pool("reward").gpus == 2 and m.pool("reward").shares_gpus_with == "training"
    assert m.pool("training").gpu_seconds_by_state["score"] > 0  # the training GPUs show the scoring
    assert sum(m.gpu_seconds_by_state.values()) == pytest.approx(4 * m.wall_time_s, rel=1e-9)  # 4 GPUs used


def test_reward_pool_in_every_output(tmp_path: Path) -> None:
    """Tables, JSON, trace lanes and cost list the reward pool beside the two others."""
    sc = _scenario(reward_model=RM)
    lanes = gpu_lanes(simulate(sc).recorder)
    assert [lane.role for lane in lanes] == ["rollout"] * 2 + ["actor"] * 2 + ["reward"] * 2
    assert lanes[-1].name == "reward/scorer1/gpu5"
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude={"base_dir"})))
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    res = runner.invoke(app, ["simulate", str(path), "--mode", "sync", "--json", str(out), "--trace", str(trace)])
    assert res.exit_code == 0, res.output
    assert "reward busy" in res.output and "of 2" in res.output
    metrics = json.loads(out.read_text())["modes"][0]["metrics"]
    assert [p["pool"] for p in metrics["pools"]] == ["inference", "training", "reward"]
    assert metrics["gpu_seconds_by_state"]["score"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "sync/reward" in names
    assert any(e.get("name") == "score" and e.get("ph") == "X" for e in events)
    # the cost prices the 6 GPUs the pools use and the 2 no pool uses: the whole cluster
    cost = json.loads(out.read_text())["modes"][0]["cost"]
    assert cost["gpu_hours_per_run"] == pytest.approx(8 * metrics["wall_time_s"] / 3600.0)


def test_schema_documents_the_reward_model() -> None:
    res = runner.invoke(app, ["schema"])
    assert res.exit_code == 0
    schema = json.loads(res.output)
    fields = schema["$defs"]["RewardModel"]["properties"]
    for name in ("kind", "model", "placement", "gpus", "gpu", "tp", "max_batch_sequences", "verdict_tokens"):
        assert fields[name].get("description"), name
    assert "reward_model" in schema["$defs"]["Pipeline"]["properties"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("pipeline.reward_model.gpus=6", "pipeline"),  # 2 + 2 + 6 > 8
        ("pipeline.reward_model.gpus=8", "reward_model.gpus"),
        ("pipeline.reward_model.tp=4", "reward_model.tp"),
        ("pipeline.reward_model.model=nope-7b", "pipeline.reward_model.model"),
        ("pipeline.reward_model.gpu=h999", "pipeline.reward_model.gpu"),
        ("pipeline.reward_model.verdict_tokens=8", "verdict_tokens"),
        ("workload.reward.kind=cpu_verifier", None),  # valid: no verifier time
        ("workload.reward.seconds_per_sample=0.1", "seconds_per_sample"),
    ],
)
def test_bad_reward_model_is_one_line(tmp_path: Path, change: str, field: str | None) -> None:
    sc = _scenario(reward_model=RM)
    check_set_override(tmp_path / "rm.yaml", sc, change, field)
