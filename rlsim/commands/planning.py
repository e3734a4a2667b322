"""`rlsim cost`, `rlsim sweep` and `rlsim plan`: thin commands over `rlsim.planner`.

Each command parses, calls one library function and renders: rich tables on stdout, JSON and
CSV writers beside them ('-' means stdout, and then no table is printed), a progress bar on
stderr while simulations run. `sweep` and `plan` stop on SIGINT/SIGTERM with one line saying how
far they got (their workers are killed, nothing is written); limits that bound their work up
front (`--max-points`, `--max-candidates`) are named in the error that refuses a larger job.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).
# The names imported only for type checking are quoted instead.

import csv
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlsim.commands.common import check_output, check_outputs, console, err_console, stop_on_signals, user_errors
from rlsim.commands.layout import fitted_table
from rlsim.commands.options import CsvOpt, ForceOpt, JsonOpt, ScenarioArg, SetOpt, check_number
from rlsim.modes import Mode
from rlsim.numbers import usd

if TYPE_CHECKING:
    from rich.console import RenderableType

    from rlsim.planner.costing import CostReport
    from rlsim.planner.search import PlanResult
    from rlsim.planner.sweep import SweepResult

RUN = "Execution"


class Pricing(str, Enum):
    on_demand = "on-demand"
    spot = "spot"
    committed = "committed"
    capacity_block = "capacity-block"


PRICES_HELP = (
    "YAML price file: a list of rows (or the catalog's own `prices:` mapping) with provider, "
    "product, gpu, gpus_per_instance, pricing, usd_per_gpu_hour, observed, source; a row "
    "replaces the catalog's row with the same provider, product, gpu, pricing and region "
    "(see docs/planning.md)."
)


class ExecutorKind(str, Enum):
    local = "local"
    ray = "ray"


class Objective(str, Enum):
    cost = "cost"
    time = "time"


PlotOpt = Annotated[str | None, typer.Option("--plot", help="Write a plot of the results to PATH (.png or .svg).")]
ExecutorOpt = Annotated[ExecutorKind, typer.Option(help="Where simulations run.", rich_help_panel=RUN)]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(help="Ray cluster address (default: start a local Ray).", rich_help_panel=RUN),
]
WorkersOpt = Annotated[int | None, typer.Option(help="Worker processes (default: one per CPU).", rich_help_panel=RUN)]

# ---------------------------------------------------------------- writers and rendering helpers


def _write_csv(rows: list[dict[str, Any]], path: str) -> None:
    from rlsim.outputs import write_text

    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    write_text(buf.getvalue(), path)


def _emit(data: Any, rows: list[dict[str, Any]], json_out: str | None, csv_out: str | None) -> bool:
    """Write the requested files; True when a table may still go to stdout."""
    from rlsim.tables import write_json

    if json_out:
        write_json(data, json_out)
    if csv_out:
        _write_csv(rows, csv_out)
    return "-" not in (json_out, csv_out)


@contextmanager
def _progress(label: str, state: dict[str, int] | None = None) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (a terminal only); `state` keeps the last (done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    def update(done: int, total: int) -> None:
        if state is not None:
            state.update(done=done, total=total)
        bar.update(task, completed=done, total=total)

    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task(label, total=None)
        yield update


def _stopped(command: str, state: dict[str, int]) -> Callable[[], str]:
    """The line an interrupted sweep or plan prints: how far it got, and that nothing was kept."""

    def line() -> str:
        total = state.get("total")
        got = f"after {state.get('done', 0):,} of {total:,} simulations" if total else "before any simulation ran"
        return f"{command} stopped {got}; its workers were stopped and no output was written"

    return line


# ---------------------------------------------------------------- cost


_CLASS = {"on_demand": "on-demand", "capacity_block": "cap. block"}


TAIL = "tail: share of GPU time decoding at a batch under 25% of max_batch (busy, little work)."


def _cost_rows(report: "CostReport") -> list[dict[str, Any]]:
    return [{"gpu": report.gpu, **line.model_dump(mode="json")} for line in report.lines]


def _cost_table(report: "CostReport") -> "RenderableType":
    from rlsim.metrics.cost import periodic_s

    p = report.projection
    rows = [
        [
            c.provider,
            _short(c.product),
            "spot*" if c.interruptible else _CLASS.get(c.pricing, c.pricing),
            c.region or "-",
            f"${c.usd_per_gpu_hour:.2f}" + ("!" if c.stale else ""),
            usd(c.usd_per_step),
            usd(c.usd_per_million_tokens),
            usd(c.usd_per_run),
            usd(c.idle_usd_per_run),
            f"{c.wall_days_per_run:.2f}",
        ]
        for c in report.lines
    ]
    points = f"{len(p.sample_fractions)} points of the length schedule (trapezoid)"
    how = {
        "linear": "simulated average step x steps",
        "steady": "simulated fill, then the steady step time",
        "schedule": f"fill, then steady step time integrated over {points}",
        "schedule-average": f"average step (no steady state yet) integrated over {points}",
    }
    caption = (
        f"Priced: {report.layout}.\n"
        f"Simulated {report.simulated_steps} steps; run of {p.steps:,} steps projected as "
        f"{how[p.method]}: {p.wall_time_s / 3600:,.2f} h on {p.gpus} GPUs = "
        f"{p.gpus * p.wall_time_s / 3600:,.0f} GPU-hours. Dates and sources: --json/--csv.\n"
        "* spot: interruptible capacity; --preemption-overhead adds the lost time."
    )
    periodic = periodic_s(report.metrics[0], p.steps)
    if periodic > 0:
        caption += f"\nThe run's time includes {periodic / 3600:,.2f} h of periodic evaluation and checkpoints."
    if p.pools:  # pools of other GPU types than the rows' keep their type's default price in every row
        others = [s for s in p.pools if s.gpu_type != report.gpu]
        caption += "".join(
            f"\nThe {s.pool} pool's {s.gpus}x {s.gpu_type} is priced at its default ${s.usd_per_gpu_hour:.2f}/GPU-hour "
            "in every row ($/GPU-h is the rows' GPU)."
            for s in others
            if s.usd_per_gpu_hour is not None
        )
    if any(c.stale for c in report.lines):
        caption += "\n! price observed more than a year ago (or on an unknown date): check it."
    cols = [
        "provider",
        "product",
        "class",
        "region",
        "$/GPU-h",
        "$/step",
        "$/1M tok",
        "$/run",
        "idle $",
        "days",
    ]
    return fitted_table(
        f"{report.scenario}: {report.gpu}, cheapest first",
        cols,
        rows,
        caption,
        text_columns=4,
        optional=("region", "$/1M tok", "idle $", "days"),
    )


def _short(name: str, most: int = 22) -> str:
    """A long product name cut to `most` characters (the full name is in --json/--csv)."""
    return name if len(name) <= most else name[: most - 1] + "…"


def cost(
    scenario: ScenarioArg = None,
    steps: Annotated[
        int | None,
        typer.Option(min=1, help="RL steps of the run to price (default: the scenario's run_steps)."),
    ] = None,
    mode: Annotated[Mode | None, typer.Option(help="Price the run under this pipeline mode.")] = None,
    provider: Annotated[list[str] | None, typer.Option(help="Only this provider (repeatable).")] = None,
    pricing: Annotated[Pricing | None, typer.Option(help="Only this pricing class.")] = None,
    prices: Annotated[str | None, typer.Option(help=PRICES_HELP)] = None,
    preemption_overhead: Annotated[float, typer.Option(help="Extra run time on spot capacity (0.1 = +10%).")] = 0.0,
    set_: SetOpt = None,
    json_out: JsonOpt = None,
    csv_out: CsvOpt = None,
    force: ForceOpt = False,
) -> None:
    """Price a whole run at every catalog row for the scenario's GPU, cheapest first."""
    from rlsim.planner.costing import cost_report
    from rlsim.scenario import load_scenario

    with user_errors():
        check_outputs({"--json": json_out, "--csv": csv_out}, force)
        check_number(preemption_overhead, "--preemption-overhead")
        sets = list(set_ or []) + ([f"pipeline.mode={mode.value}"] if mode else [])
        report = cost_report(
            load_scenario(scenario, sets),
            run_steps=steps,
            providers=provider or (),
            pricing=pricing.value.replace("-", "_") if pricing else None,
            prices_file=prices,
            preemption_overhead=preemption_overhead,
        )
        data = {
            "scenario": report.scenario,
            "gpu": report.gpu,
            "simulated_steps": report.simulated_steps,
            "priced": report.layout,
            "projection": report.projection.model_dump(mode="json"),
            "lines": _cost_rows(report),
        }
        if _emit(data, _cost_rows(report), json_out, csv_out):
            console.print(_cost_table(report))


# ---------------------------------------------------------------- sweep


def _sweep_rows(result: "SweepResult") -> list[dict[str, Any]]:
    """One mapping per point: index, the varied values, then the results (None without metrics)."""
    rows = []
    for p in result.points:
        m, c = p.metrics, p.cost
        rows.append(
            {
                "index": p.index,
                "values": p.values,
                "step_time_s": m.step_time_s if m else None,
                "rollouts_per_s": m.rollouts_per_s if m else None,
                "output_tokens_per_s": m.output_tokens_per_s if m else None,
                "idle_fraction": m.idle_fraction if m else None,
                "tail_fraction": m.tail_fraction if m else None,
                "decode_occupancy": m.decode_occupancy if m else None,
                "staleness_mean": m.staleness_mean if m else None,
                "staleness_max": m.staleness_max if m else None,
                "usd_per_step": c.usd_per_step if c else None,
                "error": p.error,
            }
        )
    if any(p.metrics and p.metrics.dynamic_sampling for p in result.points):  # DAPO filtering: its columns
        for row, p in zip(rows, result.points, strict=True):
            d = p.metrics.dynamic_sampling if p.metrics else None
            row["gen_rounds_per_step"] = d.gen_rounds_per_step if d else None
            row["filtered_token_fraction"] = d.filtered_token_fraction if d else None
    return rows


def _sweep_table(result: "SweepResult") -> "RenderableType":
    rows, notes = [], {}  # error text -> footnote number
    for p in result.points:
        m, c = p.metrics, p.cost
        values = [str(v) for v in p.values.values()]
        if m is None:
            note = notes.setdefault(p.error or "", len(notes) + 1)
            rows.append(values + ["-"] * 7 + [f"[{note}]"])
            continue
        rows.append(
            values
            + [
                f"{m.step_time_s:,.1f}",
                f"{m.rollouts_per_s:,.2f}",
                f"{m.output_tokens_per_s:,.0f}",
                f"{100 * m.idle_fraction:.0f}%",
                f"{100 * m.tail_fraction:.0f}%",
                f"{m.staleness_mean:.2f} / {m.staleness_max}",
                usd(c.usd_per_step if c else None),
                "",
            ]
        )
    last = [k.split(".")[-1] for k in result.keys]
    names = last if len(set(last)) == len(last) else [".".join(k.split(".")[-2:]) for k in result.keys]
    cols = names + [
        "step s",
        "rollouts/s",
        "out tok/s",
        "idle",
        "tail",
        "stale mean/max",
        "$/step",
        "error",
    ]
    mode = f" ({result.mode})" if result.mode else ""
    caption = "\n".join(
        [", ".join(f"{n} = {k}" for n, k in zip(names, result.keys, strict=True)) + "."]
        + ["$/step at the catalog's default on-demand price of each point's GPU.", TAIL]
        + [f"[{n}] {text}" for text, n in notes.items()]
    )
    return fitted_table(
        f"{result.scenario}{mode}: sweep of {len(result.points)} points",
        cols,
        rows,
        caption,
        text_columns=len(result.keys),
        max_text_width=None,
        optional=(("error",) if not notes else ()) + ("out tok/s", "rollouts/s"),
    )


def sweep(
    scenario: ScenarioArg = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(help="An axis: key.path=v1,v2,... (repeatable; grid of all)."),
    ] = None,
    mode: Annotated[Mode | None, typer.Option(help="Run every point under this pipeline mode.")] = None,
    set_: SetOpt = None,
    executor: ExecutorOpt = ExecutorKind.local,
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    max_points: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Refuse a grid of more points than this (default 10,000; each is a simulation).",
        ),
    ] = None,
    json_out: JsonOpt = None,
    csv_out: CsvOpt = None,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Simulate a grid over any scenario fields: step time, throughput, idle, staleness, $/step."""
    from rlsim.planner.executors import make_executor
    from rlsim.planner.sweep import MAX_POINTS, run_sweep
    from rlsim.scenario import load_scenario

    state: dict[str, int] = {}
    with user_errors(), stop_on_signals(_stopped("sweep", state)):
        check_outputs({"--json": json_out, "--csv": csv_out}, force)
        _check_plot(plot, force)
        base = load_scenario(scenario, list(set_ or []))
        pool = make_executor(executor.value, workers=workers, address=ray_address)
        with _progress("sweep", state) as progress:
            result = run_sweep(
                base,
                vary or [],
                mode=mode.value if mode else None,
                executor=pool,
                progress=progress,
                max_points=max_points or MAX_POINTS,
            )
        rows = _sweep_rows(result)
        data = {
            "scenario": result.scenario,
            "mode": result.mode,
            "keys": result.keys,
            "points": rows,
        }
        flat = [
            {
                "index": r["index"],
                **r["values"],
                **{k: v for k, v in r.items() if k not in ("index", "values")},
            }
            for r in rows
        ]
        if plot:
            _sweep_plot(result, flat, plot)
        if _emit(data, flat, json_out, csv_out):
            console.print(_sweep_table(result))
            if plot:
                console.print(f"Plot: {plot}", markup=False, highlight=False)


# ---------------------------------------------------------------- plan


def _plan_table(result: "PlanResult") -> "RenderableType":
    marks = {result.recommended.candidate.index: "*"}
    if result.runner_up:
        marks[result.runner_up.candidate.index] = "2"
    rows = [
        [
            marks.get(e.candidate.index, ""),
            str(e.candidate.index),
            e.candidate.label,
            f"{e.cost.provider} ${e.cost.usd_per_gpu_hour:.2f}" + ("!" if e.cost.stale else ""),
            f"{e.run_hours:,.2f}",
            usd(e.run_usd),
            f"{e.staleness_mean:.2f} / {e.staleness_max}",
            f"{100 * e.idle_fraction:.0f}%",
            f"{100 * e.tail_fraction:.0f}%",
        ]
        for e in result.frontier
    ]
    simulated = len(result.evaluations) + len(result.failed)
    caption = (
        f"{result.candidates} configurations: {len(result.pruned)} pruned (cannot fit or no "
        f"product rents their nodes), {len(result.skipped)} skipped (a lower bound shows they cannot "
        f"change the result), {simulated} simulated for {result.sim_steps} steps each "
        f"(at least 2 x (buffer depth + 1)) ({len(result.failed)} failed), "
        f"{len(result.feasible)} feasible; runs of {result.run_steps:,} steps projected; "
        f"prices: cheapest {result.pricing.replace('_', '-')} row per GPU and node size.\n"
        f"* recommended, 2 runner-up. {TAIL}"
    )
    if any(e.cost.stale for e in result.frontier):
        caption += "\n! price observed more than a year ago (or on an unknown date): check it."
    cols = ["", "#", "configuration", "price", "run h", "run $", "stale mean/max", "idle", "tail"]
    return fitted_table(
        f"{result.scenario}: Pareto frontier (run time, run cost, staleness), fastest first",
        cols,
        rows,
        caption,
        text_columns=4,
        optional=("tail", "stale mean/max"),
    )


def plan(
    scenario: ScenarioArg = None,
    max_gpus: Annotated[int, typer.Option(min=1, help="Most GPUs to rent.")] = 8,
    gpu_types: Annotated[str | None, typer.Option(help="Comma-separated GPU keys (default: the scenario's).")] = None,
    inference_gpu_types: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated GPU keys to search for the inference pool alone (a GPU type per pool): "
            "every pairing with --gpu-types, which then sets the training pool's (and the cluster's) type; "
            "default: the cluster's type."
        ),
    ] = None,
    modes: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated pipeline modes of colocated, sync, one_step_off, async, "
            "streaming (default: all five)."
        ),
    ] = None,
    deadline_hours: Annotated[float | None, typer.Option(help="The run must finish within H hours.")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="The run must cost at most B dollars.")] = None,
    max_staleness: Annotated[int | None, typer.Option(help="No trained sample may lag more than K versions.")] = None,
    objective: Annotated[Objective, typer.Option(help="What the recommendation minimizes.")] = Objective.cost,
    steps: Annotated[int, typer.Option(min=1, help="RL steps simulated per candidate (small: fast).")] = 4,
    steps_run: Annotated[
        int | None,
        typer.Option(min=1, help="RL steps of the run to plan (default: the scenario's run_steps)."),
    ] = None,
    sync_every: Annotated[
        str | None,
        typer.Option(help="Comma-separated weight-sync intervals to search (default: 1,2; colocated 1 only)."),
    ] = None,
    pricing: Annotated[Pricing, typer.Option(help="Price class: the cheapest such row per GPU.")] = Pricing.on_demand,
    prices: Annotated[str | None, typer.Option(help=PRICES_HELP)] = None,
    set_: SetOpt = None,
    executor: ExecutorOpt = ExecutorKind.local,
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    max_candidates: Annotated[
        int | None,
        typer.Option(min=1, help="Refuse a search space of more configurations than this (default 10,000)."),
    ] = None,
    exhaustive: Annotated[
        bool,
        typer.Option(help="Simulate every candidate, not skipping those a lower bound rules out (same result)."),
    ] = False,
    json_out: JsonOpt = None,
    csv_out: CsvOpt = None,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Search modes, pool splits, TP, buffer depth, sync interval and GPU type for the best plan."""
    from rlsim.planner.candidates import SearchSpace
    from rlsim.planner.executors import make_executor
    from rlsim.planner.search import Constraints
    from rlsim.planner.search import plan as run_plan
    from rlsim.scenario import load_scenario

    state: dict[str, int] = {}
    with user_errors(), stop_on_signals(_stopped("plan", state)):
        check_outputs({"--json": json_out, "--csv": csv_out}, force)
        check_number(deadline_hours, "--deadline-hours", above=True)
        check_number(budget_usd, "--budget-usd", above=True)
        _check_plot(plot, force)
        base = load_scenario(scenario, list(set_ or []))
        intervals = _int_list(sync_every, "--sync-every") if sync_every else None
        space = SearchSpace(
            max_gpus,
            tuple(g.strip() for g in (gpu_types or base.cluster.gpu).split(",")),
            **({"modes": tuple(m.strip() for m in modes.split(","))} if modes else {}),
            **({"sync_every": intervals, "colocated_sync_every": intervals} if intervals else {}),
            **({"max_candidates": max_candidates} if max_candidates else {}),
            **(
                {"inference_gpu_types": tuple(g.strip() for g in inference_gpu_types.split(","))}
                if inference_gpu_types
                else {}
            ),
        )
        with _progress("plan", state) as progress:
            result = run_plan(
                base,
                space,
                constraints=Constraints(deadline_hours, budget_usd, max_staleness),
                objective=objective.value,
                sim_steps=steps,
                run_steps=steps_run,
                pricing=pricing.value.replace("-", "_"),
                prices_file=prices,
                executor=make_executor(executor.value, workers=workers, address=ray_address),
                progress=progress,
                exhaustive=exhaustive,
            )
        data = result.to_dict()
        if plot:
            _plan_plot(data, plot)
        if _emit(data, data["evaluations"], json_out, csv_out):
            console.print(_plan_table(result))
            best = result.recommended.candidate
            console.print(
                f"Recommended: #{best.index} {best.label}: {result.reason}.",
                markup=False,
                highlight=False,
            )
            if plot:
                console.print(f"Plot: {plot}", markup=False, highlight=False)


def _check_plot(plot: str | None, force: bool) -> None:
    from rlsim.report.formats import figure_format

    if plot:
        check_output(plot, force, "--plot")
        figure_format(plot)


def _sweep_plot(result: "SweepResult", rows: list[dict[str, Any]], path: str) -> None:
    """Metrics against the first varied key, one line per value of the second (if any)."""
    from rlsim.report.planner_plots import sweep_figure
    from rlsim.report.plots import save_figure

    metrics = ["step_time_s", "idle_fraction", "tail_fraction"]
    if any(r["usd_per_step"] is not None for r in rows):
        metrics.append("usd_per_step")
    series = result.keys[1] if len(result.keys) > 1 else None
    labels = {"step_time_s": "step time, s", "idle_fraction": "idle share of GPU time",
              "tail_fraction": "tail share of GPU time", "usd_per_step": "$ per step"}  # fmt: skip
    save_figure(sweep_figure(rows, result.keys[0], metrics, series, labels), path)


def _plan_plot(data: dict[str, Any], path: str) -> None:
    """Run dollars against run hours: every simulated candidate and the plan's frontier."""
    from rlsim.report.planner_plots import frontier_figure
    from rlsim.report.plots import save_figure

    labels = {"run_hours": f"run hours ({data['run_steps']:,} steps)", "run_usd": "run $"}
    points = [{**e, "tag": f"#{e['index']}"} for e in data["evaluations"]]  # as the table numbers them
    front = [p for p in points if p["frontier"]]
    save_figure(frontier_figure(points, "run_hours", "run_usd", front, "tag", labels), path)


def _int_list(text: str, option: str) -> tuple[int, ...]:
    from rlsim.errors import ScenarioError

    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ScenarioError(option, f"'{text}' must be comma-separated integers") from None
    if any(v < 1 for v in values):
        raise ScenarioError(option, f"intervals must be >= 1, got {text}")
    return values


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Planning")(cost)
    app.command(rich_help_panel="Planning")(sweep)
    app.command(rich_help_panel="Planning")(plan)
