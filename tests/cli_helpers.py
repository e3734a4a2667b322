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


def check_set_override(path, scenario, change: str, field: str | None) -> None:
    """Write `scenario` to `path`, simulate it (sync, one step) with `--set change`.

    `field` None: the override is valid and the run succeeds. Otherwise the run fails with one
    line that names `field`.
    """
    import yaml

    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json", exclude={"base_dir"})))
    args = ["simulate", str(path), "--mode", "sync", "--steps", "1", "--set", change]
    if field is None:
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        return
    line = one_line_error(args)
    assert field in line, line
