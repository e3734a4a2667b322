"""The one-way data flow, enforced on the source: who may import what."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rlsim"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module)
    return roots


def files(folder: str) -> list[Path]:
    return sorted((PKG / folder).glob("*.py"))


@pytest.mark.parametrize("path", files("models"), ids=lambda p: p.name)
def test_models_are_pure(path: Path) -> None:
    """Performance models never know about SimPy, torch or rendering."""
    banned = {r for r in imported_roots(path) if r.split(".")[0] in {"simpy", "torch", "rich", "matplotlib"}}
    banned |= {r for r in imported_roots(path) if r.startswith(("rlsim.simulator", "rlsim.metrics", "rlsim.cli"))}
    assert not banned


@pytest.mark.parametrize("path", files("simulator"), ids=lambda p: p.name)
def test_simulator_never_formats_output(path: Path) -> None:
    roots = imported_roots(path)
    assert not {r for r in roots if r.split(".")[0] in {"rich", "matplotlib", "torch", "typer"}}
    assert not {r for r in roots if r.startswith(("rlsim.metrics", "rlsim.report", "rlsim.cli", "rlsim.planner"))}


@pytest.mark.parametrize("path", files("trainer"), ids=lambda p: p.name)
def test_trainer_never_imports_the_simulator(path: Path) -> None:
    """The real trainer validates the simulator; it shares only the neutral state names."""
    assert not {r for r in imported_roots(path) if r.startswith(("rlsim.simulator", "rlsim.metrics", "rlsim.planner"))}


def private_imports(path: Path) -> set[str]:
    """'module.name' for every `from rlsim... import _name` (another module's private helper)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlsim"):
            out |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")  # dunders are public
            }
    return out


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    assert not private_imports(path)


def test_import_rlsim_and_the_cli_stay_light() -> None:
    """`import rlsim` loads no dependency; the API and the CLI load torch and matplotlib only on use."""
    import subprocess
    import sys

    code = (
        "import sys, rlsim; assert 'pydantic' not in sys.modules; import rlsim.api, rlsim.cli; "
        "print(sorted(m for m in ('torch', 'matplotlib', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
