"""Partial rollouts with over-provisioning (pipeline.partial_rollout), pinned by hand.

One engine, B = 2 prompts of G = 2, constant lengths R except one long response of L tokens,
and one extra prompt in flight. Without partial rollouts step 0 waits for the long one; with
them it ends when two groups are done: the engine stops at the end of the iteration in
progress, the long sequence leaves with its R + 1 tokens and resumes next step on the new
weights (its prompt and tokens prefilled again), where it is trained with a lag of one version.
"""

from __future__ import annotations

import pytest
from random_scenarios import outcome
from reference_engine import ReferenceEngine
from small_scenarios import make
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.metrics.summary import summarize
from rlsim.placement import resolve
from rlsim.simulator.costs import Costs
from rlsim.simulator.run import simulate
from rlsim.workload import GroupDraw, GroupSampler

P, R, L = 64, 100, 150  # prompt, short and long response tokens


def _scenario(partial: dict | None, steps: int = 3):
    pipe = {
        "mode": "sync",
        "inference": {"gpus": 1, "max_batch": 16},
        "training": {"gpus": 1},
    }
    if partial is not None:
        pipe["partial_rollout"] = partial
    over = {
        "cluster": {"gpus_per_node": 2},
        "algorithm": {"prompts_per_step": 2, "group_size": 2, "minibatches": 1},
        "workload": {"response_tokens": {"kind": "constant", "value": R}, "reward": {"kind": "none"}},
        "pipeline": pipe,
        "steps": steps,
    }
    return resolve(make(over))


@pytest.fixture
def scripted(monkeypatch):
    """The sampler draws groups from a script: the second group of the run holds the long response."""

    def install(draws: list[tuple[int, ...]]):
        it = iter(draws)

        def draw_many(self, n: int) -> list[GroupDraw]:
            return [GroupDraw(P, next(it, (R, R))) for _ in range(n)]

        monkeypatch.setattr(GroupSampler, "draw_many", draw_many)

    return install


def test_over_provisioning_ends_the_step_before_the_long_tail(scripted) -> None:
    scripted([(R, R), (R, L), (R, R)])
    res = _scenario({"extra_prompts": 1})
    costs = Costs(res)
    result = simulate(res)
    rec = result.recorder
    # step 0: three prompts prefilled once each, R - 1 iterations at a batch of 6; the 5 short
    # ones finish, two groups are done; the long one decodes the iteration in progress, then leaves
    end0 = (
        costs.prefill_s([P, P, P]) + costs.iteration(6).span_s(6 * (P + 1), R - 1) + costs.iteration(1).span_s(P + R, 1)
    )
    assert rec.steps[0].start_s == pytest.approx(end0, rel=1e-12)
    c0 = rec.carries[0]
    assert (c0.groups, c0.sequences, c0.tokens, c0.resumed_prefill_tokens) == (1, 1, R + 1, P + R + 1)
    assert rec.steps[0].samples == 4 and rec.steps[0].lag_max == 0
    # step 1 (on version 1): the long one resumes first, its prompt and R + 1 tokens prefilled
    # again with the two fresh prompts; it needs L - (R + 2) more iterations at a batch of 5, the
    # fresh ones R - 1 in all; when they finish, B = 2 groups are done (the carried one and a
    # fresh one) and nothing runs: the step ends at once, the other fresh group carried whole
    kv1 = (P + R + 2) + 4 * (P + 1)
    gen1 = (
        costs.prefill_s([P + R + 1, P, P])
        + costs.iteration(5).span_s(kv1, L - R - 2)
        + costs.iteration(4).span_s(4 * (P + 1 + L - R - 2), (R - 1) - (L - R - 2))
    )
    assert rec.steps[1].start_s - rec.steps[0].end_s == pytest.approx(gen1, rel=1e-12)
    c1 = rec.carries[1]
    assert (c1.groups, c1.sequences, c1.tokens) == (1, 0, 0)
    # step 1 trains the carried group (its long member resumed on version 1): one version behind
    assert rec.steps[1].lag_max == 1
    assert rec.carries[1].trained_carried == 1
    # token lag of step 1: the carried R + 1 tokens and the long one's sibling (R tokens, made at
    # step 0) lag one version, everything else none
    assert rec.carries[1].token_lag_sum == (R + 1) + R and rec.carries[1].token_lag_max == 1
    # nothing is lost: every generated token is trained or still in flight
    trained = sum(s.response_tokens for s in rec.steps)
    assert rec.dropped_tokens == rec.discarded_tokens == 0
    assert rec.generated_tokens == trained + result.in_flight_tokens
    assert sum(s.response_tokens for s in rec.steps[:2]) == 4 * R + (R + L) + 2 * R


def test_without_over_provisioning_the_step_waits_for_the_long_one(scripted) -> None:
    scripted([(R, R), (R, L)])
    res = _scenario(None)
    costs = Costs(res)
    rec = simulate(res).recorder
    end0 = (
        costs.prefill_s([P, P])
        + costs.iteration(4).span_s(4 * (P + 1), R - 1)
        + costs.iteration(1).span_s(P + R, L - R)
    )
    assert rec.steps[0].start_s == pytest.approx(end0, rel=1e-12)


def test_over_provisioning_shortens_a_long_tailed_sync_step() -> None:
    """Lognormal lengths (sigma 1): carrying the tail beats waiting for it, and costs staleness."""

    def run(partial):
        over = {
            "workload": {"response_tokens": {"kind": "lognormal", "mean": 300, "sigma": 1.0, "max": 3000}},
            "algorithm": {"prompts_per_step": 8, "group_size": 4},
            "steps": 6,
        }
        if partial:
            over["pipeline"] = {"partial_rollout": partial}
        return summarize(simulate(make(over)))

    plain, partial = run(None), run({"over_provision": 1.5})
    assert partial.step_time_s < 0.9 * plain.step_time_s
    assert plain.staleness_max == 0 and partial.staleness_max >= 1
    assert partial.partial_rollout.prompts_in_flight == 12
    assert partial.partial_rollout.carried_sequences_per_step > 0
    assert 0 < partial.partial_rollout.token_lag_mean <= partial.partial_rollout.token_lag_max
    assert partial.dropped_tokens == 0


@pytest.mark.parametrize("mode", ["colocated", "sync", "one_step_off", "async", "streaming"])
def test_every_mode_matches_the_reference_and_keeps_tokens(mode: str) -> None:
    sc = make(
        {
            "pipeline": {"mode": mode, "partial_rollout": {"over_provision": 1.5}},
            "workload": {"response_tokens": {"kind": "lognormal", "mean": 300, "sigma": 1.0, "max": 3000}},
            "steps": 4,
        }
    )
    fast, ref = simulate(sc), simulate(sc, engine_cls=ReferenceEngine)
    assert outcome(fast) == outcome(ref)
    assert [c.tokens for c in fast.recorder.carries] == [c.tokens for c in ref.recorder.carries]
    assert fast.recorder.end_s == pytest.approx(ref.recorder.end_s, rel=1e-9)
    rec = fast.recorder
    assert len(rec.carries) == sc.steps
    assert rec.generated_tokens == sum(s.response_tokens for s in rec.steps) + fast.in_flight_tokens
    assert all(s.groups == sc.algorithm.prompts_per_step for s in rec.steps)


def test_absent_field_leaves_the_json_unchanged() -> None:
    m = summarize(simulate(make()))
    assert m.partial_rollout is None and "partial_rollout" not in m.model_dump(mode="json")


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("pipeline.partial_rollout.over_provision=1.0", "must exceed"),
        ("pipeline.staleness.policy=reject", "reject"),
        ("pipeline.partial_rollout.over_provision=0.5", "over_provision"),
    ],
)
def test_bad_partial_rollouts_are_one_line(override: str, words: str) -> None:
    args = ["simulate", "default", "--mode", "sync", "--set", override]
    if "reject" in override:
        args += ["--set", "pipeline.partial_rollout.over_provision=1.5"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2
    assert words in out.output and "Traceback" not in out.output


def test_trace_shows_what_was_carried(tmp_path) -> None:
    """The trace has a `carried` counter per step on the rollout side; runs without partial
    rollouts have none."""
    import json

    out = tmp_path / "t.json"
    args = ["simulate", "default", "--mode", "sync", "--steps", "3", "--trace", str(out)]
    assert CliRunner().invoke(app, [*args, "--set", "pipeline.partial_rollout.over_provision=1.5"]).exit_code == 0
    carried = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "carried"]
    assert len(carried) == 3 and all(e["ph"] == "C" and e["args"]["tokens"] >= 0 for e in carried)
    assert CliRunner().invoke(app, [*args, "--force"]).exit_code == 0
    assert not [e for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "carried"]


def test_report_lists_the_carried_work(tmp_path) -> None:
    out = tmp_path / "r.html"
    args = ["report", "default", "--modes", "sync,async", "--steps", "3", "-o", str(out)]
    res = CliRunner().invoke(app, [*args, "--set", "pipeline.partial_rollout.over_provision=1.5"])
    assert res.exit_code == 0, res.output
    assert "carried sequences / tokens per step" in out.read_text()


def test_cli_json_and_table_carry_the_partial_metrics() -> None:
    import json

    res = CliRunner().invoke(app, ["simulate", "partial-rollout", "--mode", "sync", "--steps", "2", "--json", "-"])
    assert res.exit_code == 0, res.output
    p = json.loads(res.output)["modes"][0]["metrics"]["partial_rollout"]
    assert p["prompts_in_flight"] == 80 and p["carried_groups_per_step"] == 16
    table = CliRunner().invoke(app, ["simulate", "partial-rollout", "--mode", "sync", "--steps", "2"])
    assert "carried seq/step" in table.output and "token lag mean/max" in table.output
