"""`rlsim calibrate` and `rlsim validate`: measure a device; check the simulator against the trainer.

`calibrate` runs `rlsim.calibration.calibrate` behind a progress bar, writes the profile JSON and
prints what it measured (peaks, efficiencies at decode-like and train-like sizes, fit quality).
`validate` runs `rlsim.validation.run.validate` (quick CPU calibration unless --profile, the real
GRPO trainer, the simulator on the scenario that describes it) and prints predicted against
measured per phase; it exits 1 when a checked error exceeds its limit (2 on bad input, as every
command). Thin: parse, call one library function, render. torch loads only inside the calls.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from rlsim.commands.common import check_output, console, err_console, stop_on_signals, user_errors
from rlsim.commands.options import ForceOpt, JsonOpt, check_number

PANEL = "Calibration and validation"
DECODE_TOKENS = 16  # GEMM rows of a decode-like iteration (a small batch)
TRAIN_TOKENS = 4096  # GEMM rows / micro-batch tokens of a train-like pass


class ValidateMode(str, Enum):
    """Which trainer loop(s) `validate` runs."""

    sync = "sync"
    async_ = "async"
    both = "both"


def register(app: typer.Typer) -> None:
    app.command("calibrate", rich_help_panel=PANEL)(calibrate_cmd)
    app.command("validate", rich_help_panel=PANEL)(validate_cmd)


@contextmanager
def progress_bar(auto_refresh: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar on stderr; yields `update(label, done, total)` (total 0: unknown).

    `auto_refresh=False` draws only on updates: no timer thread redrawing the elapsed time while
    something is being timed (`rlsim validate` times a trainer on the same cores).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    quiet = not err_console.is_terminal  # a pipe or file gets no bar (and no stray blank line)
    with Progress(*columns, console=err_console, transient=True, auto_refresh=auto_refresh, disable=quiet) as bar:
        task = bar.add_task("starting", total=None)

        def update(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total or None, refresh=not auto_refresh)

        yield update


OutOpt = Annotated[str, typer.Option("--out", "-o", help="Where to write the profile JSON ('-' for stdout).")]
DeviceOpt = Annotated[str, typer.Option(help="auto (a CUDA GPU if torch sees one, else the CPU), cpu, cuda or cuda:N.")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Catalog LLM or config.json whose layer shapes the kernels use (default: a small shape on the CPU, "
        "Qwen2.5-7B on a GPU); a config.json of model_type rlsim-tiny-gpt also gets its own operators timed."
    ),
]
QuickCalOpt = Annotated[
    bool, typer.Option("--quick", help="A smaller sweep: about a minute on 2 CPU cores, minutes on a GPU.")
]
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        min=1, help="CPU: torch intra-op threads to measure with (default: torch's); use the workload's count."
    ),
]


def calibrate_cmd(
    out: OutOpt,
    device: DeviceOpt = "auto",
    model: ModelOpt = None,
    quick: QuickCalOpt = False,
    threads: ThreadsOpt = None,
    force: ForceOpt = False,
) -> None:
    """Measure this machine's kernels and write a calibration profile (see docs/calibration.md)."""

    with user_errors():
        check_output(out, force, "--out", creates_folder=True)
        from rlsim.calibration import calibrate, save_profile
        from rlsim.outputs import json_text

        with progress_bar() as update, _torch_threads(threads):
            profile = calibrate(
                device=device, model=model, quick=quick, progress=lambda d, t, label: update(label, d, t)
            )
        if out == "-":
            sys.stdout.write(json_text(profile.model_dump(mode="json"), indent=2) + "\n")
            return
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        save_profile(profile, out)
    for table in profile_tables(profile):
        console.print(table)
    console.print(f"Wrote {out}. Notes: {profile.notes}", markup=False, highlight=False)


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with `threads` torch intra-op threads (None: leave torch's), then restore."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _eff(profile: Any, quantity: str, tokens: int, fraction: float) -> str:
    flag = " (extrapolated)" if profile.outside_range(quantity, tokens) else ""
    return f"{fraction:.0%}{flag}"


def _half_line(profile: Any) -> str:
    """The GEMM half-saturation rows and, where the profile has one, its layer-size law."""
    rows = f"{profile.matmul_tokens_half:,.1f} rows"
    ref = profile.matmul_tokens_half_params
    return f"{rows}, any layer size" if ref is None else f"{rows} x sqrt({ref:.3g} / P)"


def profile_tables(profile: Any) -> list[Any]:
    """The profile's headline figures, and the quality of every fit it holds."""
    from rich.table import Table

    from rlsim.models.decode import gemm_rate_flops
    from rlsim.models.train_step import mfu_at_tokens

    t = Table(
        title=f"Profile: {profile.device_name} ({profile.device}, {profile.source}, {profile.date})",
        title_justify="left",
    )
    t.add_column("figure")
    t.add_column("value", justify="right")
    small = gemm_rate_flops(profile, DECODE_TOKENS) / (profile.peak_tflops * 1e12)
    large = gemm_rate_flops(profile, TRAIN_TOKENS) / (profile.peak_tflops * 1e12)
    mfu = mfu_at_tokens(profile, TRAIN_TOKENS)
    share = profile.memory_gbps / profile.peak_memory_gbps
    link = profile.intra_node
    rows = [
        ("peak FLOP/s (achieved best / datasheet)", f"{profile.peak_tflops:,.3f} TFLOP/s"),
        ("GEMM rate, saturated", f"{profile.matmul_tflops:,.3f} TFLOP/s"),
        ("GEMM half-saturation (P: layer params/GPU)", _half_line(profile)),
        (
            f"GEMM efficiency at {DECODE_TOKENS} tokens (decode-like)",
            _eff(profile, "gemm_tokens", DECODE_TOKENS, small),
        ),
        (f"GEMM efficiency at {TRAIN_TOKENS} tokens (train-like)", _eff(profile, "gemm_tokens", TRAIN_TOKENS, large)),
        (f"training MFU at {TRAIN_TOKENS} tokens per micro-batch", _eff(profile, "train_tokens", TRAIN_TOKENS, mfu)),
        ("peak memory bandwidth", f"{profile.peak_memory_gbps:,.1f} GB/s"),
        ("weight reads in decode", f"{profile.memory_gbps:,.1f} GB/s ({share:.0%} of peak)"),
        ("KV-cache reads in decode", f"{profile.attention_gbps:,.1f} GB/s"),
        ("decode iteration overhead", f"{profile.iteration_overhead_s * 1e3:.3f} ms"),
        ("host link", f"{profile.host_link_gbps:,.1f} GB/s"),
        ("intra-node link", f"{link.busbw_gbps:,.1f} GB/s + {link.latency_s * 1e6:,.0f} us per call"),
    ]
    for name, value in rows:
        t.add_row(name, value)
    for key, ops in profile.model_ops.items():  # a model's own operators, when timed
        t.add_row(f"model ops {ops.model} ({key})", ops_line(key, ops.model_dump()).split(": ", 1)[1])
    fits = [r for r in profile.measurements if r.get("kernel") == "fit"]
    if not fits:
        return [t]
    q = Table(title="Fit quality (R² on the original scale; largest |relative residual|)", title_justify="left")
    for col in ("fit", "R²", "max residual", "points"):
        q.add_column(col, justify="left" if col == "fit" else "right")
    for r in fits:
        q.add_row(r["quantity"], f"{r['r2']:.3f}", f"{r['max_rel_residual']:.1%}", str(r["n"]))
    return [t, q]


ModeOpt = Annotated[ValidateMode, typer.Option(help="Trainer loop(s) to run; both also gives the async speedup.")]
StepsOpt = Annotated[int | None, typer.Option(min=2, help="RL steps per trainer run (default 30; 6 with --quick).")]
QuickOpt = Annotated[
    bool, typer.Option("--quick", help="Short runs (6 steps, a 20-step warm start): a smoke test, not a measurement.")
]
ToleranceOpt = Annotated[
    float, typer.Option(min=0, help="Largest |relative error| allowed for step time, each phase and the speedup.")
]
IdleToleranceOpt = Annotated[
    float, typer.Option(min=0, help="Largest idle-fraction difference allowed per pool (0.05 = 5 points).")
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(help="Measured CPU profile JSON (rlsim calibrate --device cpu) instead of calibrating now."),
]
RepeatsOpt = Annotated[
    int,
    typer.Option(
        min=1,
        help="Run the whole validation N times (calibration included) and judge the median of each error: "
        "one run samples one moment of a shared host.",
    ),
]
FromLogOpt = Annotated[
    bool,
    typer.Option(
        "--from-log",
        help="Fit the sync trainer's verl-style log (rlsim fit), predict the async trainer, then measure it.",
    ),
]
KeepOpt = Annotated[
    str | None,
    typer.Option(help="Keep the trainer timelines, scenarios, config.json and profile in this folder."),
]


PublishedOpt = Annotated[
    bool,
    typer.Option(
        "--published", help="Check the simulator against published RL runs (rlsim/validation/published/) instead."
    ),
]
OnlyOpt = Annotated[
    str | None, typer.Option("--only", help="With --published: comma-separated row ids (and the rows they pair with).")
]
ListOpt = Annotated[bool, typer.Option("--list", help="With --published: list the rows and what each compares.")]


def validate_cmd(
    mode: ModeOpt = ValidateMode.both,
    steps: StepsOpt = None,
    quick: QuickOpt = False,
    json_out: JsonOpt = None,
    tolerance: ToleranceOpt = 0.2,
    idle_tolerance: IdleToleranceOpt = 0.05,
    profile: ProfileOpt = None,
    keep: KeepOpt = None,
    repeats: RepeatsOpt = 1,
    from_log: FromLogOpt = False,
    force: ForceOpt = False,
    published: PublishedOpt = False,
    only: OnlyOpt = None,
    list_rows: ListOpt = False,
) -> None:
    """Run the real GRPO trainer and the simulator on the same configuration; compare per phase.

    With --published: simulate the published RL runs shipped with rlsim instead (no trainer, no torch).
    """
    from rlsim.tables import write_json

    if from_log:
        return _validate_from_log(steps, quick, profile, keep, tolerance, json_out, force)
    with user_errors(), stop_on_signals(lambda: _stopped(keep)):
        check_output(json_out, force, "--json")
        check_number(tolerance, "--tolerance")
        check_number(idle_tolerance, "--idle-tolerance")
        if published or only or list_rows:
            from rlsim.commands.published import run_published

            run_published(only, json_out, list_rows)
            return
        from rlsim.trainer.async_loop import TrainerProcessError
        from rlsim.validation.run import MODES, validate_repeated

        modes = MODES if mode is ValidateMode.both else (mode.value,)
        try:
            with progress_bar(auto_refresh=False) as update:
                result = validate_repeated(
                    repeats,
                    update,
                    modes=modes,
                    steps=steps,
                    quick=quick,
                    profile=profile,
                    tolerance=tolerance,
                    idle_tolerance=idle_tolerance,
                    keep=keep,
                )
        except TrainerProcessError as exc:
            err_console.print(f"error: trainer: {exc}", markup=False)
            raise typer.Exit(1) from None
        if json_out:
            write_json(result.to_json(), json_out)
    if json_out != "-":
        for table in validation_tables(result):
            console.print(table)
        for line in caption(result):
            console.print(line, markup=False, highlight=False)
    if result.failures:
        n, m = len(result.failures), sum(r.ok is not None for r in result.rows)
        err_console.print(
            f"{n} of {m} checked figures exceed their limits (--tolerance {tolerance:g}, "
            f"--idle-tolerance {idle_tolerance:g}): " + ", ".join(f"{r.mode} {r.quantity}" for r in result.failures),
            markup=False,
        )
        raise typer.Exit(1)


def _stopped(keep: str | None) -> str:
    """What an interrupted validate leaves: its processes stop, what it wrote so far stays."""
    stopped = "validate stopped its calibration and trainer processes"
    if keep:
        return f"{stopped}; the inputs and timelines written so far are in {keep}"
    return f"{stopped}; nothing was kept (--keep DIR keeps them)"


def _value(unit: str, x: float) -> str:
    return {"s": f"{x * 1e3:,.2f} ms", "fraction": f"{x:.1%}", "ratio": f"{x:.2f}x"}[unit]


def _error(kind: str, e: float | None) -> str:
    if e is None:
        return "-"
    return {"relative": f"{e:+.0%}", "of step": f"{e:+.1%} of step", "points": f"{100 * e:+.1f} pts"}[kind]


def _limit(kind: str, limit: float | None) -> str:
    if limit is None:
        return ""
    return f"±{100 * limit:.1f} pts" if kind == "points" else f"±{limit:.0%}"


def validation_tables(result: Any) -> list[Any]:
    """Predicted against measured per mode and phase; then the issue's targets."""
    from rich.table import Table

    t = Table(title="Simulator (predicted) against the trainer (measured), per RL step", title_justify="left")
    for col in ("mode", "quantity", "predicted", "measured", "error", "limit", ""):
        t.add_column(col, justify="left" if col in ("mode", "quantity", "") else "right")
    verdict = {True: "[green]ok[/]", False: "[red]MISS[/]", None: ""}
    for r in result.rows:
        name = f"  {r.quantity}" if r.detail else r.quantity
        t.add_row(
            r.mode,
            name,
            _value(r.unit, r.predicted),
            _value(r.unit, r.measured),
            _error(r.error_kind, r.error),
            _limit(r.error_kind, r.limit),
            verdict[r.ok],
            style="dim" if r.detail else None,
        )
    g = Table(title="Targets", title_justify="left")
    for col in ("figure", "value", "target", ""):
        g.add_column(col, justify="left" if col in ("figure", "") else "right")
    for target in result.targets:
        value = "-" if target.value is None else _error(target.unit, target.value).lstrip("+")
        g.add_row(target.name, value, f"≤ {_limit(target.unit, target.limit).lstrip('±')}", verdict[target.met])
    return [t, g]


def ops_line(name: str, ops: dict[str, Any]) -> str:
    """A model's timed operators in one line (ms and µs)."""
    return (
        f"Model ops of {name} ({ops['model']}): decode iteration {ops['decode_fixed_s'] * 1e3:.3f} ms "
        f"+ {ops['decode_per_sequence_s'] * 1e6:.2f} µs/sequence "
        f"+ {ops['decode_per_kv_token_s'] * 1e6:.2f} µs/KV token; "
        f"prefill {ops['prefill_fixed_s'] * 1e3:.3f} ms + {ops['prefill_per_sequence_s'] * 1e6:.2f} µs/prompt "
        f"+ {ops['prefill_per_token_s'] * 1e6:.2f} µs/token; train pass {ops['train_fixed_s'] * 1e3:.3f} ms "
        f"+ {ops['train_per_token_s'] * 1e6:.2f} µs/token; optimizer {ops['optimizer_s'] * 1e3:.3f} ms; "
        f"weight update {ops['weight_sync_latency_s'] * 1e3:.3f} ms + bytes at {ops['weight_copy_gbps']:.1f} GB/s."
    )


def caption(result: Any) -> list[str]:
    """What the figures rest on: the profile, the host's load, where the inputs are."""
    m, p = result.machine, result.profile
    load = m.get("load_average_1_5_15") or []
    after = m.get("load_average_after") or []
    shares = [f"{v.mode} trainer got {v.cpu_share:.0%} of a core" for v in result.modes if v.cpu_share is not None]
    ops = p.get("model_ops") or {}
    lines = [
        f"Profile: {result.profile_origin}; iteration_overhead_s {p['iteration_overhead_s'] * 1e3:.3f} ms, "
        f"GEMM {p['matmul_tflops']:.3f} TFLOP/s, train MFU {p['train_mfu']:.2f} (generic terms, unused for "
        f"a model with its own ops).",
        *(ops_line(key, o) for key, o in ops.items()),
        f"Machine: {m.get('cpu_count')} CPUs, load average {load[0] if load else float('nan'):.1f} before, "
        f"{after[0] if after else float('nan'):.1f} after{'; ' + ', '.join(shares) if shares else ''} "
        "(process CPU time / wall time). The trainer measures wall time; the CPU profile times one thread's CPU "
        "time, so other jobs on the host inflate the measured side only.",
        "Detail rows (dim) explain a phase and are not checked; 'of step': a phase the trainer does not run, "
        "as a share of the measured step.",
    ]
    if result.repeats:
        lines.append(
            f"Medians over {len(result.repeats)} runs, each calibrating anew: every figure above is the median of "
            "its runs (the profile and inputs are the last run's; --json has every run's rows)."
        )
    if result.folder:
        lines.append(f"Inputs kept in {result.folder} (rlsim simulate {result.folder}/<mode>-scenario.yaml).")
    return lines


def _validate_from_log(steps, quick, profile, keep, tolerance, json_out, force) -> None:
    """`validate --from-log`: one table of step times and the predicted against measured speedup."""
    from rich.table import Table

    from rlsim.tables import write_json

    with user_errors():
        check_output(json_out, force, "--json")
        from rlsim.validation.from_log import validate_from_log

        with progress_bar(auto_refresh=False) as update:
            result = validate_from_log(steps=steps, quick=quick, profile=profile, keep=keep, progress=update)
        if json_out:
            write_json(result.to_json(), json_out)
    if json_out != "-":
        t = Table(title="Fitted from the sync trainer's log, predicting the async trainer", title_justify="left")
        for col in ("", "step time"):
            t.add_column(col, justify="left" if not col else "right")
        t.add_row("sync, measured (its log)", f"{result.sync_measured_s * 1e3:,.2f} ms")
        t.add_row("sync, fitted scenario", f"{result.sync_fitted_s * 1e3:,.2f} ms")
        t.add_row("async, predicted from the fit", f"{result.async_predicted_s * 1e3:,.2f} ms")
        t.add_row("async, measured", f"{result.async_measured_s * 1e3:,.2f} ms")
        console.print(t)
        console.print(
            f"speedup: predicted {result.predicted_speedup:.2f}x, measured {result.measured_speedup:.2f}x "
            f"(error {result.speedup_error:+.1%}; limit {tolerance:g})",
            markup=False,
            highlight=False,
        )
    if abs(result.speedup_error) > tolerance:
        raise typer.Exit(1)
