"""The code style the project holds itself to: `ruff check` and `ruff format --check` pass."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff")


@pytest.mark.skipif(RUFF is None, reason="ruff is in the dev extra")
@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_passes(args: list[str]) -> None:
    res = subprocess.run([RUFF, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
