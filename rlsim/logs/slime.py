"""slime / miles train.log: `perf N: {...}` lines, plus per-sample rollout_N.jsonl lengths.

slime logs a Python dict per rollout N twice, once from the rollout side and once from the
trainer: `logger.info(f"perf {rollout_id}: {log_dict}")` (slime/ray/rollout.py and
slime/utils/train_metric_utils.py). Keys read: `perf/rollout_time` (generation),
`perf/log_probs_time`, `perf/ref_log_probs_time`, `perf/actor_train_time` (update),
`perf/update_weights_time`, `perf/step_time` (train_wait_time + train_time) and
`rollout/response_len/{mean,max,min}`, `rollout/truncated_ratio`. When files rollout_<N>.jsonl sit
beside the log, each line is one sample whose `response_length` (or `total_length` minus
`prompt_length`) gives the per-sample lengths. A perf line whose dict does not parse (a cut-off
line included) is an error naming the line.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, number, require_any

FORMAT = "slime"
KEYS = {
    "perf/rollout_time": "generation_s",
    "perf/log_probs_time": "old_log_prob_s",
    "perf/ref_log_probs_time": "ref_s",
    "perf/actor_train_time": "update_actor_s",
    "perf/update_weights_time": "weight_sync_s",
    "perf/step_time": "step_s",
    "rollout/response_len/mean": "response_mean",
    "rollout/response_len/max": "response_max",
    "rollout/response_len/min": "response_min",
    "rollout/truncated_ratio": "response_clip_ratio",
}
_PERF = re.compile(r"perf (\d+): (\{.*)$")


def _perf_rows(path: str) -> list:
    rows = []
    for lineno, line in enumerate(Path(path).read_text(errors="replace").splitlines(), start=1):
        m = _PERF.search(line)
        if m is None:
            continue
        try:
            row = ast.literal_eval(m.group(2).strip())
        except (ValueError, SyntaxError):
            raise log_error(path, lineno, "the perf dict does not parse (a cut-off line?)") from None
        if not isinstance(row, dict):
            raise log_error(path, lineno, "perf N: must be followed by a dict")
        rows.append((lineno, int(m.group(1)), row))
    return rows


def _sample_length(path: Path, lineno: int, sample: dict) -> int:
    if "response_length" in sample:
        return int(number(str(path), lineno, "response_length", sample["response_length"]))
    if "total_length" in sample and "prompt_length" in sample:
        total = number(str(path), lineno, "total_length", sample["total_length"])
        return int(total - number(str(path), lineno, "prompt_length", sample["prompt_length"]))
    raise log_error(str(path), lineno, "a sample needs 'response_length' (or 'total_length' and 'prompt_length')")


def _rollout_lengths(file: Path) -> tuple[int, ...]:
    out = []
    for lineno, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as exc:
            raise log_error(str(file), lineno, f"not a JSON object ({exc.msg}; truncated?)") from None
        if not isinstance(sample, dict):
            raise log_error(str(file), lineno, "expected one JSON object per sample")
        out.append(_sample_length(file, lineno, sample))
    return tuple(out)


def read(path: str) -> RunLog:
    steps = build_steps(path, _perf_rows(path), KEYS)
    folder = Path(path).parent
    with_lengths = []
    for s in steps:
        file = folder / f"rollout_{s.step}.jsonl"
        with_lengths.append(replace(s, response_lengths=_rollout_lengths(file)) if file.exists() else s)
    return require_any(RunLog(path, FORMAT, tuple(with_lengths)), "perf N: {'perf/rollout_time': ...}")
