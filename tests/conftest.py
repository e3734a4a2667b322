"""Shared fixtures."""

from __future__ import annotations

import os

import pytest
from small_scenarios import make

from rlsim.scenario import Scenario

# pytest-xdist's workers start with COLUMNS=80 in their environment; a rich Console built while it
# is set keeps that width for good, so the CLI tests' CliRunner(env={"COLUMNS": ...}) would not
# reach it. Without it the console reads the width at each use, as in a serial run.
os.environ.pop("COLUMNS", None)


@pytest.fixture
def small() -> Scenario:
    return make()
