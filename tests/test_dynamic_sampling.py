"""DAPO dynamic sampling (algorithm.filter_groups): effects pinned by hand.

- sync, constant lengths: a step's wait for data is exactly rounds x one round's generation,
  and its training part is unchanged (training happens once, on B groups);
- verl's round barrier: a gen batch of 2B with nothing filtered waits for all 2B groups;
- rounds follow the binomial law of verl's rule; the continuous refill needs B / (1 - s) prompts;
- share 0 changes no metric in any mode; filtered groups never reach training;
- the cap on rounds stops the run with one error line, as verl's ValueError does;
- every output shows it only when it is on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from small_scenarios import make
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.metrics.summary import summarize
from rlsim.placement import resolve
from rlsim.scenario import BetaPassRate, FilterGroups, Mode, all_or_none_share, load_scenario
from rlsim.simulator.dynamic_sampling import AllOrNoneDraws
from rlsim.simulator.pipeline import build
from rlsim.simulator.run import simulate

CONSTANT = {"workload": {"response_tokens": {"kind": "constant", "value": 200}}}
EXAMPLE = Path(__file__).parent.parent / "examples" / "features" / "dapo-reasongen-r1.yaml"


def _filtering(fg: dict, over: dict | None = None, overrides: list[str] = ()) -> dict:
    over = {**CONSTANT, **(over or {})}
    over["algorithm"] = {**over.get("algorithm", {}), "filter_groups": fg}
    return make(over, overrides)


def _spans(result) -> list[tuple[float, float]]:
    """(wait for data, training part) of each step in a sync run."""
    out, prev = [], 0.0
    for s in result.recorder.steps:
        out.append((s.start_s - prev, s.end_s - s.start_s))
        prev = s.end_s
    return out


def test_sync_step_is_rounds_of_generation_plus_one_training() -> None:
    base = simulate(make(CONSTANT, ["steps=8"]))
    gen_s, train_s = _spans(base)[1]
    result = simulate(_filtering({"all_or_none_share": 0.5}, overrides=["steps=8"]))
    rounds = result.recorder.filtering.rounds
    assert sorted(set(rounds.values())) == [2, 3]  # the seed gives both, so the test can tell them apart
    for step, (wait_s, part_s) in enumerate(_spans(result)):
        assert wait_s == pytest.approx(rounds[step] * gen_s, rel=1e-9)
        assert part_s == pytest.approx(train_s, rel=1e-9)


def test_a_round_waits_for_its_whole_gen_batch() -> None:
    """verl generates and scores the gen batch as one call: 2B prompts take 2B prompts' time
    even when the first B would do, and the B beyond the step's are surplus."""
    doubled = simulate(make(CONSTANT, ["steps=3", "algorithm.prompts_per_step=8"]))
    result = simulate(_filtering({"all_or_none_share": 0.0, "prompts_per_gen_batch": 8}, overrides=["steps=3"]))
    assert [w for w, _ in _spans(result)] == pytest.approx([w for w, _ in _spans(doubled)], rel=1e-9)
    log = result.recorder.filtering
    assert (log.filtered_groups, log.surplus_groups) == (0, 3 * 4)
    assert log.filtered_tokens == 3 * 4 * 4 * 200  # steps x surplus groups x G x response tokens


def _expected_rounds(share: float, b: int) -> float:
    """verl's rule with gen batch = B: E[N] = sum_n P(Binomial(n B, 1 - share) < B)."""
    total, n = 0.0, 0
    while True:
        trials = n * b
        below = sum(math.comb(trials, k) * (1 - share) ** k * share ** (trials - k) for k in range(min(b, trials + 1)))
        if below < 1e-12:
            return total
        total += below
        n += 1


@pytest.mark.parametrize("mode, refill", [("sync", None), ("one_step_off", None), ("streaming", "rounds")])
def test_rounds_follow_verls_rule_on_average(mode: str, refill: str | None) -> None:
    share, b, steps = 0.5, 4, 300
    fg = {"all_or_none_share": share, "refill": refill}
    over = {"algorithm": {"prompts_per_step": b}, "pipeline": {"mode": mode}}
    log = simulate(_filtering(fg, over, [f"steps={steps}"])).recorder.filtering
    assert all(log.prompts[batch] == log.rounds[batch] * b for batch in log.filled)  # whole gen batches
    rounds = np.array([log.rounds[batch] for batch in log.filled])
    expected = _expected_rounds(share, b)  # whole rounds overshoot 1/(1 - s) = 2
    # by hand: P(N > n) = P(fewer than 4 heads in 4n fair coins), n = 0, 1, 2, ...
    assert expected == pytest.approx(1 + 15 / 16 + 93 / 256 + 299 / 4096 + 697 / 65536 + 1351 / 2**20, abs=2e-4)
    assert rounds.mean() == pytest.approx(expected, abs=4 * rounds.std() / math.sqrt(len(rounds)))


@pytest.mark.parametrize("mode, refill", [("streaming", None), ("async", None), ("sync", "continuous")])
def test_continuous_refill_needs_b_over_one_minus_s_prompts(mode: str, refill: str | None) -> None:
    """Refilled one prompt per filtered group, a step needs a negative-binomial number of
    prompts: B / (1 - s) on average, i.e. 1 / (1 - s) gen batches of B."""
    share, b, steps = 0.5, 4, 300
    over = {"algorithm": {"prompts_per_step": b}, "pipeline": {"mode": mode}}
    result = simulate(_filtering({"all_or_none_share": share, "refill": refill}, over, [f"steps={steps}"]))
    log = result.recorder.filtering
    assert all(log.rounds[batch] == math.ceil(log.prompts[batch] / b) for batch in log.filled)
    prompts = np.array([log.prompts[batch] for batch in log.filled])
    sd = math.sqrt(b * share) / (1 - share)  # the negative binomial's standard deviation
    assert prompts.mean() / b == pytest.approx(1 / (1 - share), abs=4 * sd / math.sqrt(len(prompts)) / b)
    assert log.surplus_groups == 0  # never more in flight than the step is short


@pytest.mark.parametrize("mode", [m.value for m in Mode])
def test_share_zero_changes_no_metric(mode: str) -> None:
    plain = summarize(simulate(make({}, ["steps=4"]).with_mode(mode))).model_dump()
    zero = summarize(simulate(_filtering({"all_or_none_share": 0.0}, {"workload": {}}, ["steps=4"]).with_mode(mode)))
    d = zero.dynamic_sampling
    assert (d.filtered_groups, d.surplus_groups, d.filtered_tokens) == (0, 0, 0)
    assert d.gen_rounds_per_step == 1.0
    # a round's groups reach the buffer together when it completes (verl gets a gen batch back
    # from one call), so the buffer's peak may be lower; everything else is the same
    assert zero.buffer_max_groups <= plain.pop("buffer_max_groups")
    assert zero.model_dump(exclude={"dynamic_sampling", "buffer_max_groups"}) == plain


@pytest.mark.parametrize("mode", [m.value for m in Mode])
def test_filtered_groups_never_reach_training(mode: str) -> None:
    sc = _filtering({"all_or_none_share": 0.4}, overrides=["steps=5"]).with_mode(mode)
    w = build(resolve(sc))
    w.env.process(w.dispatcher.run())
    for engine in w.engines:
        engine.start()
    w.env.run(until=w.env.process(w.trainer.run()))
    draws = AllOrNoneDraws(sc.algorithm.filter_groups, sc.algorithm.group_size, sc.seed)
    statuses = {g.status for g in w.dispatcher.groups}
    assert {"trained", "filtered"} <= statuses
    for g in w.dispatcher.groups:
        if draws(g.gid):
            assert g.status == "filtered"
        if g.status == "trained":
            assert not draws(g.gid)
    trained = sum(1 for g in w.dispatcher.groups if g.status == "trained")
    assert trained == 5 * sc.algorithm.prompts_per_step


def test_pass_rate_share_is_the_beta_mean_and_draws_follow_it() -> None:
    uniform = FilterGroups(pass_rate=BetaPassRate(alpha=1, beta=1))
    assert all_or_none_share(uniform, 4) == pytest.approx(2 / 5)  # E[p^G] = 1/(G+1) for p ~ U(0, 1)
    skewed = FilterGroups(pass_rate=BetaPassRate(alpha=0.5, beta=2.0))
    p = np.random.default_rng(1).beta(0.5, 2.0, 400_000)
    assert all_or_none_share(skewed, 8) == pytest.approx(float(np.mean(p**8 + (1 - p) ** 8)), abs=3e-3)
    draws = AllOrNoneDraws(skewed, 8, seed=3)
    flags = np.array([draws(gid) for gid in range(40_000)])
    assert flags.mean() == pytest.approx(all_or_none_share(skewed, 8), abs=0.01)


def test_the_cap_stops_the_run_as_verl_does() -> None:
    with pytest.raises(ScenarioError) as err:
        simulate(_filtering({"all_or_none_share": 0.5, "max_num_gen_batches": 1}))
    assert err.value.field == "algorithm.filter_groups.max_num_gen_batches"
    assert "Generated too many" in err.value.reason


@pytest.mark.parametrize("mode", ["sync", "async", "streaming"])
def test_rounds_stay_within_the_cap(mode: str) -> None:
    fg = {"all_or_none_share": 0.3, "prompts_per_gen_batch": 8, "max_num_gen_batches": 2}
    result = simulate(_filtering(fg, overrides=["steps=6"]).with_mode(mode))
    log = result.recorder.filtering
    assert max(log.rounds.values()) <= 2
    assert max(log.prompts.values()) <= 2 * 8
    assert log.filtered_groups > 0


def test_cap_and_bad_fields_are_one_line_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    cases = {
        "filter_groups={all_or_none_share: 0.5, max_num_gen_batches: 1}": "max_num_gen_batches",
        "filter_groups={}": "exactly one of",
        "filter_groups={all_or_none_share: 1.0}": "all_or_none_share",
        "filter_groups={pass_rate: {kind: beta, alpha: 0.001, beta: 0.001}}": "raise alpha and beta",
    }
    for value, words in cases.items():
        res = runner.invoke(app, ["simulate", "--mode", "sync", "--steps", "2", "--set", f"algorithm.{value}"])
        assert res.exit_code == 2, res.output
        assert words in res.output and "Traceback" not in res.output
    res = runner.invoke(
        app,
        ["simulate", "--set", "algorithm.group_size=1", "--set", "algorithm.filter_groups={all_or_none_share: 0.5}"],
    )
    assert res.exit_code == 2 and "group_size=1" in res.output


def test_outputs_show_it_only_when_on(tmp_path: Path) -> None:
    runner = CliRunner()
    common = ["simulate", "--modes", "sync,streaming", "--steps", "3", "--set", "algorithm.prompts_per_step=8"]
    on = [*common, "--set", "algorithm.filter_groups={all_or_none_share: 0.5}"]
    for args, shown in ((common, False), (on, True)):
        out, trace = tmp_path / f"{shown}.json", tmp_path / f"{shown}.trace.json"
        res = runner.invoke(app, [*args, "--json", str(out), "--trace", str(trace)])
        assert res.exit_code == 0, res.output
        assert ("gen rounds" in res.output) is shown and ("filtered tok" in res.output) is shown
        modes = json.loads(out.read_text())["modes"]
        assert all(("dynamic_sampling" in m["metrics"]) is shown for m in modes)
        events = json.loads(trace.read_text())["traceEvents"]
        assert any(e["ph"] == "i" and e["name"].startswith("gen round") for e in events) is shown
        assert any(e["ph"] == "C" and e["name"] == "filtered_groups" for e in events) is shown
    d = modes[0]["metrics"]["dynamic_sampling"]
    assert d["gen_rounds_per_step"] >= 2 and 0 < d["filtered_token_fraction"] < 1


def test_same_seed_same_filtering_other_seed_other() -> None:
    fg = {"pass_rate": {"kind": "beta", "alpha": 0.7, "beta": 0.7}}
    a, b = (simulate(_filtering(fg, overrides=["steps=4"])).recorder.filtering for _ in range(2))
    assert a == b
    c = simulate(_filtering(fg, overrides=["steps=4", "seed=5"])).recorder.filtering
    assert c.rounds != a.rounds or c.filtered_groups != a.filtered_groups


def test_reasongen_r1_shape() -> None:
    """R4 (ReasonGen-R1 issue #13, 4 x A800, DAPO): "usually two" rollout rounds per step and
    25 vs 14 min per step (1.8x). The example's share gives about two rounds; the step costs
    less than rounds x the unfiltered step because training (and the weight sync) run once."""
    sc = load_scenario(str(EXAMPLE), ["steps=12"])
    on = summarize(simulate(sc))
    plain = summarize(simulate(load_scenario(str(EXAMPLE), ["steps=12", "algorithm.filter_groups=null"])))
    rounds = on.dynamic_sampling.gen_rounds_per_step
    assert 1.8 <= rounds <= 2.3
    assert 1.0 < on.step_time_s / plain.step_time_s < rounds


def test_api_records_flatten_it() -> None:
    import rlsim

    fg = "algorithm.filter_groups={all_or_none_share: 0.5}"
    on = rlsim.simulate(str(EXAMPLE), mode="sync", steps=2, overrides=[fg]).to_records()[0]
    assert on["dynamic_sampling_gen_rounds_per_step"] >= 1 and on["dynamic_sampling_filtered_tokens"] > 0
    off = rlsim.simulate(str(EXAMPLE), mode="sync", steps=2, overrides=["algorithm.filter_groups=null"])
    assert not any(k.startswith("dynamic_sampling") for k in off.to_records()[0])


def test_sweep_points_carry_it(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "sweep.json"
    vary = "algorithm.filter_groups.all_or_none_share=0,0.6"
    res = runner.invoke(
        app, ["sweep", str(EXAMPLE), "--mode", "sync", "--set", "steps=4", "--vary", vary, "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    points = json.loads(out.read_text())["points"]
    assert [p["gen_rounds_per_step"] for p in points][0] == 1.0 < points[1]["gen_rounds_per_step"]
    assert points[0]["filtered_token_fraction"] == 0.0 < points[1]["filtered_token_fraction"]
    plain = tmp_path / "plain.json"
    res = runner.invoke(
        app, ["sweep", "default", "--mode", "sync", "--set", "steps=2", "--vary", "seed=0,1", "--json", str(plain)]
    )
    assert res.exit_code == 0, res.output
    assert "gen_rounds_per_step" not in json.loads(plain.read_text())["points"][0]
