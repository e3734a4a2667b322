"""`rlsim validate`: the trainer -> scenario mapping, phase times, comparison math, the command.

The pure parts run on synthetic inputs. The command runs end to end in `--quick` mode on the CLI
profile of tests/test_calibrate_cli.py (one quick calibration per session) with generous limits:
CI's two shared cores make the measured side noisy, so the issue's strict targets are reported by
the command (docs/validation.md), not asserted here. Exit codes are asserted with zero limits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_calibrate_cli import cli_profile  # noqa: F401  (the shared session fixture)
from typer.testing import CliRunner

from rlsim.calibration import load_profile
from rlsim.cli import app
from rlsim.runs import run_mode
from rlsim.scenario import Mode, Padding, scenario_from_dict
from rlsim.simulator.states import IDLE_DATA, IDLE_WEIGHTS
from rlsim.validation import compare
from rlsim.validation.mapping import RunFiles, scenario_for_run
from rlsim.validation.phases import PhaseTimes, Span, Timeline, phase_times, simulated_timeline

runner = CliRunner()
FILES = RunFiles("m.json", "lengths.txt", "/abs/profile.json")
TRAINER = {  # the GRPOConfig fields the mapping reads
    "steps": 10, "prompts_per_step": 4, "group_size": 8, "max_new_tokens": 8, "n_digits": 1,
    "minibatches": 2, "kl_coef": 0.0, "recompute_logprobs": True, "seed": 3,
}  # fmt: skip


def _doc(mode: str, **config) -> dict:
    """A synthetic trainer document: two steps, longest responses 3 and 5 tokens."""
    samples = [
        {"prompt_tokens": 4, "response_tokens": n, "step": step, "dropped": False}
        for step, lengths in ((0, [2, 3]), (1, [5, 1]))
        for n in lengths
    ]
    samples.append({"prompt_tokens": 4, "response_tokens": 8, "step": None, "dropped": True})
    extra = {"threads": 1} if mode == "sync" else {"queue_depth": 2, "max_lag": 1, "sync_every": 1}
    return {"mode": mode, "config": TRAINER | extra | config, "samples": samples,
            "summary": {"timing/score_mean_s": 0.064, "timing/host_mean_s": 0.002}}  # fmt: skip


# ---- the scenario builder ---------------------------------------------------------------------------


def test_sync_run_maps_to_a_free_colocated_scenario() -> None:
    data = scenario_for_run(_doc("sync"), FILES)
    sc = scenario_from_dict(data)  # valid as written
    assert sc.pipeline.mode is Mode.colocated and sc.cluster.gpu == "cpu" and sc.cluster.total_gpus == 1
    col = sc.pipeline.colocation
    assert (col.offload_optimizer, col.offload_engine_weights, col.reallocate_s) == (False, False, 0.0)
    assert sc.model.config_json == "m.json" and sc.profile == "/abs/profile.json"
    alg = sc.algorithm
    assert (alg.prompts_per_step, alg.group_size, alg.minibatches) == (4, 8, 2)
    assert alg.recompute_old_logprobs and not alg.reference_model and sc.steps == 10 and sc.seed == 3
    wl = sc.workload
    assert wl.prompt_tokens.value == 4 and wl.response_tokens.kind == "file"
    assert wl.response_tokens.path == "lengths.txt" and wl.response_tokens.max == 8
    assert wl.reward.seconds_per_sample == pytest.approx(0.064 / 32) and wl.reward.workers == 1
    inf, tr = sc.pipeline.inference, sc.pipeline.training
    assert inf.max_batch == 32 and not inf.keep_groups_together  # one prefill of every prompt
    # a minibatch of 16 rows is one forward, each row padded to the step's longest sample
    assert tr.micro_batch_tokens == 16 * (4 + 8) and not tr.activation_recompute
    assert tr.padding is Padding.batch_longest and tr.step_overhead_s == 0.002  # the trainer's host work


def test_async_run_maps_to_an_async_scenario() -> None:
    data = scenario_for_run(_doc("async", kl_coef=0.1, recompute_logprobs=False), FILES)
    sc = scenario_from_dict(data)
    pipe = sc.pipeline
    assert pipe.mode is Mode.async_ and sc.pool_gpus == (1, 1) and sc.cluster.total_gpus == 2
    assert pipe.depth == 2 and pipe.staleness.policy.value == "reject" and pipe.staleness.max_lag == 1
    assert pipe.interrupt.value == "blocking" and pipe.transport.value == "cuda_ipc"
    assert pipe.weight_sync.every_steps == 1
    assert sc.algorithm.reference_model and not sc.algorithm.recompute_old_logprobs
    assert sc.steps == 10 + 2  # the generator keeps its queue full to the end: simulate past it


def test_the_policy_config_gives_the_exact_parameter_count(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rlsim.placement import resolve_llm
    from rlsim.trainer.model import GPTConfig, n_params, to_hf_config
    from rlsim.validation.mapping import write_inputs

    config = GPTConfig(n_layer=3, n_head=4, n_embd=32, vocab_size=13, block_size=16)
    profile = tmp_path / "given.json"
    profile.write_text("{}")
    doc = _doc("sync") | {"model": to_hf_config(config)}
    files = write_inputs(tmp_path / "in", doc, profile)
    sc = scenario_from_dict(scenario_for_run(doc, files), base_dir=str(tmp_path / "in"))
    llm = resolve_llm(sc)
    assert llm.total_params == llm.active_params == n_params(config)
    assert llm.key == "rlsim-tiny-gpt" and llm.intermediate_size == 128
    assert (tmp_path / "in" / files.lengths).read_text().split() == ["2", "3", "5", "1", "8"]
    assert Path(files.profile).is_absolute() and Path(files.profile).read_text() == "{}"


# ---- phase times ------------------------------------------------------------------------------------


def test_phase_times_over_the_steady_window() -> None:
    spans = (
        Span("inference", "prefill", 0.0, 1.0),  # before the window: ignored
        Span("inference", "prefill", 2.0, 3.0),
        Span("inference", "decode", 3.0, 5.0),
        Span("inference", IDLE_WEIGHTS, 5.0, 10.0),
        Span("training", IDLE_DATA, 2.0, 6.0),  # 5 -> 6: the verifier, in no inference state
        Span("training", "train", 6.0, 9.0),
        Span("training", "optimizer", 9.0, 11.0),  # clipped at the window's end, 10
    )
    pt = phase_times(Timeline(spans, (2.0, 6.0, 10.0, 14.0), {"inference": 1, "training": 1}), steps=3)
    assert pt.steps == 2 and pt.window_s == 8.0 and pt.step_s == 4.0
    assert pt.phase_s("generation") == pytest.approx(1.5) and pt.phase_s("prefill") == 0.5
    assert pt.phase_s("training") == pytest.approx(2.0) and pt.phase_s("optimizer") == 0.5
    assert pt.phase_s("sync (training)") == 0.0
    assert pt.idle_fraction == {"inference": pytest.approx(5 / 8), "training": pytest.approx(4 / 8)}


def test_phase_times_average_over_the_actors_of_a_pool() -> None:
    spans = (Span("inference", "decode", 0.0, 2.0), Span("inference", "decode", 0.0, 1.0))
    pt = phase_times(Timeline(spans, (0.0, 2.0), {"inference": 2, "training": 1}))
    assert pt.phase_s("decode") == 1.5 and pt.idle_fraction["inference"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="at least 2"):
        phase_times(Timeline(spans, (2.0,), {"inference": 1}))


def test_phase_times_cover_every_pool_of_the_timeline() -> None:
    # a reward pool beside the two: its own per-step scoring and idle share
    spans = (
        Span("inference", "decode", 0.0, 4.0),
        Span("training", "train", 1.0, 3.0),
        Span("reward", "score", 2.0, 3.0),
        Span("reward", "score", 2.0, 4.0),
    )
    pt = phase_times(Timeline(spans, (0.0, 2.0, 4.0), {"inference": 1, "training": 1, "reward": 2}))
    assert pt.phase_s("scoring (reward GPUs)") == pytest.approx(1.5 / 2)
    assert pt.idle_fraction["reward"] == pytest.approx(1 - 3 / 8)
    assert set(pt.idle_fraction) == {"inference", "training", "reward"}


def test_a_simulated_reward_pool_shows_in_the_phases() -> None:
    from rlsim.scenario import load_scenario

    sc = load_scenario("reward-model", ["steps=3"])
    timeline = simulated_timeline(run_mode(sc).result.recorder)
    assert timeline.actors.get("reward", 0) >= 1
    pt = phase_times(timeline)
    assert pt.phase_s("scoring (reward GPUs)") > 0 and 0 <= pt.idle_fraction["reward"] < 1


def test_a_simulated_colocated_run_is_read_per_actor(small) -> None:
    # One engine and the trainer take turns on one GPU with nothing between them (no verifier):
    # per pool, each is idle exactly while the other works.
    sc = small.with_mode("colocated")
    pipe = sc.pipeline.model_copy(update={"colocation": sc.pipeline.colocation.model_copy(
        update={"offload_optimizer": False, "reallocate_s": 0.0})})  # fmt: skip
    cluster = sc.cluster.model_copy(update={"gpus_per_node": 1})
    run = run_mode(sc.model_copy(update={"pipeline": pipe, "cluster": cluster, "steps": 4}))
    pt = phase_times(simulated_timeline(run.result.recorder))
    assert pt.steps == 3 and pt.step_s == pytest.approx(run.metrics.steady_step_time_s, rel=0.3)
    assert pt.idle_fraction["inference"] + pt.idle_fraction["training"] == pytest.approx(1.0)
    assert pt.phase_s("generation") == pytest.approx(pt.idle_fraction["training"] * pt.step_s)


# ---- the comparison -----------------------------------------------------------------------------


def _pt(step_s: float, idle: tuple[float, float], **per_step: float) -> PhaseTimes:
    keys = {"prefill": "inference/prefill", "decode": "inference/decode", "train": "training/train",
            "optimizer": "training/optimizer", "sync": "training/sync"}  # fmt: skip
    return PhaseTimes(2, 2 * step_s, {keys[k]: v for k, v in per_step.items()},
                      {"inference": idle[0], "training": idle[1]})  # fmt: skip


def test_rows_errors_and_verdicts() -> None:
    predicted = _pt(1.1, (0.30, 0.42), prefill=0.1, decode=0.3, train=0.5, optimizer=0.1, sync=0.02)
    measured = _pt(1.0, (0.33, 0.40), prefill=0.2, decode=0.3, train=0.4, optimizer=0.1)
    rows = {r.quantity: r for r in compare.compare_mode("sync", predicted, measured, 0.2, 0.05)}
    assert list(rows) == ["step", "generation", "prefill", "decode", "training", "train", "optimizer",
                          "sync (training)", "idle inference", "idle training"]  # fmt: skip
    assert rows["step"].error == pytest.approx(0.1) and rows["step"].ok
    assert rows["generation"].error == pytest.approx(-0.2) and rows["generation"].ok  # on the limit
    assert rows["prefill"].error == pytest.approx(-0.5) and rows["prefill"].ok is None  # detail
    assert rows["prefill"].detail and not rows["training"].detail
    assert rows["training"].error == pytest.approx(0.6 / 0.5 - 1) and rows["training"].ok
    sync = rows["sync (training)"]  # measured 0: judged as a share of the measured step
    assert sync.error_kind == "of step" and sync.error == pytest.approx(0.02) and sync.ok
    idle = rows["idle inference"]
    assert idle.error_kind == "points" and idle.error == pytest.approx(-0.03) and idle.ok
    assert compare.failures(list(rows.values())) == []
    strict = compare.compare_mode("sync", predicted, measured, 0.05, 0.01)
    assert {r.quantity for r in compare.failures(strict)} == {"step", "generation", "training",
                                                              "idle inference", "idle training"}  # fmt: skip


def test_speedup_and_targets() -> None:
    sync_p, async_p = _pt(2.0, (0.5, 0.5), decode=1.0), _pt(1.0, (0.0, 0.0), decode=1.0)
    sync_m, async_m = _pt(2.0, (0.5, 0.6), decode=1.0), _pt(1.25, (0.1, 0.0), decode=1.0)
    speedup = compare.speedup_row(sync_p, async_p, sync_m, async_m, 0.2)
    assert (speedup.predicted, speedup.measured) == (2.0, 1.6) and speedup.error == pytest.approx(0.25)
    assert speedup.ok is False
    rows = compare.compare_mode("sync", sync_p, sync_m, 0.2, 0.05) + compare.compare_mode(
        "async", async_p, async_m, 0.2, 0.05
    )
    step, phase, idle = compare.targets(rows)
    assert step.value == pytest.approx(0.2 / 2) and step.met  # the median of 0 and 0.2, on the target
    assert phase.value == pytest.approx(0.0) and phase.met
    assert idle.value == pytest.approx(0.1) and idle.met is False
    assert compare.row_dict(speedup)["ok"] is False and compare.target_dict(idle)["met"] is False


def test_median_rows_over_repeated_runs() -> None:
    def row(mode, quantity, p, m, e, kind="relative"):
        return compare.Row(mode, quantity, "s", p, m, e, kind, 0.2)

    runs = [
        [row("sync", "step", 1.0, 2.0, -0.5), row("sync", "idle training", 0.3, 0.2, 0.1, "points")],
        [row("sync", "step", 3.0, 2.0, 0.5), row("sync", "idle training", 0.3, 0.4, -0.1, "points")],
        [row("sync", "step", 2.0, 2.0, 0.05), row("sync", "idle training", 0.3, 0.3, None, "points")],
    ]
    step, idle = compare.median_rows(runs)  # the first run's order
    assert (step.quantity, step.predicted, step.measured, step.error) == ("step", 2.0, 2.0, 0.05)
    assert step.ok and step.limit == 0.2 and step.error_kind == "relative"
    assert idle.error == pytest.approx(0.0) and idle.measured == 0.3  # the None error is left out
    assert compare.targets([step, idle])[0].value == pytest.approx(0.05)


def test_repeats_judge_the_median_run(monkeypatch, tmp_path: Path) -> None:
    from rlsim.validation import run as vrun

    errors = iter([0.5, -0.02, 0.1])  # one bad run of three: the median passes

    def one_run(**kwargs):
        e = next(errors)
        rows = [compare.Row("sync", "step", "s", 1.0 + e, 1.0, e, "relative", 0.2)]
        return vrun.ValidationResult([], rows, compare.targets(rows), {"iteration_overhead_s": 1e-3,
                                     "matmul_tflops": 0.1, "train_mfu": 0.5}, "given", 0.2, 0.05,
                                     {"load_average_1_5_15": [1.0, 1.0, 1.0], "cpu_count": 2})  # fmt: skip

    monkeypatch.setattr(vrun, "validate", one_run)
    out = tmp_path / "v.json"
    res = runner.invoke(app, ["validate", "--mode", "sync", "--repeats", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "Medians over 3 runs" in res.output
    data = json.loads(out.read_text())
    assert [r[0]["error"] for r in data["repeats"]] == [0.5, -0.02, 0.1]
    assert data["rows"][0]["error"] == 0.1 and data["failures"] == 0  # run 1 alone would have failed
    res = runner.invoke(app, ["validate", "--repeats", "0"])
    assert res.exit_code == 2


# ---- the command -------------------------------------------------------------------------------------


def test_validate_quick_end_to_end(cli_profile: Path, tmp_path: Path) -> None:  # noqa: F811
    out, keep = tmp_path / "v.json", tmp_path / "inputs"
    args = ["validate", "--quick", "--profile", str(cli_profile), "--json", str(out), "--keep", str(keep),
            "--tolerance", "1000", "--idle-tolerance", "1"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Targets" in res.output and "load average" in res.output
    data = json.loads(out.read_text())
    rows = {(r["mode"], r["quantity"]): r for r in data["rows"]}
    for mode in ("sync", "async"):
        for quantity in ("step", "generation", "prefill", "decode", "training", "train", "optimizer"):
            row = rows[(mode, quantity)]
            assert row["predicted"] > 0 and row["measured"] > 0 and row["error"] is not None, row
        for pool in ("inference", "training"):
            row = rows[(mode, f"idle {pool}")]
            assert 0 <= row["predicted"] <= 1 and 0 <= row["measured"] <= 1 and row["error_kind"] == "points"
    assert rows[("sync", "sync (training)")]["error_kind"] == "of step"  # the sync loop never syncs
    assert rows[("async", "sync (training)")]["measured"] > 0 and rows[("async", "sync (inference)")]
    assert rows[("both", "speedup async/sync")]["measured"] > 0
    assert [t["name"] for t in data["targets"]][0].startswith("median |step-time error|")
    assert data["failures"] == 0 and data["machine"]["cpu_count"] >= 1
    assert {m["mode"] for m in data["modes"]} == {"sync", "async"}
    # the session profile has no model ops: the policy's were timed now and used, the file left alone
    assert list(data["profile"]["model_ops"]) == ["L2-H64-I256-A2-KV2-D32-V13-T12-P100224"]
    assert "operators timed now" in data["profile_origin"] and "Model ops of" in res.output
    assert not load_profile(cli_profile).model_ops
    # the kept scenario reproduces the prediction with `rlsim simulate`
    res = runner.invoke(app, ["simulate", str(keep / "async-scenario.yaml"), "--json", "-"])
    assert res.exit_code == 0, res.output


def test_validate_exits_1_when_a_limit_is_exceeded(cli_profile: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    # no --profile: validate calibrates first (patched here to return the session's profile)
    monkeypatch.setattr("rlsim.calibration.run.calibrate", lambda *a, **kw: load_profile(cli_profile))
    res = runner.invoke(app, ["validate", "--mode", "sync", "--quick", "--steps", "3", "--tolerance", "0",
                              "--idle-tolerance", "0"])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "exceed their limits" in res.stderr and "MISS" in res.stdout


def test_validate_bad_input_is_one_line(tmp_path: Path) -> None:
    from rlsim.calibration import save_profile
    from rlsim.calibration.profile import datasheet_profile

    gpu = tmp_path / "h100.json"
    save_profile(datasheet_profile("h100-sxm"), gpu)
    for args, text in (
        (["--profile", str(gpu)], "error: --profile: the trainer runs on the CPU"),
        (["--profile", str(tmp_path / "none.json")], "error: --profile: profile file"),
    ):
        res = runner.invoke(app, ["validate", "--quick", *args])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith(text), res.output
    json_out = tmp_path / "taken.json"
    json_out.write_text("mine")
    res = runner.invoke(app, ["validate", "--json", str(json_out)])
    assert res.exit_code == 2 and "--force" in res.output and json_out.read_text() == "mine"


def test_validation_modules_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import rlsim.cli, rlsim.commands.validation, rlsim.validation.run, rlsim.validation.compare\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
