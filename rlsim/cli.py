"""The `rlsim` command line: thin typer commands that parse, call one library function, render.

Domain errors (ScenarioError) and pydantic ValidationErrors are caught here and printed as one
line per field with exit code 2, never a traceback. torch is never imported at module level.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from rlsim import __version__
from rlsim.commands.options import ForceOpt, JsonOpt, ScenarioArg, SetOpt, scenario_overrides
from rlsim.errors import ScenarioError

app = typer.Typer(
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=False,
    add_completion=False,
    help="GPU cost and idle-time simulator and planner for RL training of LLMs.",
)
console = Console()
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input -> one line per problem on stderr, exit code 2, no traceback."""
    from pydantic import ValidationError  # here, not at the top: `rlsim --help` need not load pydantic

    from rlsim.errors_format import validation_lines

    try:
        yield
    except ScenarioError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    except ValidationError as exc:
        for line in validation_lines(exc):
            err_console.print(f"error: {line}", markup=False)
        raise typer.Exit(2) from None


def check_output(path: str | None, force: bool, field: str) -> None:
    """Refuse to overwrite an existing file unless --force: nothing a user wrote is lost silently."""
    if path and path != "-" and Path(path).exists() and not force:
        raise ScenarioError(field, f"'{path}' exists; pass --force to overwrite it")


def _version(value: bool) -> None:
    if value:
        console.print(f"rlsim {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """rlsim: simulate RL pipelines for LLMs: step time, idle GPUs, staleness, dollars."""


@app.command()
def simulate(
    scenario: ScenarioArg = None,
    mode: Annotated[str | None, typer.Option(help="Simulate only this mode (default: compare all five).")] = None,
    modes: Annotated[str | None, typer.Option(help="Comma-separated modes to compare.")] = None,
    steps: Annotated[int | None, typer.Option(help="RL steps to simulate.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    profile: Annotated[str | None, typer.Option(help="Calibration profile JSON (overrides the scenario).")] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = None,
    trace: Annotated[
        str | None,
        typer.Option("--trace", help="Write a Chrome/Perfetto trace of every mode to PATH."),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="Write the timeline and GPU-time plot to PATH (.png or .svg)."),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Simulate a scenario under every pipeline mode (or one) and compare them."""
    from rlsim.report.formats import figure_format
    from rlsim.runs import run_modes
    from rlsim.scenario import load_scenario
    from rlsim.tables import modes_table, price_caption, runs_json, write_json

    with user_errors():
        check_output(json_out, force, "--json")
        check_output(trace, force, "--trace")
        check_output(plot, force, "--plot")
        if plot:
            figure_format(plot)
        if profile and (profile.endswith(".json") or "/" in profile):
            profile = str(Path(profile).expanduser().resolve())  # --profile is relative to the shell's folder
        sets = scenario_overrides(set_, mode, steps, seed) + ([f"profile={profile}"] if profile else [])
        sc = load_scenario(scenario, sets)
        chosen = [mode] if mode else (modes.split(",") if modes else None)
        runs = run_modes(sc, chosen)
        if json_out:
            write_json(runs_json(runs), json_out)
        if trace:
            from rlsim.report.trace import write_trace

            write_trace(runs, trace)
        if plot:
            from rlsim.report.plots import save_simulation_plot

            save_simulation_plot(runs, plot)
        if "-" not in (json_out, trace):
            model = sc.model if isinstance(sc.model, str) else "config.json"
            title = f"{sc.name}: {model} on {sc.cluster.total_gpus}x {sc.cluster.gpu}, {sc.steps} steps"
            console.print(modes_table(runs, title))
            console.print(price_caption(runs), markup=False, highlight=False)
            for what, path in (("Trace (open in ui.perfetto.dev)", trace), ("Plot", plot)):
                if path:
                    console.print(f"{what}: {path}", markup=False, highlight=False)


@app.command()
def compare(
    scenarios: Annotated[list[str], typer.Argument(help="Scenario YAML files or built-in names.")],
    modes: Annotated[str | None, typer.Option(help="Comma-separated modes (default: each scenario's own).")] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = None,
    force: ForceOpt = False,
) -> None:
    """Compare several scenarios (each under its own mode, or under --modes)."""
    from rlsim.runs import run_mode, run_modes
    from rlsim.scenario import load_scenario
    from rlsim.tables import modes_table, price_caption, runs_json, write_json

    with user_errors():
        check_output(json_out, force, "--json")
        runs = []
        for path in scenarios:
            sc = load_scenario(path, list(set_ or []))
            runs += run_modes(sc, modes.split(",")) if modes else [run_mode(sc)]
        if json_out:
            write_json(runs_json(runs), json_out)
        if json_out != "-":
            console.print(modes_table(runs, "comparison"))
            console.print(price_caption(runs), markup=False, highlight=False)


@app.command()
def schema() -> None:
    """Print the scenario's JSON Schema (every field with its description and unit)."""
    from rlsim.scenario import Scenario

    typer.echo(json.dumps(Scenario.model_json_schema(), indent=2))


@app.command()
def gpus() -> None:
    """List the GPU catalog with the source of each entry."""
    from rich.table import Table

    from rlsim.catalog import load_gpus

    t = Table(title="GPU catalog (dense bf16; bandwidths one direction)", title_justify="left")
    for col in (
        "key",
        "name",
        "bf16 TFLOPS",
        "HBM GB",
        "HBM TB/s",
        "scale-up GB/s",
        "per-GPU net GB/s",
        "date",
    ):
        t.add_column(col)
    for g in load_gpus().values():
        t.add_row(
            g.key,
            g.name,
            f"{g.bf16_tflops:g}",
            f"{g.hbm_gb:g}",
            f"{g.hbm_tbps:g}",
            f"{g.scaleup_gbps:g}",
            f"{g.internode_gbps_per_gpu:g}",
            g.date,
        )
    console.print(t)


@app.command()
def models() -> None:
    """List the LLM catalog."""
    from rich.table import Table

    from rlsim.catalog import load_llms

    t = Table(title="LLM catalog", title_justify="left")
    for col in (
        "key",
        "params (B)",
        "active (B)",
        "layers",
        "hidden",
        "heads q/kv",
        "KV KB/token",
        "MoE",
    ):
        t.add_column(col)
    for m in load_llms().values():
        moe = f"{m.moe.num_experts}x top{m.moe.experts_per_token}" if m.moe else "-"
        t.add_row(
            m.key,
            f"{m.total_params / 1e9:.2f}",
            f"{m.active_params / 1e9:.2f}",
            str(m.num_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_kv_heads}",
            f"{m.kv_bytes_per_token() / 1024:.0f}",
            moe,
        )
    console.print(t)


@app.command()
def examples() -> None:
    """List the built-in example scenarios (usable by name)."""
    from rlsim.scenario import builtin_scenarios, read_yaml

    for name, path in builtin_scenarios().items():
        console.print(f"{name:<20} {read_yaml(path).get('name', '')}  ({path})", markup=False, highlight=False)


def _register_commands() -> None:
    import importlib

    from rlsim.commands import MODULES

    for name in MODULES:
        importlib.import_module(f"rlsim.commands.{name}").register(app)


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
