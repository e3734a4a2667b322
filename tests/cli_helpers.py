"""Running the CLI in tests: the one-line-error contract in one place."""

from __future__ import annotations

from typer.testing import CliRunner

from rlsim.cli import app

runner = CliRunner()


def one_line_error(args: list[str]) -> str:
    """Run `rlsim args`; assert exit code 2, no traceback and exactly one line; return that line."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    # warnings are their own lines (one each on stderr, e.g. a default max beyond the model's context)
    lines = [ln for ln in res.output.splitlines() if ln.strip() and not ln.startswith("warning: ")]
    assert len(lines) == 1, res.output
    return lines[0]
