"""NeMo RL metrics as JSON: `{"timing/train/generation": {"1": 84.2, "2": 83.9}, ...}`.

NeMo RL's GRPO loop logs its timer under the prefix `timing/train`
(`logger.log_metrics(timing_metrics, step + 1, prefix="timing/train")` in
nemo_rl/algorithms/grpo.py) and its test suites dump those scalars as one JSON object of
{metric: {step: value}} (the `$JSON_METRICS` file their checks read as
`data["timing/train/total_step_time"]["5"]`). Keys read:
`timing/train/{generation, policy_and_reference_logprobs, policy_training, weight_sync,
total_step_time}`; `timing/train/prepare_for_generation/total` (the refit of a colocated run)
stands for the weight update when `weight_sync` is absent; `train/mean_gen_tokens_per_sample`
is the mean response length. Malformed JSON is an error naming the line; a metric that is not a
{step: value} mapping is an error naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, number, require_any

FORMAT = "nemo-rl-json"
KEYS = {
    "timing/train/generation": "generation_s",
    "timing/train/policy_and_reference_logprobs": "old_log_prob_s",
    "timing/train/policy_training": "update_actor_s",
    "timing/train/weight_sync": "weight_sync_s",
    "timing/train/total_step_time": "step_s",
    "train/mean_gen_tokens_per_sample": "response_mean",
}
REFIT = "timing/train/prepare_for_generation/total"


def read(path: str) -> RunLog:
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise log_error(path, exc.lineno, f"not valid JSON ({exc.msg}; truncated?)") from None
    if not isinstance(doc, dict):
        raise log_error(path, None, "expected a JSON object of {metric: {step: value}}")
    keys = dict(KEYS)
    if "timing/train/weight_sync" not in doc:
        keys[REFIT] = "weight_sync_s"
    rows = []
    for key in keys:
        series = doc.get(key)
        if series is None:
            continue
        if not isinstance(series, dict):
            raise log_error(path, None, f"key '{key}' must map step -> value, got {type(series).__name__}")
        for step, value in series.items():
            where = f"key '{key}' step {step!r}"
            rows.append((where, int(number(path, where, "step", step)), {key: value}))
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, keys)), ", ".join(KEYS))
