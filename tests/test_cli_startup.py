"""The CLI's help path stays light, and the typer adjustment that keeps it light changes no result.

Start-up times are measured by benchmarks/bench_startup.py, not here; these tests check what
decides them: which libraries `--help` loads, and that a missing option value takes the same
path as in typer without pydantic.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("pydantic", "numpy", "simpy", "scipy", "yaml", "matplotlib", "torch", "ray", "markdown_it", "pygments")


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["plan", "--help"], ["-V"]])
def test_help_loads_no_pydantic_numpy_simpy_or_markdown(argv: list[str]) -> None:
    code = textwrap.dedent(f"""
        import sys
        import rlsim.cli
        try:
            rlsim.cli.app({argv!r}, prog_name="rlsim")
        except SystemExit as stop:
            assert stop.code in (0, None), stop.code
        print("loaded:", sorted(m for m in {HEAVY!r} if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "rlsim" in out
    assert out.splitlines()[-1] == "loaded: []"


TINY_APP = textwrap.dedent("""
    import sys
    from typing import Annotated, Optional

    import typer

    if sys.argv[1] == "adjusted":
        from rlsim.commands.typer_adjustments import missing_values_without_pydantic

        missing_values_without_pydantic()
    app = typer.Typer(add_completion=False)

    @app.command()
    def main(
        count: Annotated[Optional[int], typer.Option()] = None,
        names: Annotated[Optional[list[str]], typer.Option("--name")] = None,
        where: Annotated[Optional[str], typer.Argument()] = None,
    ) -> None:
        print(repr(count), repr(names), repr(where))
        print("pydantic" in sys.modules, file=sys.stderr)

    app(sys.argv[2:], prog_name="tiny")
""")


def tiny(variant: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", TINY_APP, variant, *argv], capture_output=True, text=True)


@pytest.mark.parametrize(
    "argv", [[], ["--count", "3", "--name", "a", "--name", "b", "here"], ["--count", "three"], ["--name"]]
)
def test_missing_values_take_the_same_path_as_in_typer(argv: list[str]) -> None:
    """Missing, given and bad values give what typer gives: the same values, errors and exit codes."""
    plain, adjusted = tiny("plain", *argv), tiny("adjusted", *argv)
    assert (adjusted.returncode, adjusted.stdout) == (plain.returncode, plain.stdout)
    if plain.returncode:  # the command did not run: stderr holds typer's error alone
        assert adjusted.stderr == plain.stderr


def test_missing_values_need_no_pydantic() -> None:
    res = tiny("adjusted")
    assert res.returncode == 0 and res.stdout.split() == ["None", "None", "None"]
    assert res.stderr.split() == ["False"]


def test_command_modules_keep_annotations_evaluated() -> None:
    """Modules that define commands leave out `from __future__ import annotations`: typer would
    evaluate every string annotation of every command at every start."""
    import ast
    from pathlib import Path

    def is_command(node: ast.stmt) -> bool:
        decorators = [ast.unparse(d) for d in getattr(node, "decorator_list", [])]
        return isinstance(node, ast.FunctionDef) and (node.name == "register" or "app.command()" in decorators)

    pkg = Path(__file__).resolve().parents[1] / "rlsim"
    checked = 0
    for path in [pkg / "cli.py", *sorted((pkg / "commands").glob("*.py"))]:
        tree = ast.parse(path.read_text())
        if any(is_command(node) for node in tree.body):
            checked += 1
            assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body), path.name
    assert checked == 6  # cli.py and the five command modules


CRASHING_APP = textwrap.dedent("""
    import sys

    import typer

    if sys.argv[1] == "adjusted":
        from rlsim.commands.typer_adjustments import help_without_markdown_or_tracebacks

        help_without_markdown_or_tracebacks()
    app = typer.Typer(add_completion=False, rich_markup_mode="markdown")

    @app.command()
    def main(count: int = 1) -> None:
        \"\"\"Counts *things* in **markdown**.\"\"\"
        raise RuntimeError(f"boom {count}")

    app(sys.argv[2:], prog_name="tiny")
""")


@pytest.mark.parametrize("argv", [["--help"], ["--count", "3"]])
def test_deferred_markdown_and_tracebacks_render_as_typer_does(argv: list[str]) -> None:
    """typer's rich help module imported with stand-ins for Markdown and Traceback: markdown help
    and a crash's pretty traceback print exactly what they print without the adjustment."""
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    plain, adjusted = (
        subprocess.run([sys.executable, "-c", CRASHING_APP, v, *argv], capture_output=True, text=True, env=env)
        for v in ("plain", "adjusted")
    )
    assert (adjusted.returncode, adjusted.stdout, adjusted.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert ("things" in plain.stdout) if argv == ["--help"] else ("boom 3" in plain.stderr and plain.returncode == 1)


def test_deferred_classes_are_the_real_ones_once_used() -> None:
    code = textwrap.dedent("""
        import sys
        from rlsim.commands.typer_adjustments import help_without_markdown_or_tracebacks

        help_without_markdown_or_tracebacks()
        import typer.rich_utils as r

        print(sorted(m for m in ("rich.markdown", "rich.traceback", "markdown_it") if m in sys.modules))
        md = r.Markdown("*x*")
        import rich.markdown

        print(type(md) is rich.markdown.Markdown, isinstance(md, r.Markdown))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True True"]
