"""The planner: candidates, pruning before simulation, the frontier, the recommendation, the
CLI on the long-CoT example, and clear messages when constraints cannot be met."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from small_scenarios import SMALL, make
from typer.testing import CliRunner

from rlsim.catalog.prices import load_prices
from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.errors_format import validation_lines
from rlsim.metrics.cost import cheapest_row, price_projection, project_linear
from rlsim.planner import search
from rlsim.planner.bounds import BatchDraws
from rlsim.planner.candidates import Candidate, CandidateScenarios, SearchSpace, cluster_sizes, generate, prune
from rlsim.planner.executors import LocalExecutor
from rlsim.planner.search import Constraints, Evaluation, candidate_bound, pareto_frontier, plan
from rlsim.runs import run_mode
from rlsim.scenario import load_scenario, scenario_from_dict

runner = CliRunner(env={"COLUMNS": "200"})
PRICES_4GPU = str(Path(__file__).with_name("prices_4gpu.yaml"))  # 2- and 4-GPU H100 nodes
LONG_COT = [
    "--set",
    "algorithm.prompts_per_step=8",
    "--steps",
    "3",
    "--steps-run",
    "200",
    "--workers",
    "2",
]


def _dominates(a: dict, b: dict) -> bool:
    xa = (a["run_hours"], a["run_usd"], a["staleness_mean"])
    xb = (b["run_hours"], b["run_usd"], b["staleness_mean"])
    return all(p <= q for p, q in zip(xa, xb, strict=True)) and xa != xb


@pytest.fixture(scope="module")
def long_cot_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    res = runner.invoke(app, ["plan", "long-cot", "--max-gpus", "16", *LONG_COT, "--json", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_long_cot_plan_frontier_and_recommendation(long_cot_plan):
    data = long_cot_plan
    evals = {e["index"]: e for e in data["evaluations"]}
    assert data["frontier"] and data["recommended"] in data["frontier"]
    best = evals[data["recommended"]]
    assert best["feasible"] and data["runner_up"] is not None and data["reason"].startswith("the cheapest")
    for e in evals.values():  # not dominated, and no feasible candidate is cheaper
        assert not (e["feasible"] and _dominates(e, best)), e["label"]
        assert not e["feasible"] or e["run_usd"] >= best["run_usd"]
    for i in data["frontier"]:
        assert not any(_dominates(e, evals[i]) for e in evals.values() if e["feasible"])
    assert all(e["gpus"] <= 16 for e in evals.values())


def test_long_cot_plan_prunes_before_simulating(long_cot_plan):
    data = long_cot_plan
    pruned = {p["index"] for p in data["pruned"]}
    simulated = {e["index"] for e in data["evaluations"]} | {p["index"] for p in data["failed"]}
    skipped = {p["index"] for p in data["skipped"]}
    assert pruned and not pruned & simulated and not skipped & (pruned | simulated)
    n = data["candidates"]
    assert len(pruned) + len(simulated) + len(skipped) == n == data["simulated"] + len(pruned) + len(skipped)
    assert data["counts"] == {
        "candidates": n,
        "pruned": len(pruned),
        "simulated": len(simulated),
        "failed": len(data["failed"]),
        "skipped": len(skipped),
    }
    # a 32B model does not train on fewer than 7 H100s (AdamW states alone are 16 bytes a parameter);
    # its 32K-token sequences do fit one engine at TP1 (~38K tokens of KV in 0.9 of the 85.0e9 bytes)
    assert any("add training GPUs" in p["reason"] for p in data["pruned"])
    assert not any("raise tp" in p["reason"] for p in data["pruned"])


def test_pruned_candidates_never_reach_the_simulator(monkeypatch):
    base = make()
    space = SearchSpace(4, ("h100-sxm", "l4"), modes=("sync", "colocated"))
    runnable, pruned = prune(base, generate(base, space), 2)
    seen = []
    real = search.simulate_metrics
    monkeypatch.setattr(search, "simulate_metrics", lambda sc: seen.append(sc) or real(sc))
    result = plan(base, space, sim_steps=2, executor=LocalExecutor(1))
    # candidates whose nodes no product rents (2 or 4 GPUs of an 8-GPU node) are pruned too
    unpriced = {p.candidate.index for p in result.pruned if "as one instance" in p.reason}
    priced_runnable = [c for c, _ in runnable if c.index not in unpriced]
    assert unpriced and len(seen) == len(result.evaluations) == len(priced_runnable) - len(result.skipped)
    assert {p.candidate.index for p in result.pruned} == unpriced | {p.candidate.index for p in pruned}


def test_plan_prices_only_products_that_build_its_nodes():
    """A 16-GPU, 2-node job is never priced at a 1-GPU product's rate (Lambda 1x, Nebius 1 GPU)."""
    base = make(overrides=["cluster.gpus_per_node=8"])
    space = SearchSpace(16, ("h100-sxm",), modes=("sync",), gpu_counts=(16,), inference_tps=(1,))
    result = plan(base, space, sim_steps=2, run_steps=10, executor=LocalExecutor(1))
    assert result.evaluations
    for e in result.evaluations:
        row = next(r for r in load_prices() if (r.provider, r.product) == (e.cost.provider, e.cost.product))
        assert row.gpus_per_instance == 8 == e.cost.gpus_per_instance
    one_gpu = min(
        r.usd_per_gpu_hour
        for r in load_prices()
        if r.gpu == "h100-sxm" and r.gpus_per_instance == 1 and r.pricing == "on_demand"
    )
    assert one_gpu < result.recommended.cost.usd_per_gpu_hour  # the cheaper 1-GPU rows were passed over


def test_plan_keeps_colocated_on_fresh_weights_unless_asked():
    base = make()
    default = generate(base, SearchSpace(8, ("h100-sxm",), modes=("colocated", "async")))
    assert {c.sync_every for c in default if c.mode == "colocated"} == {1}
    assert {c.sync_every for c in default if c.mode == "async"} == {1, 2}
    asked = SearchSpace(8, ("h100-sxm",), modes=("colocated",), sync_every=(1, 2), colocated_sync_every=(1, 2))
    assert {c.sync_every for c in generate(base, asked)} == {1, 2}


def test_plan_simulates_every_candidate_past_its_pipeline_fill():
    base = make()
    space = SearchSpace(8, ("h100-sxm",), modes=("sync", "async"), gpu_counts=(8,), inference_tps=(1,))
    runnable, _ = prune(base, generate(base, space), 2)
    for cand, sc in runnable:
        depth = cand.buffer_depth if cand.buffer_depth is not None else 0
        assert sc.steps == max(2, 2 * (depth + 1))


def test_time_objective_and_constraints():
    base = make()
    space = SearchSpace(4, ("h100-sxm",))
    cheap = plan(base, space, sim_steps=2, run_steps=100, executor=LocalExecutor(1))
    fast = plan(base, space, objective="time", sim_steps=2, run_steps=100, executor=LocalExecutor(1))
    assert fast.recommended.run_hours == min(e.run_hours for e in fast.feasible)
    assert cheap.recommended.run_usd == min(e.run_usd for e in cheap.feasible)
    # a deadline between the fastest and the cheapest: the pick is the cheapest that meets it
    hours = sorted(e.run_hours for e in cheap.evaluations if e.staleness_max == 0)
    deadline = hours[len(hours) // 4]
    limited = plan(
        base,
        space,
        constraints=Constraints(deadline_hours=deadline, max_staleness=0),
        sim_steps=2,
        run_steps=100,
        executor=LocalExecutor(1),
    )
    ok = [e for e in limited.evaluations if e.run_hours <= deadline and e.staleness_max == 0]
    assert limited.recommended.run_usd == min(e.run_usd for e in ok)
    assert all(e.staleness_max == 0 and e.run_hours <= deadline for e in limited.frontier)


def test_executors_give_identical_plans():
    base, space = make(), SearchSpace(4, ("h100-sxm",), modes=("sync", "async"))
    one = plan(base, space, sim_steps=2, prices_file=PRICES_4GPU, executor=LocalExecutor(1))
    two = plan(base, space, sim_steps=2, prices_file=PRICES_4GPU, executor=LocalExecutor(2))
    assert one.evaluations == two.evaluations and one.reason == two.reason


def test_infeasible_deadline_is_one_clear_line(tmp_path):
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    res = runner.invoke(
        app,
        [
            "plan",
            str(path),
            "--max-gpus",
            "4",
            "--steps",
            "2",
            "--workers",
            "1",
            "--deadline-hours",
            "0.0001",
            "--steps-run",
            "1000",
            "--prices",
            PRICES_4GPU,
        ],
    )
    assert res.exit_code == 2
    text = " ".join(res.output.split())  # one message (the console may wrap it)
    assert text.count("error:") == 1 and text.startswith("error: --deadline-hours: no simulated configuration meets")
    assert "--deadline-hours 0.0001 h" in text and "closest: 4xh100-sxm" in text and "Traceback" not in text


def test_infeasible_budget_and_staleness_name_the_binding_constraint():
    base, space = make(), SearchSpace(4, ("h100-sxm",), modes=("async",))
    with pytest.raises(
        ScenarioError,
        match=r"^--budget-usd: no simulated configuration meets --budget-usd \$0.0001 for",
    ):
        plan(
            base,
            space,
            constraints=Constraints(budget_usd=1e-4),
            sim_steps=2,
            prices_file=PRICES_4GPU,
            executor=LocalExecutor(1),
        )
    with pytest.raises(
        ScenarioError,
        match=r"^--max-staleness: no simulated configuration meets --max-staleness 0 .*"
        r"closest: \d+xh100-sxm async",
    ):
        plan(
            base,
            space,
            constraints=Constraints(max_staleness=0, deadline_hours=1e6),
            sim_steps=4,
            prices_file=PRICES_4GPU,
            executor=LocalExecutor(1),
        )


def _eval(index, hours, usd, stale):
    m = run_mode(make()).metrics if not _eval.cache else _eval.cache
    _eval.cache = m
    row = cheapest_row(load_prices(), "h100-sxm")
    cand = Candidate(index, "h100-sxm", 4, 4, "sync", 2, 1, 2, None, 1)
    cost = price_projection(project_linear(m, 10), row).model_copy(update={"usd_per_run": usd})
    return Evaluation(cand, cost, hours, stale, int(stale), 0.1, 1.0)


_eval.cache = None


def test_pareto_frontier_and_joint_infeasibility():
    a, b, c, d = (
        _eval(0, 1.0, 10.0, 0.0),
        _eval(1, 2.0, 5.0, 0.0),
        _eval(2, 2.0, 6.0, 0.0),
        _eval(3, 0.5, 20.0, 1.0),
    )
    front = pareto_frontier([a, b, c, d])
    assert [e.candidate.index for e in front] == [3, 0, 1]  # c is dominated by b; fastest first
    field, msg = search._infeasible([a, b], Constraints(deadline_hours=1.5, budget_usd=8.0), 10)
    assert field == "--deadline-hours/--budget-usd" and "together" in msg and "closest" in msg


def test_cluster_sizes_and_candidates():
    assert cluster_sizes(16, 8) == [1, 2, 4, 8, 16]
    assert cluster_sizes(6, 8) == [1, 2, 4, 6]
    cands = generate(make(), SearchSpace(4, ("h100-sxm",)))
    assert [c.index for c in cands] == list(range(len(cands)))
    assert all(c.inference_gpus % c.inference_tp == 0 for c in cands)
    assert {c.mode for c in cands if c.buffer_depth is not None} == {"async", "streaming"}
    with pytest.raises(ScenarioError, match="--gpu-types"):
        generate(make(), SearchSpace(4, ("not-a-gpu",)))


@pytest.mark.parametrize(
    "name,space",
    [
        ("long-cot", SearchSpace(32, ("h100-sxm", "h200"))),
        ("mixed-gpus", SearchSpace(16, ("h100-sxm",), inference_gpu_types=("h100-sxm", "h200"))),
        ("reward-model", SearchSpace(16, ("h100-sxm",))),
    ],
)
def test_candidate_scenarios_are_what_their_overrides_give(name, space):
    """The planner sets each candidate's fields on the base's mapping (no YAML): the scenario, or
    the reason it cannot be built, is the one `--set` overrides of the candidate give."""

    def built(make_scenario):
        try:
            return make_scenario().model_dump(mode="json")
        except ScenarioError as exc:
            return str(exc)
        except ValidationError as exc:
            return validation_lines(exc)[0]

    base = load_scenario(name)
    scenarios = CandidateScenarios(base)
    cands = generate(base, space)
    reasons = 0
    for c in cands:
        ours = built(lambda c=c: scenarios.build(c))
        via_set = built(
            lambda c=c: scenario_from_dict(base.with_mode(c.mode).model_dump(mode="json"), c.overrides(), base.base_dir)
        )
        assert ours == via_set, c.label
        reasons += isinstance(ours, str)
    assert len(cands) > 100 and (reasons > 0 or name == "long-cot")


def test_plan_and_sweep_plots(tmp_path):
    base = tmp_path / "sc.yaml"
    base.write_text(yaml.safe_dump(SMALL | {"cluster": {**SMALL["cluster"], "gpus_per_node": 8}}))
    args = ["--steps", "2", "--steps-run", "10", "--workers", "1", "--modes", "sync,async"]
    res = runner.invoke(app, ["plan", str(base), "--max-gpus", "8", *args, "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG" and "Plot:" in res.stdout
    vary = ["--vary", "pipeline.inference.gpus=1,2", "--workers", "1"]
    res = runner.invoke(app, ["sweep", str(base), *vary, "--plot", str(tmp_path / "s.svg")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s.svg").read_text().lstrip().startswith("<?xml")
    res = runner.invoke(app, ["sweep", str(base), *vary, "--plot", str(tmp_path / "s.svg")])
    assert res.exit_code == 2 and "--force" in res.output
    res = runner.invoke(app, ["sweep", str(base), *vary, "--plot", str(tmp_path / "s.gif")])
    assert res.exit_code == 2 and "--plot" in res.output


def _same_result(a, b) -> None:
    assert [asdict(e) for e in a.frontier] == [asdict(e) for e in b.frontier]
    assert a.recommended.candidate == b.recommended.candidate
    assert (a.runner_up and a.runner_up.candidate) == (b.runner_up and b.runner_up.candidate)


@pytest.mark.parametrize(
    "objective,overrides",
    [
        ("cost", []),
        ("time", []),
        ("cost", ["pipeline.inference.kv_memory_fraction=0.6"]),  # KV-bound: admission waits, preemptions
    ],
)
def test_bounded_plan_is_the_exhaustive_one(objective, overrides):
    """Skipping candidates by their lower bound changes nothing but the work done."""
    base = load_scenario("long-cot", ["algorithm.prompts_per_step=8", *overrides])
    space = SearchSpace(16, ("h100-sxm",))
    kw = dict(objective=objective, sim_steps=3, run_steps=200, executor=LocalExecutor(2))
    full = plan(base, space, exhaustive=True, **kw)
    bounded = plan(base, space, **kw)
    _same_result(full, bounded)
    assert not full.skipped and (bounded.skipped or objective == "time")  # cost: some were skipped
    assert len(bounded.evaluations) + len(bounded.skipped) == len(full.evaluations)
    # some simulations were stopped under way by their watched bound (`rlsim.planner.watch`), not run out
    assert any(p.reason.startswith("stopped at t=") for p in bounded.skipped)
    assert full.reason.split("(")[-1] == bounded.reason.split("(")[-1]  # same runner-up sentence


def test_bounded_plan_under_constraints_is_the_exhaustive_one():
    base = load_scenario("long-cot", ["algorithm.prompts_per_step=8"])
    space = SearchSpace(16, ("h100-sxm",))
    free = plan(base, space, sim_steps=3, run_steps=200, executor=LocalExecutor(2), exhaustive=True)
    hours = sorted(e.run_hours for e in free.evaluations)
    c = Constraints(deadline_hours=hours[len(hours) // 3], max_staleness=1)
    kw = dict(constraints=c, sim_steps=3, run_steps=200, executor=LocalExecutor(2))
    _same_result(plan(base, space, exhaustive=True, **kw), plan(base, space, **kw))


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("long-cot", ["algorithm.prompts_per_step=8"]),
        ("default", []),
        ("moe-qwen3-30b", []),
        ("default", ["workload.length_schedule={start_mean: 300, end_mean: 900}", "pipeline.staleness.policy=reject"]),
        ("default", ["pipeline.training.padding=batch_longest", "pipeline.training.step_overhead_s=2"]),
        ("partial-rollout", ["algorithm.prompts_per_step=8"]),
        ("long-cot", ["algorithm.prompts_per_step=8", "pipeline.inference.keep_groups_together=false"]),
    ],
)
def test_lower_bound_never_exceeds_the_simulation(name, overrides):
    """Every candidate of every mode: bound <= simulated run hours, dollars and mean staleness."""
    base = load_scenario(name, overrides)
    space = SearchSpace(16 if name in ("long-cot", "partial-rollout") else 8, (base.cluster.gpu,))
    result = plan(base, space, sim_steps=2, run_steps=50, executor=LocalExecutor(2), exhaustive=True)
    runnable = dict((c.index, sc) for c, sc in prune(base, generate(base, space), 2)[0])
    draws = BatchDraws()
    modes = set()
    for e in result.evaluations:
        row = result.prices[search.price_key(e.candidate)]
        b = candidate_bound(e.candidate, runnable[e.candidate.index], row, result.run_steps, draws)
        assert 0 < b.hours <= e.run_hours and b.usd <= e.run_usd, e.candidate.label
        assert b.staleness_mean <= e.staleness_mean
        modes.add(e.candidate.mode)
    assert len(modes) >= 4


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("default", []),
        ("default", ["pipeline.weight_sync.every_steps=2", "pipeline.inference.max_batch=8"]),
        ("default", ["pipeline.inference.dispatch=least_loaded", "pipeline.inference.keep_groups_together=false"]),
        ("long-cot", ["algorithm.prompts_per_step=8", "pipeline.inference.max_batch=16"]),
        ("long-cot", ["algorithm.prompts_per_step=8", "pipeline.weight_sync.every_steps=2"]),
        ("moe-qwen3-30b", ["pipeline.staleness.policy=bound"]),
        ("reward-model", []),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "one_step_off"])
def test_least_lags_are_exact_when_one_step_ahead_at_most(name, overrides, mode):
    """`bounds.least_lags` claims every sample starts on the oldest weights the dispatcher
    allows when the run-ahead is at most one step and loads block; the simulation agrees, also
    when the engines queue (a small max_batch), every other step syncs or the split is dynamic."""
    from rlsim.planner.bounds import least_lags
    from rlsim.planner.executors import simulate_metrics

    sc = load_scenario(name, overrides).with_mode(mode).model_copy(update={"steps": 5})
    lags = least_lags(sc)
    assert len(lags) == 5 and (mode == "sync" or max(lags) >= 1)
    metrics = simulate_metrics(sc).metrics
    assert metrics is not None
    assert sum(lags) / len(lags) == metrics.staleness_mean  # to the last bit: the bound claims no margin
    assert max(lags) == metrics.staleness_max


def test_least_lags_fall_back_to_the_sync_interval_otherwise():
    """Run-ahead of two or more steps, stale groups redrawn, or weights loaded in flight: only
    s mod the interval."""
    from rlsim.planner.bounds import least_lags

    redrawn = load_scenario("moe-qwen3-30b").with_mode("one_step_off").model_copy(update={"steps": 4})
    assert redrawn.pipeline.staleness.policy.value == "reject" and least_lags(redrawn) == [0, 0, 0, 0]

    deep = load_scenario("default").with_mode("async").model_copy(update={"steps": 4})
    assert least_lags(deep) == [0, 0, 0, 0]
    flight = load_scenario("default", ["pipeline.weight_sync.interrupt=in_flight"]).with_mode("one_step_off")
    flight = flight.model_copy(update={"steps": 4})
    assert flight.pipeline.interrupt.value == "blocking"  # with_mode resets the interrupt to the mode's
    flight = scenario_from_dict(
        {**flight.model_dump(mode="json"), "pipeline": {**flight.pipeline.model_dump(mode="json"),
                                                        "weight_sync": {"interrupt": "in_flight"}}}
    )  # fmt: skip
    assert least_lags(flight) == [0, 0, 0, 0]


@pytest.mark.parametrize("name", ["default", "long-cot", "moe-qwen3-30b", "llama70b-multinode"])
def test_decode_iterations_share_best_at_the_largest_batch(name):
    """What the decode floor assumes (`bounds.DecodeFloor`): per sequence, fixed + weight reads
    and fixed + GEMMs cost least at max_batch; fixed and weight reads least at batch 1; the
    per-cached-token slopes do not depend on the batch."""
    from rlsim.placement import resolve
    from rlsim.simulator.costs import Costs

    sc = load_scenario(name)
    costs = Costs(resolve(sc))
    top = sc.pipeline.inference.max_batch
    full, one = costs.iteration(top), costs.iteration(1)
    for b in range(1, top + 1):
        c = costs.iteration(b)
        assert (c.fixed_s + c.mem0_s) / b >= (full.fixed_s + full.mem0_s) / top * (1 - 1e-12)
        assert c.comp0_s / b >= full.comp0_s / top * (1 - 1e-12)
        assert c.fixed_s >= one.fixed_s and c.mem0_s >= one.mem0_s
        assert c.mem_per_token_s == one.mem_per_token_s and c.comp_per_token_s == one.comp_per_token_s


class _MapOnly:
    """An executor with nothing but `map` (as Ray's is): the bounded search batches through it."""

    def __init__(self) -> None:
        self.calls = 0

    def map(self, fn, items, progress=None):
        self.calls += 1
        return LocalExecutor(1).map(fn, items, progress)


def test_bounded_search_skips_the_same_candidates_on_every_executor():
    base = load_scenario("long-cot", ["algorithm.prompts_per_step=8"])
    space = SearchSpace(16, ("h100-sxm",))
    kw = dict(sim_steps=3, run_steps=200)
    pooled = plan(base, space, executor=LocalExecutor(2), **kw)
    mapped = _MapOnly()
    batched = plan(base, space, executor=mapped, **kw)
    assert pooled.skipped == batched.skipped and pooled.evaluations == batched.evaluations
    assert pooled.reason == batched.reason and mapped.calls > 1


def test_plan_cli_exhaustive_gives_the_same_frontier(tmp_path, long_cot_plan):
    out = tmp_path / "full.json"
    res = runner.invoke(app, ["plan", "long-cot", "--max-gpus", "16", *LONG_COT, "--exhaustive", "--json", str(out)])
    assert res.exit_code == 0, res.output
    full = json.loads(out.read_text())
    assert full["counts"]["skipped"] == 0 and long_cot_plan["counts"]["skipped"] > 0
    for k in ("frontier", "recommended", "runner_up"):
        assert full[k] == long_cot_plan[k]
    rows = {e["index"]: e for e in long_cot_plan["evaluations"]}
    assert all(rows[e["index"]] == e for e in full["evaluations"] if e["index"] in rows)


def test_plan_prices_a_pool_the_scenario_pins_to_its_own_gpu_type():
    """mixed-gpus keeps its inference pool on H200 in every candidate: that type is priced too
    (it used to fail with a KeyError on the unpriced 'h200 x8')."""
    base = load_scenario("mixed-gpus")
    space = SearchSpace(8, ("h100-sxm",), modes=("sync",), inference_tps=(1,))
    result = plan(base, space, sim_steps=2, run_steps=50, executor=LocalExecutor(1), exhaustive=True)
    assert "h200 x8" in result.prices and result.evaluations
    for e in result.evaluations:
        h200 = result.prices["h200 x8"].usd_per_gpu_hour
        h100 = result.prices["h100-sxm x8"].usd_per_gpu_hour
        rented = e.candidate.inference_gpus * h200 + e.candidate.training_gpus * h100
        assert e.run_usd == pytest.approx(e.run_hours * rented, rel=1e-9)


def test_screening_warnings_reach_the_caller_from_the_workers(monkeypatch):
    """Candidates are checked and bounded in the pool's workers; a warning raised there (e.g. by
    `resolve`) is raised again in the planning process, where the CLI prints it as one line."""
    from rlsim.notices import RlsimWarning, warn

    real = search.check

    def check(base, cand, scenarios=None):
        warn(f"test.field: candidate {cand.index} checked")
        return real(base, cand, scenarios)

    monkeypatch.setattr(search, "check", check)
    base = make()
    space = SearchSpace(4, ("h100-sxm",), modes=("sync",))
    with pytest.warns(RlsimWarning) as caught:
        plan(base, space, sim_steps=2, run_steps=50, executor=LocalExecutor(2), prices_file=PRICES_4GPU)
    texts = [str(w.message) for w in caught if "test.field" in str(w.message)]
    assert texts == [f"test.field: candidate {c.index} checked" for c in generate(base, space)]
