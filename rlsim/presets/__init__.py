"""Library presets: each RL library mode (verl, TRL, PipelineRL, AReaL, ...) as a scenario overlay.

`list_presets()`, `get_preset(name)` and `apply_preset(scenario, name)` live in `library.py`;
`compare_presets(scenario, names)` in `compare.py`. The presets themselves are the YAML files
of this folder, one per library mode, each citing its sources (docs/presets.md).
"""

from rlsim.presets.compare import PresetRun, compare_presets
from rlsim.presets.library import (
    ALLOWED_OVERLAY,
    Preset,
    PresetAxes,
    apply_preset,
    deep_merge,
    get_preset,
    list_presets,
    preset_axes,
)

__all__ = [
    "ALLOWED_OVERLAY",
    "Preset",
    "PresetAxes",
    "PresetRun",
    "apply_preset",
    "compare_presets",
    "deep_merge",
    "get_preset",
    "list_presets",
    "preset_axes",
]
