"""The trainer's timing trace, recorded in the simulator's state names, and its JSON file.

A `Timeline` belongs to one process. It records intervals (pool, state, start_s, end_s, step,
version) in seconds since the run started, per-sample records and per-step metrics. The
asynchronous run has one Timeline per process; all share the parent's clock (its `time.time()` at
start, exchanged once; intervals then use each process's monotonic `perf_counter`). `merge` and
`summarize` build the run's document; `write_json` replaces the file atomically, so a reader (or a
Ctrl-C) never sees half a file. Logging follows nanochat's DummyWandb: a logger object that may do
nothing, never `if wandb:` branches.
"""

import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager

from rlsim.outputs import finite
from rlsim.states import CORE_STATES, IDLE_STATES

SCHEMA = "rlsim.trainer.timeline/1"
POOLS = ("inference", "training")
STATES = CORE_STATES  # the simulator's own names, so measured and predicted phases line up


class NullLogger:
    """Accepts metrics and drops them (nanochat's DummyWandb)."""

    def log(self, metrics: dict, step: int) -> None:
        pass


class PrintLogger:
    """One line per step on stderr: the step, then the chosen metrics."""

    def __init__(self, keys: tuple[str, ...] = ("rollout/reward_mean", "train/loss")) -> None:
        self.keys = keys

    def log(self, metrics: dict, step: int) -> None:
        shown = " ".join(f"{k}={metrics[k]:.4g}" for k in self.keys if k in metrics)
        sys.stderr.write(f"step {step:4d} {shown}\n")


class JsonlLogger:
    """Appends one JSON line per step to `path`, so another process can follow a run live."""

    def __init__(self, path: str) -> None:
        self.path = path

    def log(self, metrics: dict, step: int) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")


class Timeline:
    """Intervals, samples and step metrics of one process, on the run's common clock."""

    def __init__(self, run_start_wall_s: float | None = None, logger=None) -> None:
        self._perf0 = time.perf_counter()
        # seconds between the run's start (possibly in another process) and this constructor
        self._offset_s = 0.0 if run_start_wall_s is None else time.time() - run_start_wall_s
        self.logger = logger or NullLogger()
        self.intervals: list[dict] = []
        self.samples: list[dict] = []
        self.steps: list[dict] = []

    def now(self) -> float:
        """Seconds since the run started."""
        return self._offset_s + time.perf_counter() - self._perf0

    def add(self, pool, state, start_s, end_s, step, version, tokens=None) -> None:
        assert pool in POOLS, f"unknown pool {pool!r}"
        assert state in STATES, f"unknown state {state!r}"
        interval = {"pool": pool, "state": state, "start_s": start_s, "end_s": end_s}
        interval |= {"step": step, "version": version, "tokens": tokens}
        self.intervals.append(interval)

    @contextmanager
    def phase(self, pool: str, state: str, step: int, version: int, tokens: int | None = None):
        """Record the `with` body as one interval (also when it raises)."""
        start_s = self.now()
        try:
            yield
        finally:
            self.add(pool, state, start_s, self.now(), step, version, tokens)

    def sample(self, **record) -> None:
        self.samples.append(record)

    def log_step(self, step: int, metrics: dict) -> None:
        self.steps.append({"step": step, **metrics})
        self.logger.log(metrics, step=step)

    def to_dict(self) -> dict:
        return {"intervals": self.intervals, "samples": self.samples, "steps": self.steps}


def merge(parts: list[dict]) -> dict:
    """Join the `to_dict()` of several processes: intervals by start time, steps by step."""
    intervals = sorted((i for p in parts for i in p["intervals"]), key=lambda i: i["start_s"])
    samples = [s for p in parts for s in p["samples"]]
    steps = sorted((s for p in parts for s in p["steps"]), key=lambda s: s["step"])
    return {"intervals": intervals, "samples": samples, "steps": steps}


def summarize(run: dict) -> dict:
    """Run-level metrics (`timing/...`, `rollout/...`) from a merged document; see docs."""
    out: dict[str, float] = {}
    intervals, steps, samples = run["intervals"], run["steps"], run["samples"]
    if intervals:
        t0 = min(i["start_s"] for i in intervals)
        out["timing/wall_s"] = max(i["end_s"] for i in intervals) - t0
    by_state = defaultdict(list)
    for i in intervals:
        by_state[(i["pool"], i["state"])].append(i["end_s"] - i["start_s"])
    for (pool, state), durations in sorted(by_state.items()):
        out[f"timing/{pool}/{state}_total_s"] = sum(durations)
        out[f"timing/{pool}/{state}_mean_s"] = sum(durations) / len(durations)
        out[f"timing/{pool}/{state}_count"] = len(durations)
    for pool in POOLS:
        busy = sum(sum(d) for (p, s), d in by_state.items() if p == pool and s not in IDLE_STATES)
        if intervals:
            out[f"timing/{pool}/busy_fraction"] = busy / max(out["timing/wall_s"], 1e-12)
    ends = [s["timing/step_end_s"] for s in steps if "timing/step_end_s" in s]
    if len(ends) >= 2:  # steady state: the first step also pays for start-up
        out["timing/step_s"] = (ends[-1] - ends[0]) / (len(ends) - 1)
    scores = [s["timing/score_s"] for s in steps if "timing/score_s" in s]
    if scores:
        out["timing/score_mean_s"] = sum(scores) / len(scores)
    host = [s["timing/host_s"] for s in steps if "timing/host_s" in s]
    if host:
        out["timing/host_mean_s"] = sum(host) / len(host)
    rewards = [s["rollout/reward_mean"] for s in steps if "rollout/reward_mean" in s]
    if rewards:
        k = max(1, len(rewards) // 10)
        out["rollout/reward_start"] = sum(rewards[:k]) / k
        out["rollout/reward_end"] = sum(rewards[-k:]) / k
    trained = [s for s in samples if not s["dropped"]]
    dropped = [s for s in samples if s["dropped"]]
    out["rollout/samples_trained"] = len(trained)
    out["rollout/samples_dropped"] = len(dropped)
    out["rollout/tokens_dropped"] = sum(s["response_tokens"] for s in dropped)  # generated, wasted
    if trained:
        lags = [s["version_trained"] - s["version_started"] for s in trained]
        out["rollout/lag_mean"] = sum(lags) / len(lags)
        out["rollout/lag_max"] = max(lags)
        out["rollout/response_tokens_mean"] = sum(s["response_tokens"] for s in trained) / len(trained)
        out["rollout/response_tokens_max"] = max(s["response_tokens"] for s in trained)
    return out


def build_document(mode: str, config: dict, model: dict, parts: list[dict], **extra) -> dict:
    """The run's JSON document: what ran, where, its merged timeline and its summary.

    `extra` holds status ("completed", "interrupted" or "failed"), error (a message or None),
    and run-level metrics that only the loop knows (merged into `summary`).
    """
    run = merge(parts)
    summary = summarize(run) | extra.pop("summary", {})
    env = {"python": platform.python_version(), "platform": platform.platform()}
    env |= {"cpu_count": os.cpu_count(), **extra.pop("env", {})}
    head = {"schema": SCHEMA, "mode": mode, "config": config, "model": model, "env": env}
    return head | {"status": "completed", "error": None} | extra | {"summary": summary} | run


def write_json(path: str, doc: dict) -> None:
    """Write `doc` to `path` atomically: a temporary file in the same folder, then os.replace."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".timeline-", suffix=".json.tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the mode any other file gets
        with os.fdopen(fd, "w") as f:
            json.dump(finite(doc), f, allow_nan=False)  # strict JSON: NaN and infinities as null
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
