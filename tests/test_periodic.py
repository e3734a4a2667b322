"""Periodic evaluation and checkpoints (scenario.evaluation, scenario.checkpointing; models/periodic.py):
each term against a hand computation, off by default, and what it adds to a run's price."""

from __future__ import annotations

import json

import numpy as np
import pytest
from small_scenarios import make

from rlsim.catalog.prices import PriceRow
from rlsim.metrics.cost import price_projection, project_points
from rlsim.metrics.summary import summarize
from rlsim.models import periodic
from rlsim.models.decode import IterationCost
from rlsim.placement import resolve
from rlsim.simulator.costs import Costs
from rlsim.simulator.run import simulate


def _price_row() -> PriceRow:
    """One on-demand H100 price at $3.60 a GPU-hour."""
    return PriceRow(
        provider="p",
        product="x",
        gpu="h100-sxm",
        pricing="on_demand",
        usd_per_gpu_hour=3.6,
        observed="2026-01-01",
        source="test",
    )


def _line(batch: int) -> IterationCost:
    """A decode iteration of 1 s + 0.1 s a sequence + 0.01 s a cached token (memory line only)."""
    return IterationCost(batch, 1.0, 0.1 * batch, 0.01, 0.0, 0.0)


def _coefficients(batches: np.ndarray) -> np.ndarray:
    return np.array([[1.0, 0.1 * b, 0.01, 0.0, 0.0, 0.0] for b in batches.tolist()])


def test_drain_of_a_tiny_batch_by_hand() -> None:
    # prompts 10 and 20, responses 3 and 5: the prefill makes each first token and caches 10+1 and
    # 20+1 tokens (32). Iterations at batch 2 over 32 and 34 cached tokens: 2 x (1 + 0.2) + 0.01 x 66.
    # The first ends there (13 cached freed: 36 - 13 = 23 left); two more at batch 1 over 23 and 24.
    by_hand = (2 * 1.2 + 0.01 * (32 + 34)) + (2 * 1.1 + 0.01 * (23 + 24))
    assert periodic.drain_s(_coefficients, [10, 20], [3, 5]) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(5.73)
    # the same as the decode model's spans, one span per finish
    spans = _line(2).span_s(32, 2) + _line(1).span_s(23, 2)
    assert periodic.drain_s(_coefficients, [10, 20], [3, 5]) == pytest.approx(spans, rel=1e-12)


def test_eval_pass_is_the_slowest_engine_plus_the_switch() -> None:
    def prefill(prompts: list[int]) -> float:
        return 0.5 * len(prompts)  # half a second per distinct prompt

    groups = [(10, [3, 5]), (20, [2])]  # group 0 on engine 0, group 1 on engine 1
    engine0 = 0.5 + periodic.drain_s(_coefficients, [10, 10], [3, 5])
    engine1 = 0.5 + periodic.drain_s(_coefficients, [20], [2])  # one iteration at batch 1 over 21 tokens
    assert engine1 == pytest.approx(0.5 + 1.1 + 0.01 * 21)
    assert periodic.eval_pass_s(groups, 2, 16, _coefficients, prefill, 7.0) == pytest.approx(
        max(engine0, engine1) + 7.0
    )
    # one engine of max_batch 2: the third sequence waits for a second wave
    one = 2 * 0.5 + periodic.drain_s(_coefficients, [10, 10], [3, 5]) + periodic.drain_s(_coefficients, [20], [2])
    assert periodic.eval_pass_s(groups, 1, 2, _coefficients, prefill) == pytest.approx(one)


def test_checkpoint_bytes_over_bandwidth() -> None:
    # Megatron's bf16 parameters: 2 bytes, + 12 of optimizer state (fp32 master and two moments)
    assert periodic.checkpoint_bytes(1e9, 1e9, 2, with_optimizer=True) == 14e9
    # FSDP's fp32 parameters are the master copy: 4 + 8
    assert periodic.checkpoint_bytes(1e9, 1e9, 4, with_optimizer=True) == 12e9
    assert periodic.checkpoint_bytes(1e9, 1e9, 2, with_optimizer=False) == 2e9
    assert periodic.checkpoint_bytes(1e9, 1e7, 2, with_optimizer=True) == 2e9 + 12e7  # LoRA: few trainable
    assert periodic.checkpoint_s(14e9, 2, 7.0) == pytest.approx(1.0)  # two nodes at 7 GB/s each


def test_amortized_mean_uses_whole_intervals() -> None:
    assert periodic.run_s(150, 20, 10.0) == 70.0  # floor(150 / 20) = 7 evaluations
    assert periodic.amortized_s_per_step(150, 20, 10.0) == pytest.approx(70.0 / 150)
    assert periodic.run_s(19, 20, 10.0) == 0.0


def test_scenario_checkpoint_from_the_trainer_nodes() -> None:
    sc = make(overrides=["checkpointing.every_steps=5", "checkpointing.write_gbps_per_node=2"])
    res = resolve(sc)
    # qwen2.5-0.5b on 2 FSDP training GPUs of one node: fp32 parameters + two moments
    by_hand = res.llm.total_params * (4 + 8) / 2e9
    assert Costs(res).checkpoint_s() == pytest.approx(by_hand, rel=1e-12)
    assert Costs(resolve(make())).checkpoint_s() == 0.0 and Costs(resolve(make())).eval_pass_s() == 0.0


def test_colocated_eval_wakes_the_engines() -> None:
    sc = make(overrides=["pipeline.mode=colocated", "evaluation.every_steps=5", "evaluation.prompts=4"])
    c, awake = Costs(resolve(sc)), Costs(resolve(sc))
    awake.switch_s = awake.sync_s = 0.0  # the same pass on engines already awake
    assert c.switch_s > 0 and c.sync_s > 0
    assert c.eval_pass_s() - awake.eval_pass_s() == pytest.approx(2 * c.switch_s + c.sync_s, rel=1e-9)


def test_off_by_default_and_the_step_never_moves() -> None:
    base = summarize(simulate(make()))
    assert base.periodic is None
    assert "periodic" not in json.loads(base.model_dump_json())
    on = summarize(
        simulate(
            make(
                overrides=[
                    "evaluation.every_steps=5",
                    "evaluation.prompts=8",
                    "evaluation.samples_per_prompt=2",
                    "checkpointing.every_steps=10",
                    "checkpointing.write_gbps_per_node=1",
                    "run_steps=100",
                ]
            )
        )
    )
    assert on.periodic is not None and on.periodic.eval_pass_s > 0 and on.periodic.checkpoint_s > 0
    assert on.model_dump(exclude={"periodic"}) == base.model_dump()  # the simulated steps are the same
    p = on.periodic
    assert p.amortized_s_per_step == pytest.approx((20 * p.eval_pass_s + 10 * p.checkpoint_s) / 100)


def test_run_cost_grows_by_the_periodic_time_at_the_cluster_price() -> None:
    sc = make(
        overrides=[
            "evaluation.every_steps=7",
            "evaluation.prompts=8",
            "checkpointing.every_steps=25",
            "checkpointing.write_gbps_per_node=1",
            "run_steps=300",
        ]
    )
    on = summarize(simulate(sc))
    off = on.model_copy(update={"periodic": None})
    row = _price_row()
    run_steps = 300
    a = price_projection(project_points([(0.0, on)], run_steps, fill_steps=1), row)
    b = price_projection(project_points([(0.0, off)], run_steps, fill_steps=1), row)
    per_step = on.periodic.amortized_s_per_step
    assert per_step == pytest.approx((42 * on.periodic.eval_pass_s + 12 * on.periodic.checkpoint_s) / 300)
    usd_per_s = on.gpus * 3.6 / 3600.0  # the cluster's price per second
    assert a.usd_per_run - b.usd_per_run == pytest.approx(run_steps * per_step * usd_per_s, rel=1e-9)
    assert a.idle_usd_per_run == b.idle_usd_per_run


def test_a_run_wall_row_compares_the_step_plus_the_amortized_time() -> None:
    from small_scenarios import SMALL, deep_merge

    from rlsim.validation.published import PublishedRow
    from rlsim.validation.published_run import simulate_row

    def row(over: dict, flag: bool) -> PublishedRow:
        return PublishedRow(
            id="t",
            kind="run",
            title="t",
            source="test",
            read_on="2026-12-07",
            published={"step_s": 1.0},
            step_over_run=flag,
            scenario=deep_merge(SMALL, {"run_steps": 40, **over}),
        )

    periodic_on = {
        "evaluation": {"every_steps": 10, "prompts": 4},
        "checkpointing": {"every_steps": 15, "write_gbps_per_node": 1},
    }
    plain = simulate_row(row({}, False))["step_s"]
    assert simulate_row(row(periodic_on, False))["step_s"] == plain  # a per-step timer holds none of it
    sc = make(periodic_on, ["run_steps=40"])
    p = summarize(simulate(sc)).periodic
    by_hand = (4 * p.eval_pass_s + 2 * p.checkpoint_s) / 40  # floor(40/10) = 4, floor(40/15) = 2
    assert simulate_row(row(periodic_on, True))["step_s"] == pytest.approx(plain + by_hand, rel=1e-12)
    assert simulate_row(row({}, True))["step_s"] == plain  # none stated: nothing added


def test_plan_bound_adds_the_same_periodic_time_and_stays_below() -> None:
    from rlsim.planner.bounds import BatchDraws
    from rlsim.planner.candidates import Candidate
    from rlsim.planner.costing import project_samples, sample_scenarios
    from rlsim.planner.search import candidate_bound

    row = _price_row()
    cand = Candidate(0, "h100-sxm", 4, 4, "sync", 2, 1, 2, None, 1)
    on = ["evaluation.every_steps=6", "evaluation.prompts=4", "checkpointing.every_steps=9"]
    on.append("checkpointing.write_gbps_per_node=1")
    sc_off, sc_on = make(), make(overrides=on)
    run_steps = 40
    off = candidate_bound(cand, sc_off, row, run_steps, BatchDraws())
    with_p = candidate_bound(cand, sc_on, row, run_steps, BatchDraws())
    proj, metrics = project_samples(sample_scenarios(sc_on), run_steps)
    p = metrics[0].periodic
    added = 6 * p.eval_pass_s + 4 * p.checkpoint_s  # floor(40/6) = 6, floor(40/9) = 4
    assert (with_p.hours - off.hours) * 3600.0 == pytest.approx(added, rel=1e-9)
    assert with_p.hours * 3600.0 <= proj.wall_time_s
