"""Builders for small, fast scenarios shared by the tests."""

from __future__ import annotations

import copy
from typing import Any

from rlsim.scenario import Scenario, scenario_from_dict

SMALL: dict[str, Any] = {
    "name": "small",
    "model": "qwen2.5-0.5b",
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "algorithm": {"prompts_per_step": 4, "group_size": 4, "minibatches": 2},
    "workload": {
        "prompt_tokens": {"kind": "constant", "value": 64},
        "response_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.8, "max": 1024},
        "reward": {"kind": "none"},
    },
    "pipeline": {
        "mode": "sync",
        "inference": {"gpus": 2, "tp": 1, "max_batch": 16},
        "training": {"gpus": 2, "micro_batch_tokens": 4096},
    },
    "steps": 3,
    "seed": 0,
}


def deep_merge(base: dict, over: dict) -> dict:
    """Nested merge; a mapping with a `kind` (a variant) replaces the old one whole."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        nested = isinstance(v, dict) and isinstance(out.get(k), dict) and "kind" not in v
        out[k] = deep_merge(out[k], v) if nested else v
    return out


def make(over: dict | None = None, overrides: list[str] = ()) -> Scenario:
    """A small scenario with nested `over` merged in and dotted overrides applied."""
    return scenario_from_dict(deep_merge(SMALL, over or {}), list(overrides))
