"""The profile a validation run simulates with: measured now, or given and completed.

Without `--profile`, a quick CPU calibration with one intra-op thread (like each trainer pool,
and so timed by thread CPU time) at the policy's shapes, which also times the policy's own
operators (`rlsim.calibration.model_ops`: its decode iteration, prefill, training pass,
optimizer step and weight update, with its real module). With `--profile`, that measured CPU
profile, plus the policy's operators timed now when it lacks them. The policy is described by
the config.json the scenarios use (`write_policy_config`), so its operators are filed under the
same model key the simulator looks up. torch is imported inside the functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlsim.errors import ScenarioError
from rlsim.validation.mapping import MODEL_NAME

# (label, done, total): what is running and how far along it is; total 0 = unknown.
Progress = Callable[[str, int, int], None]


def check_profile(path: str) -> dict[str, Any]:
    """The fitted fields of a measured CPU profile (ScenarioError on '--profile' otherwise)."""
    from rlsim.calibration import load_profile

    profile = load_profile(path, field="--profile")
    if profile.device != "cpu" or profile.source != "measured":
        raise ScenarioError(
            "--profile",
            f"the trainer runs on the CPU: give a profile measured with 'rlsim calibrate --device "
            f"cpu', not {profile.source} device '{profile.device}'",
        )
    return profile.model_dump(mode="json", exclude={"measurements"})


def write_policy_config(cfg: Any, folder: Path) -> Path:
    """The trainer's policy as a config.json (what the scenarios and the model ops describe)."""
    from rlsim.trainer.learner import build_policy
    from rlsim.trainer.model import to_hf_config
    from rlsim.trainer.task import Addition

    path = folder / "policy-config.json"
    config = to_hf_config(build_policy(cfg, Addition(n_digits=cfg.n_digits)).config)
    path.write_text(json.dumps({"_name_or_path": MODEL_NAME, **config}, indent=2) + "\n")
    return path


@contextmanager
def _one_thread() -> Iterator[None]:
    """One torch intra-op thread, like each trainer pool (and thread-CPU-time timing)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _reporter(progress: Progress | None) -> Callable[[int, int, str], None]:
    def report(done: int, total: int, label: str) -> None:
        if progress:
            progress(f"calibrating: {label}", done, total)

    return report


def calibrate_cpu(folder: Path, progress: Progress | None, policy: Path | None = None) -> Path:
    """A quick CPU calibration with one intra-op thread at the policy's shape, saved in folder.

    With `policy` (its config.json) the sweep uses its shapes and times its own operators.
    """
    from rlsim.calibration import calibrate, save_profile

    with _one_thread():
        profile = calibrate("cpu", model=str(policy) if policy else None, quick=True, progress=_reporter(progress))
    path = folder / "profile.json"
    save_profile(profile, path)
    return path


def with_policy_ops(path: Path, policy: Path, folder: Path, progress: Progress | None) -> Path:
    """A profile that holds the policy's operators: `path` itself, or a copy with them timed now."""
    from rlsim.calibration import load_profile, save_profile
    from rlsim.calibration.run import add_model_ops
    from rlsim.catalog import llm_from_hf_config

    profile = load_profile(path, field="--profile")
    if profile.ops_for(llm_from_hf_config(policy)) is not None:
        return path
    with _one_thread():
        profile = add_model_ops(profile, str(policy), quick=True, progress=_reporter(progress))
    out = folder / "profile-with-policy-ops.json"  # never over the given file
    save_profile(profile, out)
    return out
