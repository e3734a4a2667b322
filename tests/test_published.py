"""The published-run suite: rows are well-formed setups with sources, and `validate --published`
compares what it should (phases, sync->async speedups, trend ratios) the way it says."""

from __future__ import annotations

import json
import math
import re

import pytest
from cli_helpers import one_line_error, runner

from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.placement import resolve
from rlsim.validation.published import PHASES, PublishedRow, published_rows, select_rows
from rlsim.validation.published_run import _scenario, relative_error, run_suite, simulate_row

ROWS = published_rows()


def test_the_suite_holds_the_rows_the_issue_asks_for() -> None:
    kinds = {r.kind for r in ROWS}
    assert kinds == {"run", "weight_sync", "generation"}
    ids = {r.id for r in ROWS}
    for needed in ("verl-osp-fsdp2-sync", "verl-osp-fsdp2-async", "verl-osp-megatron-sync", "verl-osp-megatron-async"):
        assert needed in ids
    assert sum(1 for r in ROWS if r.pair_with) >= 3
    assert sum(1 for r in ROWS if r.ratio_to) >= 3


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_every_row_is_a_sourced_setup_that_resolves(row: PublishedRow) -> None:
    assert re.search(r"@[0-9a-f]{7,40}|arXiv|issue \d+|PR \d+|https?://", row.source), row.source
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", row.read_on), "the date the source was read"
    speedup_pair = {r.id for r in ROWS if r.published_speedup} | {r.pair_with for r in ROWS if r.published_speedup}
    assert (row.published or row.id in speedup_pair) and set(row.published) <= set(PHASES)
    for a in row.assumptions:
        assert a.field and a.why.strip()
    resolve(_scenario(row))  # the setup fits the GPUs it names


def test_relative_error_and_published_ranges() -> None:
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert relative_error(5.8, 5.75, (5.5, 6.0)) == 0.0
    assert relative_error(7.2, 5.75, (5.5, 6.0)) == pytest.approx(7.2 / 6.0 - 1)
    assert relative_error(0.1, 0.3, (0.0, 0.3)) == 0.0


def test_a_pair_is_compared_as_the_sync_step_over_the_async_step() -> None:
    rows = select_rows(["verl-osp-fsdp2-async"])
    assert {r.id for r in rows} == {"verl-osp-fsdp2-async", "verl-osp-fsdp2-sync"}  # the pair comes along
    assert {r.id for r in select_rows(["verl-osp-fsdp2-sync"])} == {r.id for r in rows}  # named either way round
    result = run_suite(rows)
    (speedup,) = result.speedups
    sync, asyn = (simulate_row(next(r for r in rows if r.id == i))["step_s"] for i in (rows[1].id, rows[0].id))
    assert speedup.predicted == pytest.approx(sync / asyn)
    assert speedup.published == pytest.approx(749 / 520)
    assert speedup.error == pytest.approx(speedup.predicted / speedup.published - 1)


def test_a_published_speedup_is_compared_per_generated_token(monkeypatch) -> None:
    # PipelineRL's analytic case states relative token throughput (tokens per flash) of a
    # conventional RL step of 133 optimizer steps of 128 samples and a pipeline step of one:
    # the speedup is the time per generated token, not per step.
    rows = select_rows(["pipelinerl-analytic-pipeline"])
    by_id = {r.id: r for r in rows}
    assert set(by_id) == {"pipelinerl-analytic-pipeline", "pipelinerl-analytic-conventional"}  # the pair comes along
    pipe, conv = by_id["pipelinerl-analytic-pipeline"], by_id["pipelinerl-analytic-conventional"]
    c, p = simulate_row(conv), simulate_row(pipe)
    simulated = {conv.id: c, pipe.id: p}  # each simulated once; run_suite compares these
    monkeypatch.setattr("rlsim.validation.published_run.simulate_row", lambda row: simulated[row.id])
    (speedup,) = run_suite(rows).speedups
    assert (c["samples_per_step"], p["samples_per_step"]) == (17024, 128)
    per_token = (c["step_s"] / c["response_tokens_per_step"]) / (p["step_s"] / p["response_tokens_per_step"])
    assert speedup.predicted == pytest.approx(per_token)
    assert speedup.published == 1.57  # stated by the source, not a ratio of step times
    assert speedup.predicted > 1.0  # the pipeline is faster, as published
    assert c["step_s"] / p["step_s"] > 100  # while a conventional step is 133 optimizer steps long


def test_a_pair_of_equal_batches_is_still_compared_step_for_step() -> None:
    (speedup,) = run_suite(select_rows(["verl-osp-megatron-async"])).speedups
    sync, asyn = (
        simulate_row(next(r for r in ROWS if r.id == i))["step_s"]
        for i in ("verl-osp-megatron-sync", "verl-osp-megatron-async")
    )
    assert speedup.predicted == pytest.approx(sync / asyn)


def test_a_published_step_of_several_local_updates_adds_their_times() -> None:
    # verl's fully-async trainer logs timing_s/* summed over the trigger_parameter_sync_step local
    # updates between two syncs; such a row simulates each local update as one rlsim step.
    row = next(r for r in ROWS if r.steps_per_published_step > 1)
    k = row.steps_per_published_step
    local = simulate_row(PublishedRow.model_validate({**row.model_dump(), "steps_per_published_step": 1}))
    window = simulate_row(row)
    for figure in ("step_s", "gen_s", "update_s", "samples_per_step", "response_tokens_per_step"):
        assert window[figure] == pytest.approx(k * local[figure])
    assert window["output_tokens_per_s"] == local["output_tokens_per_s"]  # a rate does not add


def test_a_sync_window_holds_the_batch_of_the_step_it_is_compared_with() -> None:
    by_id = {r.id: r for r in ROWS}
    windows = [r for r in ROWS if r.steps_per_published_step > 1]
    assert windows
    for row in windows:
        sc, base = _scenario(row), _scenario(by_id[row.pair_with])
        assert row.steps_per_published_step == sc.pipeline.weight_sync.every_steps  # one window, one sync
        assert row.steps_per_published_step * sc.algorithm.samples_per_step == base.algorithm.samples_per_step


def test_a_published_speedup_needs_its_pair() -> None:
    row = next(r for r in ROWS if r.published_speedup)
    lone = PublishedRow.model_validate({**row.model_dump(), "pair_with": None})
    with pytest.raises(ScenarioError, match="pair_with"):
        lone.check_phases()


def test_a_row_of_one_step_is_refused_in_one_line() -> None:
    row = next(r for r in ROWS if r.kind == "generation")
    short = PublishedRow.model_validate({**row.model_dump(), "scenario": {**row.scenario, "steps": 1}})
    with pytest.raises(ScenarioError, match="scenario.steps.*at least 2"):
        short.check_phases()


def test_a_trend_row_is_compared_as_a_ratio_and_its_absolute_step_is_not_counted() -> None:
    result = run_suite(select_rows(["openrlhf-verl-7b-8k"]))
    (ratio,) = result.ratios
    assert ratio.published == pytest.approx(232.4 / 17.3)
    assert all(not c.counted for c in result.checks if c.figure == "step_s")


def test_weight_sync_rows_go_through_the_sync_model() -> None:
    row = next(r for r in ROWS if r.kind == "weight_sync")
    from rlsim.simulator.costs import Costs

    assert simulate_row(row) == {"sync_s": Costs(resolve(_scenario(row))).sync_s}


def test_validate_published_runs_every_row_and_writes_valid_json(tmp_path) -> None:
    out = tmp_path / "published.json"
    res = runner.invoke(app, ["validate", "--published", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "Fidelity targets" in res.output and "Published runs" in res.output
    doc = json.loads(out.read_text())
    assert {c["row"] for c in doc["checks"]} == {r.id for r in ROWS if r.published}
    assert {s["row"] for s in doc["speedups"]} == {r.id for r in ROWS if r.pair_with}
    assert all(math.isfinite(c["predicted"]) and c["predicted"] > 0 for c in doc["checks"] if c["figure"] != "wait_s")
    names = [t["name"] for t in doc["targets"]]
    assert any("median |step-time error|" in n for n in names) and any("sign" in n for n in names)


def test_validate_published_only_and_list() -> None:
    res = runner.invoke(app, ["validate", "--published", "--list"])
    assert res.exit_code == 0 and "nemo-rl-llama70b-8n" in res.output
    line = one_line_error(["validate", "--published", "--only", "no-such-row"])
    assert "--only" in line and "no-such-row" in line


def test_the_70b_rows_generation_waits_for_one_response_at_the_length_limit() -> None:
    """NeMo RL's synchronous vLLM batch ends with its longest response: one at 3,800 tokens costs
    at least 3,800 batch-1 iterations of a TP4 engine, and that tail is most of the phase."""
    from rlsim.simulator.costs import Costs

    row = next(r for r in ROWS if r.id == "nemo-rl-llama70b-8n")
    costs = Costs(resolve(_scenario(row)))
    tail_s = costs.iteration(1).span_s(150, 3800)  # one sequence alone from its prompt to the limit
    gen = simulate_row(row)["gen_s"]
    assert tail_s < gen < tail_s + 30.0
    bulk_only = PublishedRow.model_validate(
        {
            **row.model_dump(),
            "scenario": {
                **row.scenario,
                "workload": {
                    **row.scenario["workload"],
                    "response_tokens": {**row.scenario["workload"]["response_tokens"], "clip_fraction": 0.0},
                },
            },
        }
    )
    assert simulate_row(bulk_only)["gen_s"] < tail_s  # without a response at the limit the tail is shorter


def test_a_speedup_read_off_two_step_times_compares_the_steps(monkeypatch) -> None:
    # verl's Megatron pair samples 16 per prompt colocated and 12 one-step-off: the published
    # 699 s / 566 s is a ratio of steps, so the prediction is too (each row has its own batch).
    rows = select_rows(["verl-osp-megatron-async"])
    fake = {
        "verl-osp-megatron-sync": {"step_s": 800.0, "samples_per_step": 8192, "response_tokens_per_step": 8e6},
        "verl-osp-megatron-async": {"step_s": 500.0, "samples_per_step": 6144, "response_tokens_per_step": 6e6},
    }
    monkeypatch.setattr(
        "rlsim.validation.published_run.simulate_row",
        lambda row: {**{k: 1.0 for k in row.published}, **fake[row.id]},
    )
    (speedup,) = run_suite(rows).speedups
    assert speedup.predicted == pytest.approx(800.0 / 500.0)  # not per sample (1.2x)
    assert speedup.published == pytest.approx(699.0 / 566.0)


def test_held_out_rows_are_reported_apart_from_the_targets(monkeypatch) -> None:
    """A held-out row's errors make the second set of figures and none of the first."""
    dev = next(r for r in ROWS if r.id == "verl-osp-fsdp2-sync")
    held = dev.model_copy(update={"id": "held-copy", "held_out": True})
    steps = {"verl-osp-fsdp2-sync": 749.0 * 1.10, "held-copy": 749.0 * 0.50}  # +10% and -50%
    monkeypatch.setattr(
        "rlsim.validation.published_run.simulate_row",
        lambda row: {**{k: 1.0 for k in row.published}, "step_s": steps[row.id]},
    )
    result = run_suite([dev, held])
    dev_median, held_median = (
        next(t for t in ts if "median |step" in t.name) for ts in (result.targets, result.held_out_targets)
    )
    assert dev_median.value == pytest.approx(0.10) and dev_median.met
    assert held_median.value == pytest.approx(0.50) and not held_median.met
    assert json.loads(json.dumps(result.to_json()))["held_out_targets"][0]["value"] == pytest.approx(0.50)


def test_the_rows_encoded_after_the_terms_are_held_out() -> None:
    held = {r.id for r in ROWS if r.held_out}
    assert {"verl-fa-sync-32", "verl-fa-async-16-16", "sily-qwen3-8b-h100-c64", "nemo-rl-v04-llama8b-sync"} <= held
    assert not held & {"verl-osp-fsdp2-sync", "nemo-rl-llama70b-8n", "vllm060-llama8b-h100"}


def test_nemo_rl_timers_split_the_colocated_switch_between_refit_and_generation() -> None:
    """verl's gen holds both switch directions and the sync; NeMo RL's refit the sync and the
    engines' wake, its generation the engines' sleep: each one direction (half the switch)."""
    from rlsim.scenario import Mode
    from rlsim.validation.phases import PhaseTimes
    from rlsim.validation.published_run import predicted_phases

    per_step = {"training/idle-waiting-for-data": 50.0, "training/sync": 3.0, "training/switch": 4.0}
    pt = PhaseTimes(steps=2, window_s=200.0, per_step_s=per_step, idle_fraction={})
    verl = predicted_phases(pt, Mode.colocated, 0.0)
    nemo = predicted_phases(pt, Mode.colocated, 0.0, "nemo_rl")
    assert (verl["gen_s"], verl["refit_s"]) == (57.0, 7.0)
    assert (nemo["gen_s"], nemo["refit_s"]) == (52.0, 5.0)
    assert nemo["gen_s"] + nemo["refit_s"] == verl["gen_s"]  # the same seconds, attributed as each library times them
    assert nemo["step_s"] == verl["step_s"] == 100.0
    # the NeMo RL rows say whose timers they are
    assert {r.timers for r in published_rows() if r.id.startswith("nemo-rl-")} == {"nemo_rl"}
