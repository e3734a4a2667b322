"""rlsim: a GPU cost and idle-time simulator and planner for RL training of LLMs.

Data flows one way: scenario -> performance models (+ calibration profile, catalog)
-> simulator -> recorder -> metrics -> cost -> outputs.

The Python API (`rlsim.api`) is importable from here: `rlsim.simulate`, `rlsim.load_scenario`,
`rlsim.plan`. They are loaded on first use, so `import rlsim` stays light (no pydantic, SimPy,
numpy or rich until then).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Results", "load_scenario", "plan", "simulate", "__version__"]

_API = {"simulate", "load_scenario", "plan", "Results"}


def __getattr__(name: str):
    if name in _API:
        from rlsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlsim' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
