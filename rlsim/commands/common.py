"""What every command shares: the consoles, the one-line-error boundary, signals, output checks.

Commands import these from here (never from `rlsim.cli`, which only wires the commands into
the app), so the CLI has one way through it: `cli.py` registers `commands/*.py`, and each
command module uses `commands.common` and `commands.options`. Domain errors (ScenarioError),
pydantic ValidationErrors and failed reads or writes (OSError) become one line per field with
exit code 2, never a traceback, with control characters escaped
(`rlsim.errors_format.printable`). `stop_on_signals` does the same for SIGINT/SIGTERM: one line
saying what stopped and what was kept, exit 130/143.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from rlsim.errors import ScenarioError

console = Console()
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _error_line(text: str) -> None:
    from rlsim.errors_format import printable

    err_console.print(f"error: {printable(text)}", markup=False, highlight=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input -> one line per problem on stderr, exit code 2, no traceback."""
    from pydantic import ValidationError  # here, not at the top: `rlsim --help` need not load pydantic

    from rlsim.errors_format import validation_lines

    try:
        yield
    except ScenarioError as exc:
        _error_line(str(exc))
        raise typer.Exit(2) from None
    except ValidationError as exc:
        for line in validation_lines(exc):
            _error_line(line)
        raise typer.Exit(2) from None
    except OSError as exc:  # a write the up-front checks could not foresee: a full disk, /dev/full
        where = f" '{exc.filename}'" if exc.filename else ""
        _error_line(f"cannot write or read{where}: {exc.strerror or exc}")
        raise typer.Exit(2) from None


@contextmanager
def stop_on_signals(stopped: Callable[[], str]) -> Iterator[None]:
    """SIGINT/SIGTERM in the block -> 'interrupted by SIGTERM: {stopped()}' on stderr, exit 128+N.

    The block's own cleanup (killing workers) runs first, as the signal arrives as an exception.
    """
    from rlsim.interrupts import on_signals

    with on_signals() as received:
        try:
            yield
        except KeyboardInterrupt:
            err_console.print(f"interrupted by {received.name}: {stopped()}", markup=False, highlight=False)
            raise typer.Exit(received.exit_code) from None


def check_output(path: str | None, force: bool, field: str, creates_folder: bool = False) -> None:
    """Refuse to overwrite an existing file unless --force, or to write where it cannot."""
    from rlsim.outputs import check_output as check

    check(path, force, field, creates_folder)


def check_outputs(outputs: dict[str, str | None], force: bool) -> None:
    """Each output writable, none overwritten without --force, no two on one file or on stdout."""
    from rlsim.outputs import check_outputs as check

    check(outputs, force)
