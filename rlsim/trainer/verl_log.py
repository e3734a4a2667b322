"""The trainer's run as verl-style metrics: one JSON line of verl's keys per RL step.

So that `rlsim fit` can start from a run this repository makes, a finished run's document is
also written the way a verl run's metrics read (`timing_s/*`, `response_length/*`, one object
per step with its "step"; `rlsim.logs.verl_jsonl` reads it). Per step: `timing_s/gen` is the
training pool's wait for the batch (generation and scoring; in the asynchronous run only the
part not overlapped, as verl's one-step-off `wait_prev_gen`), `timing_s/old_log_prob` the
`logprob` state, `timing_s/update_actor` `train` + `optimizer`, `timing_s/update_weights` the
trainer's `sync` state (0 in the synchronous loop, whose generator is the trained model) and
`timing_s/step` the time between step ends. Lengths are the trained samples' response tokens;
the clip ratio is the share that reached `max_new_tokens`. Seconds and tokens. No simulator
imports (the trainer never depends on the simulator).
"""

import json
import os
from collections import defaultdict

_STATES = {
    "idle-waiting-for-data": "timing_s/gen",
    "logprob": "timing_s/old_log_prob",
    "train": "timing_s/update_actor",
    "optimizer": "timing_s/update_actor",
    "sync": "timing_s/update_weights",
}


def verl_rows(doc: dict) -> list[dict]:
    """One dict of verl keys per completed RL step of a trainer document."""
    timing: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for i in doc["intervals"]:
        key = _STATES.get(i["state"])
        if i["pool"] == "training" and key is not None:
            timing[i["step"]][key] += i["end_s"] - i["start_s"]
    lengths: dict[int, list[int]] = defaultdict(list)
    for s in doc["samples"]:
        if not s["dropped"]:
            lengths[s["step"]].append(s["response_tokens"])
    cap = doc["config"]["max_new_tokens"]
    rows, prev_end = [], 0.0
    for step in sorted(doc["steps"], key=lambda s: s["step"]):
        if "timing/step_end_s" not in step or not lengths[step["step"]]:
            continue
        n, ns = step["step"], lengths[step["step"]]
        row = {"step": n, "timing_s/update_weights": 0.0, **timing[n]}
        row["timing_s/step"] = step["timing/step_end_s"] - prev_end
        row["response_length/mean"] = sum(ns) / len(ns)
        row["response_length/max"] = max(ns)
        row["response_length/min"] = min(ns)
        row["response_length/clip_ratio"] = sum(x >= cap for x in ns) / len(ns)
        rows.append(row)
        prev_end = step["timing/step_end_s"]
    return rows


def write_verl_log(path: str, doc: dict) -> None:
    """Write `verl_rows(doc)` to `path` as JSON lines (replacing the file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in verl_rows(doc))
