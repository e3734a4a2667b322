"""`rlsim libraries` and `rlsim compare-presets`: the library presets as tables.

`libraries` lists every preset with its axes (the survey's overview table, as rlsim models it);
`libraries --details [NAME...]` prints the dated, sourced fact sheet of the libraries
(rlsim/catalog/libraries.yaml). `compare-presets` simulates one scenario under several presets
on the same GPUs and tokens, sorts them by dollars per step, and puts each library's facts
beside its step time, idle share and dollars, flagging a library whose facts rule it out.
Thin commands: parse, call `rlsim.presets` / `rlsim.catalog.libraries`, render.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).

from typing import Annotated, Any

import typer

from rlsim.commands.common import check_output, console, user_errors
from rlsim.commands.options import ForceOpt, JsonOpt, ScenarioArg, SetOpt, scenario_overrides
from rlsim.numbers import pct

SourcesOpt = Annotated[bool, typer.Option("--sources", help="Also print each preset's sources and unconfirmed axes.")]
DetailsOpt = Annotated[
    bool, typer.Option("--details", help="Print the libraries' fact sheet (engines, scale, maturity; sourced, dated).")
]
NamesArg = Annotated[
    list[str] | None, typer.Argument(help="With --details: libraries or presets to show (default: all).")
]
PresetsOpt = Annotated[str | None, typer.Option(help="Comma-separated preset names (default: all; `rlsim libraries`).")]


def register(app: typer.Typer) -> None:
    app.command("libraries", rich_help_panel="Library presets")(libraries)
    app.command("compare-presets", rich_help_panel="Library presets")(compare_presets_cmd)


def libraries(
    names: NamesArg = None,
    details: DetailsOpt = False,
    sources: SourcesOpt = False,
    json_out: JsonOpt = None,
    force: ForceOpt = False,
) -> None:
    """List the library presets (verl, TRL, PipelineRL, AReaL, ...) and the axes each one sets."""
    from rlsim.presets import list_presets, preset_axes
    from rlsim.tables import write_json

    with user_errors():
        check_output(json_out, force, "--json")
        if details or names:
            _details(names or [], json_out)
            return
        presets = list_presets()
        rows = [(p, preset_axes(p)) for p in presets]
        if json_out:
            write_json([{**p.model_dump(mode="json"), "axes": vars(a)} for p, a in rows], json_out)
        if json_out == "-":
            return
        console.print(_libraries_table(rows))
        console.print(
            "Mode-implied defaults resolved; see docs/presets.md for what a preset does not model.",
            markup=False,
            highlight=False,
        )
        if sources:
            for p in presets:
                console.print(f"\n{p.name}", style="bold", markup=False, highlight=False)
                for i, s in enumerate(p.sources, 1):
                    console.print(f"  [{i}] {s}", markup=False, highlight=False)
                for u in p.unconfirmed:
                    console.print(f"  unconfirmed: {u}", markup=False, highlight=False)
                for g in p.gaps:
                    console.print(f"  gap: {g}", markup=False, highlight=False)


def _details(names: list[str], json_out: str | None) -> None:
    from rlsim.catalog.libraries import load_fact_sheet
    from rlsim.tables import write_json

    sheet = load_fact_sheet()
    chosen = _chosen_libraries(sheet, names)
    if json_out:
        write_json({"rules": sheet.rules, "libraries": [lib.model_dump(mode="json") for lib in chosen]}, json_out)
    if json_out == "-":
        return
    for lib in chosen:
        for line in _facts_lines(lib):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print("")
    console.print("Rules behind the judgements (rlsim/catalog/libraries.yaml `rules:`):", markup=False, highlight=False)
    for name in sorted({r for r in _rules_used(chosen)}):
        console.print(f"  {name}: {sheet.rules[name]}", markup=False, highlight=False, soft_wrap=True)


def _rules_used(chosen: list) -> set[str]:
    from rlsim.catalog.libraries import RULE_OF

    return {RULE_OF[name] for lib in chosen for name in lib.facts()}


def _chosen_libraries(sheet: Any, names: list[str]) -> list:
    """Libraries by library or preset name, in the order given (all, sorted, when none)."""
    from rlsim.errors import ScenarioError
    from rlsim.presets import get_preset

    by_name = {lib.library.lower(): lib for lib in sheet.libraries}
    if not names:
        return sorted(sheet.libraries, key=lambda lib: lib.library.lower())
    out = []
    for n in names:
        lib = by_name.get(n.lower())
        if lib is None:
            try:
                lib = by_name.get(get_preset(n).library.lower())
            except ScenarioError:
                lib = None
        if lib is None:
            raise ScenarioError(
                "libraries",
                f"unknown library or preset '{n}'; libraries: {', '.join(sorted(x.library for x in sheet.libraries))}",
            )
        if lib not in out:
            out.append(lib)
    return out


def _facts_lines(lib: Any) -> list[str]:
    """One library's facts: the value, then where it was read and when (full source)."""
    from rlsim.catalog.libraries import fact_text

    snap = lib.snapshot
    lines = [f"{lib.library}: github {lib.repository}, snapshot {snap.commit[:12]} of {snap.date}"]
    for name, f in lib.facts().items():
        lines.append(f"  {name.replace('_', ' '):<24}{fact_text(f)}")
        as_of = f", reflects {f.as_of}" if f.as_of else ""
        if f.source:
            lines.append(f"  {'':<24}source: {f.source} (read {f.date}{as_of})")
        if f.note:
            lines.append(f"  {'':<24}note: {f.note}" + ("" if f.source else f" (checked {f.date})"))
    return lines


def _libraries_table(rows: list) -> Any:
    from rlsim.commands.layout import fitted_table

    cols = ["preset", "library", "mode", "depth", "weight sync", "interrupt", "staleness",
            "partial rollouts", "LoRA", "training backend"]  # fmt: skip
    cells = [[str(x) for x in (p.name, p.library, a.mode, a.buffer_depth, a.transport, a.interrupt,
              a.staleness, p.partial_rollouts, p.lora, p.training_backend)] for p, a in rows]  # fmt: skip
    optional = ("training backend", "partial rollouts", "LoRA", "library", "weight sync", "interrupt")
    return fitted_table("Library presets (rlsim/presets/*.yaml)", cols, cells, text_columns=len(cols),
                        max_text_width=None, optional=optional, elsewhere="see --json")  # fmt: skip


def compare_presets_cmd(
    scenario: ScenarioArg = None,
    presets: PresetsOpt = None,
    steps: Annotated[int | None, typer.Option(min=1, help="RL steps to simulate.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = None,
    force: ForceOpt = False,
) -> None:
    """Simulate a scenario under several library presets (same GPUs, same tokens), cheapest first."""
    from rlsim.presets import compare_presets
    from rlsim.scenario import load_scenario
    from rlsim.tables import price_caption, write_json

    with user_errors():
        check_output(json_out, force, "--json")
        sets = scenario_overrides(set_, steps=steps, seed=seed)
        sc = load_scenario(scenario, sets)
        names = [n.strip() for n in presets.split(",") if n.strip()] if presets else None
        rows = compare_presets(sc, names)
        if json_out:
            write_json(_rows_json(sc.name, rows), json_out)
        if json_out == "-":
            return
        model = sc.model if isinstance(sc.model, str) else "config.json"
        inf, tr = sc.pool_gpus
        title = (
            f"{sc.name}: {model} on {sc.cluster.total_gpus}x {sc.cluster.gpu} "
            f"(disaggregated presets: {inf} inference + {tr} training), {sc.steps} steps"
        )
        console.print(_compare_table(rows, title))
        for r in rows:
            if r.error:
                console.print(f"{r.preset.name} cannot run: {r.error}", markup=False, highlight=False)
        runs = [r.run for r in rows if r.run is not None]
        if runs:
            console.print(price_caption(runs), markup=False, highlight=False)
        console.print(_facts_beside_table(rows, sc.steps))
        for r in rows:
            for f in r.fit:
                console.print(f.line(r.preset.name), markup=False, highlight=False)
        console.print(
            "Facts: rlsim/catalog/libraries.yaml (sourced, dated); `rlsim libraries --details NAME` "
            "prints them with their sources.",
            markup=False,
            highlight=False,
        )


def _compare_table(rows: list, title: str) -> Any:
    from rlsim.commands.layout import fitted_table

    cols = ["preset", "mode", "$/step", "step s", "rollouts/s", "infer idle", "train idle", "tail",
            "stale mean/max", "dropped", "sync s"]  # fmt: skip
    cells = []
    for r in rows:
        if r.run is None:
            cells.append([r.preset.name, "-", "cannot run", *[""] * 8])
            continue
        m, c = r.run.metrics, r.run.cost
        inf, tr = m.pool("inference"), m.pool("training")
        cells.append([
            r.preset.name, m.mode, f"${c.usd_per_step:,.2f}" if c else "-", f"{m.step_time_s:,.1f}",
            f"{m.rollouts_per_s:,.2f}", pct(inf.idle_fraction), pct(tr.idle_fraction), pct(m.tail_fraction),
            f"{m.staleness_mean:.2f} / {m.staleness_max}", f"{100 * m.dropped_token_fraction:.1f}%",
            f"{m.weight_sync_s:,.3f}",
        ])  # fmt: skip
    optional = ("sync s", "dropped", "rollouts/s", "tail")
    if any(r.run and r.run.metrics.dynamic_sampling for r in rows):  # DAPO filtering: tokens thrown away
        at = cols.index("dropped") + 1
        cols.insert(at, "filtered")
        for r, row in zip(rows, cells, strict=True):
            d = r.run.metrics.dynamic_sampling if r.run else None
            row.insert(at, f"{100 * d.filtered_token_fraction:.1f}%" if d else "")
        optional = (*optional, "filtered")
    return fitted_table(title, cols, cells, text_columns=2, optional=optional, elsewhere="see --json")


def _fit_text(r: Any) -> str:
    if r.ruled_out:
        return "ruled out: " + ", ".join(f.fact.replace("_", " ") for f in r.fit if f.verdict == "ruled_out")
    if r.fit:
        return "caution: " + ", ".join(f.fact.replace("_", " ") for f in r.fit)
    return "ok"


def _facts_beside_table(rows: list, steps: int) -> Any:
    from rich.table import Table

    from rlsim.catalog.libraries import SUMMARY_FACTS, fact_text

    shown = [k for k in SUMMARY_FACTS if k != "training_backends"]
    t = Table(title="Library facts beside the simulation (see the flags below)", title_justify="left")
    t.add_column("preset", no_wrap=True)
    for col in ("step s", "idle", f"$ / {steps}-step run"):
        t.add_column(col, justify="right")
    t.add_column("fit", overflow="fold")
    for k in shown:
        t.add_column(SUMMARY_FACTS[k], overflow="fold")
    for r in rows:
        m = r.run.metrics if r.run else None
        c = r.run.cost if r.run else None
        sim = (
            [f"{m.step_time_s:,.1f}", pct(m.idle_fraction), f"${c.usd_per_run:,.2f}" if c else "-"]
            if m
            else ["cannot run", "", ""]
        )
        facts = [fact_text(getattr(r.facts, k)) if r.facts else "no entry" for k in shown]
        t.add_row(r.preset.name, *sim, _fit_text(r), *facts)
    return t


def _rows_json(scenario: str, rows: list) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "presets": [
            {
                "preset": r.preset.name,
                "library": r.preset.library,
                "error": r.error,
                "metrics": r.run.metrics.model_dump(mode="json") if r.run else None,
                "cost": r.run.cost.model_dump(mode="json") if r.run and r.run.cost else None,
                "facts": r.facts.model_dump(mode="json") if r.facts else None,
                "fit": [{"fact": f.fact, "verdict": f.verdict, "reason": f.reason} for f in r.fit],
            }
            for r in rows
        ],
    }
