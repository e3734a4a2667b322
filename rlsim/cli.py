"""The `rlsim` command line: thin typer commands that parse, call one library function, render.

The core commands live here; the others in `rlsim/commands/` (one module per topic), imported
the first time a command line names one of theirs (`rlsim.commands.topics`). Every command
shares `rlsim.commands.common`: the consoles and the boundary that turns bad input into one line
with exit code 2 (and a signal into one line and exit 130/143). torch is never imported at
module level.
"""

# No `from __future__ import annotations` in the modules that define commands: typer evaluates each
# string annotation twice per command at every start (signature, type hints), 8% of `rlsim --help`'s
# instructions (benchmarks/bench_startup.py --instructions).

import json
import warnings
from pathlib import Path
from typing import Annotated

import typer

from rlsim import __version__
from rlsim.commands import typer_adjustments
from rlsim.commands.common import (
    check_output,
    check_outputs,
    console,
    err_console,
    user_errors,
)
from rlsim.commands.options import ForceOpt, JsonOpt, ScenarioArg, SetOpt, scenario_overrides
from rlsim.commands.topics import TopicGroup

_PYTHON_SHOWWARNING = warnings.showwarning


typer_adjustments.flags_take_no_value()
typer_adjustments.missing_values_without_pydantic()
typer_adjustments.help_without_markdown_or_tracebacks()
app = typer.Typer(
    cls=TopicGroup,  # the topic modules' commands (rlsim/commands/) load when named
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    help="GPU cost and idle-time simulator and planner for RL training of LLMs.",
)


def _version(value: bool) -> None:
    if value:
        console.print(f"rlsim {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """rlsim: simulate RL pipelines for LLMs: step time, idle GPUs, staleness, dollars."""
    _print_warnings()


def _print_warnings() -> None:
    """rlsim warnings become one `warning: ...` line each on stderr (each text once per command)."""
    from rlsim.notices import RlsimWarning

    shown: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if not issubclass(category, RlsimWarning):
            return _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)
        if str(message) not in shown:
            shown.add(str(message))
            err_console.print(f"warning: {message}", markup=False)

    warnings.simplefilter("always", RlsimWarning)
    warnings.showwarning = show


@app.command()
def simulate(
    scenario: ScenarioArg = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="Simulate only this mode: colocated, sync, one_step_off, async or streaming "
            "(default: compare all five)."
        ),
    ] = None,
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
    from rlsim.pools import gpus_text
    from rlsim.report.formats import figure_format
    from rlsim.runs import run_modes
    from rlsim.scenario import load_scenario
    from rlsim.tables import modes_table, price_caption, runs_json, write_json

    with user_errors():
        check_outputs({"--json": json_out, "--trace": trace, "--plot": plot}, force)
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
            title = f"{sc.name}: {model} on {gpus_text(sc)}, {sc.steps} steps"
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
    from rlsim.catalog import load_gpus
    from rlsim.commands.layout import fitted_table

    cols = ["key", "name", "bf16 TFLOPS", "HBM GB", "CUDA GiB", "HBM TB/s", "scale-up GB/s", "per-GPU net GB/s", "date"]
    rows = [
        [
            g.key,
            g.name,
            f"{g.bf16_tflops:g}",
            f"{g.hbm_gb:g}",
            f"{g.visible_memory.total_mib / 1024:.1f}" + ("" if g.visible_memory.basis == "runtime" else "*"),
            f"{g.hbm_tbps:g}",
            f"{g.scaleup_gbps:g}",
            f"{g.internode_gbps_per_gpu:g}",
            g.date,
        ]  # fmt: skip
        for g in load_gpus().values()
    ]
    title = "GPU catalog (dense bf16; bandwidths one direction; CUDA GiB: the total CUDA reports, *: not read on one)"
    console.print(
        fitted_table(title, cols, rows, text_columns=2, optional=("date", "name"), elsewhere="widen the terminal")
    )


@app.command()
def models() -> None:
    """List the LLM catalog."""
    from rlsim.catalog import load_llms
    from rlsim.commands.layout import fitted_table

    cols = ["key", "params (B)", "active (B)", "layers", "hidden", "heads q/kv", "KV KB/token", "context", "MoE"]
    rows = [
        [m.key, f"{m.total_params / 1e9:.2f}", f"{m.active_params / 1e9:.2f}", str(m.num_layers),
         str(m.hidden_size), f"{m.num_attention_heads}/{m.num_kv_heads}", f"{m.kv_bytes_per_token() / 1024:.0f}",
         f"{m.max_position_embeddings:,}", f"{m.moe.num_experts}x top{m.moe.experts_per_token}" if m.moe else "-"]
        for m in load_llms().values()
    ]  # fmt: skip
    console.print(
        fitted_table(
            "LLM catalog", cols, rows, optional=("hidden", "heads q/kv", "layers"), elsewhere="widen the terminal"
        )
    )


@app.command()
def examples() -> None:
    """List the built-in example scenarios (usable by name)."""
    from rlsim.scenario import builtin_scenarios, read_yaml

    for name, path in builtin_scenarios().items():
        console.print(f"{name:<20} {read_yaml(path).get('name', '')}  ({path})", markup=False, highlight=False)


if __name__ == "__main__":  # pragma: no cover
    app()
