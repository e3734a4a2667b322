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
