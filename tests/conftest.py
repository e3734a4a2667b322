"""Shared fixtures."""

from __future__ import annotations

import pytest
from small_scenarios import make

from rlsim.scenario import Scenario


@pytest.fixture
def small() -> Scenario:
    return make()
