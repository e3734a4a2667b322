"""`rlsim fit`: fit a scenario to a real run's log (verl, NeMo RL, slime, TRL, plain CSV).

Thin: parse, call `rlsim.fit.run.fit_log`, write the fitted YAML with `write_fit`, print the
fitted values and each phase's residual. A log that cannot be read is one error line naming the
file and the line or key, exit 2.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).

from typing import Annotated

import typer

from rlsim.commands.common import check_output, console, user_errors
from rlsim.commands.options import ForceOpt

PANEL = "Calibration and validation"


def register(app: typer.Typer) -> None:
    app.command("fit", rich_help_panel=PANEL)(fit_cmd)


def fit_cmd(
    log: Annotated[str, typer.Argument(help="The run's log: a file, or a tensorboard folder.")],
    scenario: Annotated[
        str, typer.Option("--scenario", "-s", help="Base scenario YAML: model, GPUs, mode, batch (what a log lacks).")
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="Where to write the fitted scenario YAML.")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="verl-wandb-csv | verl-tensorboard | verl-console | verl-jsonl | nemo-rl-json | slime | "
            "trl-state | csv (default: detected).",
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(help="Log steps A:B to fit (inclusive; default: all but the first, which pays start-up)."),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Fit a scenario to a real run's log: workload and efficiencies, with their provenance."""
    from rich.table import Table

    from rlsim.fit.run import fit_log, write_fit

    with user_errors():
        check_output(output, force, "--output")
        result = fit_log(log, scenario, output, fmt=fmt, steps=steps)
        if result.lengths_path is not None:
            check_output(str(result.lengths_path), force, "--output")
        write_fit(result, output)
    cal = result.calibrated
    title = f"fitted from {cal.source} ({cal.format}, steps {cal.steps[0]}-{cal.steps[1]})"
    t = Table(title=title, title_justify="left")
    for col in ("phase", "measured s/step", "fitted scenario s/step", "residual"):
        t.add_column(col)
    for r in cal.residuals:
        t.add_row(
            r.phase,
            f"{r.measured_s:.3f}",
            f"{r.simulated_s:.3f}",
            "n/a" if r.residual is None else f"{r.residual:+.2%}",
        )
    console.print(t)
    for v in cal.fitted:
        console.print(f"  {v.field} = {v.value:g}  (from {v.phase})", markup=False, highlight=False)
    for field in cal.kept:
        console.print(f"  {field}: kept from the base (the log does not identify it)", markup=False, highlight=False)
    for name, value in result.unfitted.items():
        console.print(f"  logged, not fitted: {name} = {value:g} (mean)", markup=False, highlight=False)
    console.print(f"Wrote {output}", markup=False, highlight=False)
