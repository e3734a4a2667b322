"""Calibration: torch kernels that measure a device, SciPy fits, and profile files.

A *profile* (`profile.py`) holds the achieved fractions of hardware peak that the performance
models in `rlsim.models` consume. Built-in profiles are derived from datasheets; `calibrate()`
(`run.py`) measures one: a kernel module per family (`gemm.py`, `attention.py`, `memory.py`,
`copies.py`, `collectives.py`, `training.py`, timed by `timer.py`), pure fits (`fit.py`) and
the rows-to-profile step (`assemble.py`). For a model whose module it can build (the validation
trainer's policy), `model_ops.py` times that model's own operators at its shapes and
`model_ops_fit.py` fits them into the profile's `model_ops`. See docs/calibration.md.

Importing this package, `profile`, `fit`, `assemble`, `shapes` or `run` never imports torch:
the kernel modules are imported inside `calibrate()` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlsim.calibration.profile import Profile, load_profile, resolve_profile, save_profile

if TYPE_CHECKING:
    from rlsim.calibration.run import calibrate

__all__ = ["Profile", "calibrate", "load_profile", "resolve_profile", "save_profile"]


def __getattr__(name: str) -> Any:
    # `calibrate` pulls in SciPy; load it on first use so profile readers stay light.
    if name == "calibrate":
        from rlsim.calibration.run import calibrate

        return calibrate
    raise AttributeError(f"module 'rlsim.calibration' has no attribute {name!r}")
