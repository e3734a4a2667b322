"""Start from a run's log, predict the other architecture: the verl one-step-off check, scripted.

Run: `python benchmarks/bench_fit_osp.py` (from the repository root; ~1-2 min). For each library
pair of the published verl one-step-off table (FSDP2, Megatron; `rlsim validate --published
--list`), it does what docs/fitting.md "Checked on the published verl one-step-off rows" says a
verl user would do:

1. write the colocated-sync row's published phases as verl console lines (`timing_s/gen`,
   `timing_s/generate_sequences`, `timing_s/old_log_prob`, `timing_s/update_actor`,
   `timing_s/step`; six identical steps, the first skipped by the fit as start-up);
2. `rlsim fit` them on the row's own scenario (the engines' speed from `generate_sequences`, which
   verl averages over the rollout ranks, against the simulated mean engine; the colocated switch
   from what `gen`, the wait for the slowest engine, holds beyond the simulated slowest engine);
3. simulate the fitted scenario as the one-step-off script ran it (4 generation and 12 training
   GPUs, nccl broadcast, the actor not offloaded; for Megatron the script's group of 12), and
   print the predicted step against the one-step-off row's published step.

Issue 13's target: |error| <= 10% on step time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsim.fit.run import fit_log, write_fit  # noqa: E402
from rlsim.placement import resolve  # noqa: E402
from rlsim.scenario import load_scenario  # noqa: E402
from rlsim.simulator.run import simulate  # noqa: E402
from rlsim.validation.phases import phase_times, simulated_timeline  # noqa: E402
from rlsim.validation.published import published_rows  # noqa: E402
from rlsim.validation.published_run import predicted_phases  # noqa: E402

PAIRS = {
    "fsdp2": ("verl-osp-fsdp2-sync", "verl-osp-fsdp2-async"),
    "megatron": ("verl-osp-megatron-sync", "verl-osp-megatron-async"),
}
# published phase -> verl key, as the one-step-off README's columns are verl's timers
KEYS = {
    "gen_s": "timing_s/gen",
    "generate_s": "timing_s/generate_sequences",
    "update_s": "timing_s/update_actor",
    "step_s": "timing_s/step",
}
ONE_STEP_OFF = [
    "pipeline.mode=one_step_off",
    "pipeline.inference.gpus=4",
    "pipeline.training.gpus=12",
    "pipeline.weight_sync.transport=nccl_broadcast",
    "pipeline.training.param_offload=false",
    "steps=6",
]


def console_log(published: dict[str, float], steps: int = 6) -> str:
    """verl console lines of `steps` identical steps holding the published phases."""
    pairs = {KEYS[k]: v for k, v in published.items() if k in KEYS}
    if "logprob_s" in published:  # the README's old_log_prob column (no reference model)
        pairs["timing_s/old_log_prob"] = published["logprob_s"]
    body = " - ".join(f"{k}:{v:.3f}" for k, v in pairs.items())
    return "".join(f"step:{i} - {body}\n" for i in range(1, steps + 1))


def check(name: str, tmp: Path) -> tuple[dict[str, float], dict[str, float]]:
    rows = {r.id: r for r in published_rows()}
    sync, osp = rows[PAIRS[name][0]], rows[PAIRS[name][1]]
    base = tmp / f"{sync.id}.yaml"
    base.write_text(yaml.safe_dump(sync.scenario))
    log = tmp / f"{sync.id}.log"
    log.write_text(console_log(sync.published))
    fitted = tmp / f"{sync.id}-fitted.yaml"
    write_fit(fit_log(str(log), str(base), str(fitted), fmt="verl-console"), str(fitted))
    overrides = list(ONE_STEP_OFF)
    group = osp.scenario["algorithm"]["group_size"]
    if group != sync.scenario["algorithm"]["group_size"]:
        overrides.append(f"algorithm.group_size={group}")
    sc = load_scenario(str(fitted), overrides)
    result = simulate(resolve(sc))
    phases = predicted_phases(phase_times(simulated_timeline(result.recorder)), sc.pipeline.mode, 0.0)
    return phases, osp.published


def main() -> None:
    print("one-step-off predicted from the fitted colocated run (predicted / published s, error)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in PAIRS:
            predicted, published = check(name, Path(tmp))
            cells = [f"{k} {predicted[k]:.0f}/{v:.0f} ({predicted[k] / v - 1:+.0%})" for k, v in published.items()]
            print(f"{name:9s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
