"""`rlsim report`: the architecture-review report (HTML or Markdown) for one scenario.

Thin command: parse, call `rlsim.report.review.build_review`, write it with
`rlsim.report.render.write_review`. The trace and the plot of a plain simulation are
`simulate --trace/--plot` options (in `rlsim.cli`), not commands of their own.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).

from typing import Annotated

import typer

from rlsim.commands.common import check_output, console, user_errors
from rlsim.commands.options import ScenarioArg

PANEL = "Outputs"


def register(app: typer.Typer) -> None:
    app.command("report", rich_help_panel=PANEL)(report)


def report(
    scenario: ScenarioArg = None,
    output: Annotated[
        str, typer.Option("-o", "--output", help="Report file: .html (self-contained) or .md.")
    ] = "review.html",
    steps: Annotated[
        int,
        typer.Option(
            min=1,
            help="RL steps simulated per architecture; at least 4 x (deepest buffer + 1), so the "
            "pick ranks on the steady state.",
        ),
    ] = 6,
    steps_run: Annotated[
        int | None,
        typer.Option(min=1, help="RL steps of the run to price (default: the scenario's run_steps)."),
    ] = None,
    modes: Annotated[str | None, typer.Option(help="Comma-separated modes to compare (default: all five).")] = None,
    presets: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated library presets: adds a section with each one simulated beside "
            "the library's facts (`rlsim libraries`)."
        ),
    ] = None,
    max_staleness: Annotated[
        int | None,
        typer.Option(min=0, help="Staleness bound for the recommendation (default: the scenario's max_lag)."),
    ] = None,
    sensitivity: Annotated[
        bool,
        typer.Option(help="Re-simulate with response length and training MFU at +-25% (4 runs per mode)."),
    ] = True,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field: key.path=value (repeatable)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the report if it exists.")] = False,
) -> None:
    """Write an architecture-review report: scenario, calibration, modes, cost, staleness, pick."""
    from rlsim.report.formats import report_format
    from rlsim.scenario import load_scenario

    with user_errors():
        check_output(output, force, "--output")
        report_format(output)
        sc = load_scenario(scenario, [*(set_ or []), f"steps={steps}"])
        from rlsim.report.render import write_review
        from rlsim.report.review import build_review  # imports matplotlib: only on this path

        review = build_review(
            sc,
            modes=modes.split(",") if modes else None,
            max_staleness=max_staleness,
            with_sensitivity=sensitivity,
            presets=[p.strip() for p in presets.split(",") if p.strip()] if presets else None,
            run_steps=steps_run,
        )
        write_review(review, output)
    console.print(f"Wrote {output}. {review.summary}", markup=False, highlight=False)
