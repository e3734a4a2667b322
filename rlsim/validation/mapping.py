"""A trainer run -> the scenario that describes it to the simulator (docs/validation.md).

`scenario_for_run` is pure: the trainer's JSON document (its config, model and samples) in, a
scenario mapping out, pointing at files that `write_inputs` writes beside it: the policy's
architecture as a Hugging Face config.json (`to_hf_config`), the run's own response lengths (one
per line, resampled by a `kind: file` length distribution) and the measured CPU profile.

Mapping (one "GPU" is one trainer process's cores, the device the profile measured):

| trainer | scenario |
|---|---|
| sync loop (one process, pools in turn) | `mode: colocated`, 1 GPU, free switch (no offload, `reallocate_s: 0`) |
| async loop (generator + trainer process) | `mode: async`, 1 inference + 1 training GPU |
| `queue_depth`, `max_lag`, `sync_every` | `buffer_depth`, `staleness: {reject, max_lag}`, `weight_sync.every_steps` |
| weights loaded between batches, in-process copy | `interrupt: blocking`, `transport: cuda_ipc`, `tensor_host_s: 0` |
| one prefill over all N = B*G prompts, no prefix sharing | `max_batch: N`, `keep_groups_together: false` |
| N / minibatches rows per forward, padded to the step's longest | `padding: batch_longest`, one micro-batch |
| `recompute_logprobs`, `kl_coef > 0` | `recompute_old_logprobs`, `reference_model` |
| verifier time per batch (serial) | `cpu_verifier`, `seconds_per_sample` = batch time / N, 1 worker |
| the trainer's host work per step (records, metrics) | `training.step_overhead_s` = its mean |
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_NAME = "rlsim-tiny-gpt"  # the catalog key the policy's config.json resolves to


@dataclass(frozen=True)
class RunFiles:
    """Paths a trainer scenario refers to: relative to the scenario's folder (profile: any)."""

    model_config: str
    lengths: str
    profile: str


def extra_steps(doc: Mapping[str, Any]) -> int:
    """Steps simulated beyond the trainer's, so both sides keep generating ahead to the end.

    The asynchronous generator keeps filling its `queue_depth` slots until the trainer stops; a
    simulation of exactly `steps` steps would release no batch past the last one and leave its
    engine idle there instead.
    """
    return int(doc["config"].get("queue_depth", 0)) if doc["mode"] == "async" else 0


def prompt_tokens(doc: Mapping[str, Any]) -> int:
    """Prompt length of the run (every prompt of the addition task has the same length)."""
    samples = doc.get("samples") or []
    if samples:
        return int(samples[0]["prompt_tokens"])
    return 2 * int(doc["config"]["n_digits"]) + 2


def _pipeline(doc: Mapping[str, Any], n: int, micro_batch_tokens: int) -> dict[str, Any]:
    cfg = doc["config"]
    host_s = float(doc.get("summary", {}).get("timing/host_mean_s", 0.0))
    inference = {"tp": 1, "max_batch": n, "keep_groups_together": False}
    training = {
        "tp": 1,
        "pp": 1,
        "micro_batch_tokens": micro_batch_tokens,
        "activation_recompute": False,
        "padding": "batch_longest",
        "step_overhead_s": host_s,
    }
    if doc["mode"] == "sync":
        # One process is both pools: the simulator's colocated mode with nothing to move.
        colocation = {"offload_optimizer": False, "offload_engine_weights": False, "reallocate_s": 0.0}
        return {
            "mode": "colocated",
            "inference": inference,
            "training": training,
            "colocation": colocation,
            "weight_sync": {"tensor_host_s": 0.0},  # nothing moves: no engine weight loader runs
        }
    return {
        "mode": "async",
        "inference": {**inference, "gpus": 1},
        "training": {**training, "gpus": 1},
        "buffer_depth": int(cfg["queue_depth"]),
        "staleness": {"policy": "reject", "max_lag": int(cfg["max_lag"])},
        # an in-process copy of the state dict under a lock: the profile's copy bandwidth, and no
        # serving engine's per-tensor weight loader (weight_sync.tensor_host_s) runs
        "weight_sync": {
            "transport": "cuda_ipc",
            "every_steps": int(cfg["sync_every"]),
            "interrupt": "blocking",
            "tensor_host_s": 0.0,
        },
    }


def scenario_for_run(doc: Mapping[str, Any], files: RunFiles) -> dict[str, Any]:
    """The scenario mapping that describes the trainer run `doc` (see the module table)."""
    if doc.get("mode") not in ("sync", "async"):
        raise ValueError(f"trainer document mode {doc.get('mode')!r}: expected 'sync' or 'async'")
    cfg = doc["config"]
    b, g, mb = int(cfg["prompts_per_step"]), int(cfg["group_size"]), int(cfg["minibatches"])
    n, prompt = b * g, prompt_tokens(doc)
    # a minibatch is one forward: its rows padded to at most prompt + max_new_tokens each
    micro = n // mb * (prompt + int(cfg["max_new_tokens"]))
    score_s = float(doc.get("summary", {}).get("timing/score_mean_s", 0.0))
    return {
        "name": f"trainer-{doc['mode']}",
        "model": {"config_json": files.model_config},
        "cluster": {"gpu": "cpu", "nodes": 1, "gpus_per_node": 1 if doc["mode"] == "sync" else 2},
        "profile": files.profile,
        "algorithm": {
            "kind": "grpo",
            "prompts_per_step": b,
            "group_size": g,
            "minibatches": mb,
            "reference_model": float(cfg["kl_coef"]) > 0.0,
            "recompute_old_logprobs": bool(cfg["recompute_logprobs"]),
        },
        "workload": {
            "prompt_tokens": {"kind": "constant", "value": prompt},
            "response_tokens": {"kind": "file", "path": files.lengths, "max": int(cfg["max_new_tokens"])},
            "reward": {"kind": "cpu_verifier", "seconds_per_sample": score_s / n, "workers": 1},
        },
        "pipeline": _pipeline(doc, n, micro),
        "steps": int(cfg["steps"]) + extra_steps(doc),
        "seed": int(cfg["seed"]),
    }


def write_inputs(folder: Path, doc: Mapping[str, Any], profile_path: Path) -> RunFiles:
    """Write the policy's config.json, the run's response lengths and a copy of the profile.

    File names carry the mode, so a sync and an async run can share one folder.
    """
    folder.mkdir(parents=True, exist_ok=True)
    mode = doc["mode"]
    # The scenario resolves config_json and length files against its own folder, but a profile
    # path against the working directory (rlsim.placement): give the profile as absolute.
    profile = str((folder / f"{mode}-profile.json").resolve())
    files = RunFiles(f"{mode}-config.json", f"{mode}-lengths.txt", profile)
    config = {"_name_or_path": MODEL_NAME, **doc["model"]}
    (folder / files.model_config).write_text(json.dumps(config, indent=2) + "\n")
    lengths = [str(int(s["response_tokens"])) for s in doc["samples"]]  # dropped ones were made too
    (folder / files.lengths).write_text("\n".join(lengths) + "\n")
    if Path(profile_path).resolve() != Path(profile):
        shutil.copyfile(profile_path, profile)
    return files
