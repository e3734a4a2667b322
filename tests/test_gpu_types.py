"""A GPU type per pool (issue 16, feature 5): each pool runs at its own GPU's datasheet, weight
updates cross the link between the pools, and each pool is priced at its own GPU's price."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from cli_helpers import one_line_error
from small_scenarios import make

from rlsim.catalog.prices import default_price, load_prices
from rlsim.metrics.cost import cheapest_row, cost_line
from rlsim.metrics.summary import summarize
from rlsim.models import footprint
from rlsim.placement import resolve
from rlsim.planner.bounds import BatchDraws
from rlsim.planner.candidates import SearchSpace, generate, prune
from rlsim.planner.search import candidate_bound, plan, price_key
from rlsim.runs import price_for, run_mode
from rlsim.simulator.run import simulate

BASE = {
    "model": "qwen2.5-7b",
    "cluster": {"gpu": "h100-sxm", "gpus_per_node": 4},
    "algorithm": {"prompts_per_step": 2, "group_size": 4, "minibatches": 1},
    "workload": {
        "prompt_tokens": {"kind": "constant", "value": 64},
        "response_tokens": {"kind": "constant", "value": 500},
    },
    "pipeline": {"inference": {"gpus": 2, "max_batch": 8}, "training": {"gpus": 2, "micro_batch_tokens": 2048}},
}


def _with(**pools) -> dict:
    data = copy.deepcopy(BASE)
    for pool, gpu in pools.items():
        data["pipeline"][pool]["gpu"] = gpu
    return data


def _decode_s(data: dict) -> float:
    return summarize(simulate(make(data))).pool("inference").gpu_seconds_by_state["decode"]


def test_each_pool_runs_exactly_as_a_cluster_of_its_type() -> None:
    """Generation on an H200 pool beside H100 training is generation on H200s; training stays H100's."""
    mixed = summarize(simulate(make(_with(inference="h200"))))
    all_h200 = copy.deepcopy(BASE)
    all_h200["cluster"]["gpu"] = "h200"
    h200 = summarize(simulate(make(all_h200)))
    h100 = summarize(simulate(make(BASE)))
    assert mixed.pool("inference").gpu_seconds_by_state["decode"] == pytest.approx(
        h200.pool("inference").gpu_seconds_by_state["decode"], rel=1e-12
    )  # the same iterations; the weight syncs between them (sent by H100s) shift their start times
    assert mixed.kv_capacity_tokens == h200.kv_capacity_tokens
    for state in ("train", "logprob", "optimizer"):
        assert mixed.pool("training").gpu_seconds_by_state[state] == pytest.approx(
            h100.pool("training").gpu_seconds_by_state[state], rel=1e-12
        )
    assert [p.gpu_type for p in mixed.pools] == ["h200", "h100-sxm"]


def test_half_the_memory_bandwidth_roughly_doubles_decode() -> None:
    """Small-batch decode is memory-bound: an H100 PCIe pool (0.42x the H200's achieved bandwidth)
    decodes for nearly 1/0.42 as long; the fixed per-iteration cost keeps it a little under."""
    slow, fast = _decode_s(_with(inference="h100-pcie")), _decode_s(_with(inference="h200"))
    res = resolve(make(_with(inference="h100-pcie"))), resolve(make(_with(inference="h200")))
    bandwidth = res[1].profile_of("inference").memory_gbps / res[0].profile_of("inference").memory_gbps
    assert bandwidth == pytest.approx(2.4)
    assert 0.8 * bandwidth < slow / fast <= bandwidth


def test_cost_is_each_pools_gpu_hours_at_its_price() -> None:
    """8 H200 rollout + 8 H100 training GPUs: $ = wall hours x (8 x $H200 + 8 x $H100)."""
    data = _with(inference="h200")
    data["cluster"]["gpus_per_node"] = 8
    data["cluster"]["nodes"] = 2
    data["pipeline"]["inference"]["gpus"] = 8
    data["pipeline"]["training"]["gpus"] = 8
    run = run_mode(make(data))
    hours = run.metrics.wall_time_s / 3600.0
    h200 = default_price("h200", gpus_per_node=8).usd_per_gpu_hour
    h100 = default_price("h100-sxm", gpus_per_node=8).usd_per_gpu_hour
    assert run.cost.usd_per_run == pytest.approx(hours * (8 * h200 + 8 * h100), rel=1e-12)
    assert [(p.pool, p.gpu_type, p.usd_per_gpu_hour) for p in run.cost.pools] == [
        ("inference", "h200", h200),
        ("training", "h100-sxm", h100),
    ]
    idle = {p.pool: p for p in run.metrics.pools}
    for p in run.cost.pools:
        idle_s = (
            idle[p.pool].gpu_seconds_by_state["idle-waiting-for-data"]
            + idle[p.pool].gpu_seconds_by_state["idle-waiting-for-weights"]
        )
        assert p.idle_usd_per_run == pytest.approx(idle_s / 3600.0 * p.usd_per_gpu_hour, rel=1e-9)
    # one GPU type: one price for every GPU, no pools listed
    same = run_mode(make({**data, "pipeline": {**data["pipeline"], "inference": {"gpus": 8, "max_batch": 8}}}))
    assert same.cost.pools is None
    assert same.cost.usd_per_run == pytest.approx(16 * same.metrics.wall_time_s / 3600.0 * h100, rel=1e-12)
    assert "pools" not in same.cost.model_dump(mode="json")
    line = cost_line(run.metrics, price_for(run.scenario), run_steps=2 * run.metrics.steps)
    assert line.usd_per_run == pytest.approx(2 * run.cost.usd_per_run, rel=1e-12)


def test_weight_sync_crosses_the_link_between_pools() -> None:
    """nccl_bucketed: the payload crosses the inter-pool link once, so sync(bw1) - sync(bw2) =
    bytes x (1/bw1 - 1/bw2); everything else in the update is the same."""
    fast, slow = (
        summarize(simulate(make(BASE, [f"cluster.inter_pool_gbps={gbps}"]))).weight_sync_s for gbps in (100, 10)
    )
    payload = footprint.weight_bytes(resolve(make(BASE)).llm)
    assert slow - fast == pytest.approx(payload * (1 / 10e9 - 1 / 100e9), rel=1e-9)


def test_planner_searches_the_inference_gpu_type(tmp_path: Path) -> None:
    """Each split on 16 GPUs with H100 or H200 inference; each priced per pool at the plan's rows."""
    data = _with()
    data["cluster"].update({"gpus_per_node": 8, "nodes": 2})
    base = make(data)
    space = SearchSpace(
        16,
        ("h100-sxm",),
        modes=("sync",),
        inference_tps=(1,),
        sync_every=(1,),
        gpu_counts=(16,),
        inference_gpu_types=("h100-sxm", "h200"),
    )
    result = plan(base, space, sim_steps=2, run_steps=10, exhaustive=True)
    rows = result.to_records()
    assert {r["inference_gpu"] for r in rows} == {"h100-sxm", "h200"}
    assert len(rows) == 2 * 7  # splits of 16 GPUs in eighths, each on both types
    rates = {
        g: cheapest_row(load_prices(), g, "on_demand", gpus_per_node=8).usd_per_gpu_hour for g in ("h200", "h100-sxm")
    }
    for r, e in zip(rows, result.evaluations, strict=True):
        inf = r["inference_gpus"]
        per_hour = inf * rates[r["inference_gpu"]] + (16 - inf) * rates["h100-sxm"]
        assert e.run_usd == pytest.approx(e.run_hours * per_hour, rel=1e-9)
    h200 = [e for e in result.evaluations if e.candidate.inference_gpu == "h200"]
    assert h200[0].candidate.label == "16xh100-sxm sync 2i h200/14t tp1 sync/1"
    # the lower bound stays below each simulation, and skipping by it changes nothing
    runnable = dict((c.index, sc) for c, sc in prune(base, generate(base, space), 2)[0])
    draws = BatchDraws()
    for e in result.evaluations:
        sc = runnable[e.candidate.index]
        b = candidate_bound(e.candidate, sc, result.prices[price_key(e.candidate)], 10, draws, result.prices)
        assert 0 < b.hours <= e.run_hours and b.usd <= e.run_usd, e.candidate.label
    bounded = plan(base, space, sim_steps=2, run_steps=10)
    assert [e.candidate.index for e in bounded.frontier] == [e.candidate.index for e in result.frontier]
    assert bounded.recommended.candidate == result.recommended.candidate
    # with --gpu-types too, every pairing of a training (cluster) type and an inference type
    both = SearchSpace(16, ("h100-sxm", "h200"), modes=("sync",), inference_tps=(1,), sync_every=(1,),
                       gpu_counts=(16,), inference_gpu_types=("h100-sxm", "h200"))  # fmt: skip
    assert {(c.gpu, c.inference_gpu) for c in generate(base, both)} == {
        ("h100-sxm", "h100-sxm"), ("h100-sxm", "h200"), ("h200", "h100-sxm"), ("h200", "h200")
    }  # fmt: skip
    # a plan that does not search the type lists no inference_gpu (its output is unchanged)
    plain = plan(base, SearchSpace(16, ("h100-sxm",), modes=("sync",), inference_tps=(1,), sync_every=(1,),
                                   gpu_counts=(16,)), sim_steps=2, run_steps=10, exhaustive=True)  # fmt: skip
    assert "inference_gpu" not in plain.to_records()[0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("pipeline.inference.gpu=h999", "pipeline.inference.gpu"),
        ("pipeline.training.gpu=cpu", "pipeline.training.gpu"),
        ("cluster.inter_pool_gbps=0", "cluster.inter_pool_gbps"),
    ],
)
def test_bad_gpu_type_is_one_line(tmp_path: Path, change: str, field: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    line = one_line_error(["simulate", str(path), "--mode", "sync", "--steps", "1", "--set", change])
    assert field in line, line


def test_colocated_pools_cannot_have_two_types(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    data = _with(inference="h200")
    data["pipeline"]["mode"] = "colocated"
    del data["pipeline"]["inference"]["gpus"], data["pipeline"]["training"]["gpus"]
    path.write_text(yaml.safe_dump(data))
    line = one_line_error(["simulate", str(path), "--mode", "colocated", "--steps", "1"])
    assert "pipeline.inference.gpu" in line and "colocated" in line
