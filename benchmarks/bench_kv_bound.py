"""Where a KV-bound simulation spends its time: engine steps per sequence finish, and their cost.

Run: `python benchmarks/bench_kv_bound.py` (add --quick for fewer repeats). Under KV pressure
an engine's future is still planned in one go (refill.py), but each finish brings a chain of
steps with it: the finisher frees cache, the newest preempted sequence is prefilled again, the
cache fills, the newest running one is preempted, a short span, the next newest ... Each step
is a row of the plan, made by a plain-Python loop (its recurrence, preempt -> room -> span, is
sequential: each span's length depends on the cache the last one left) and committed to the
engine's real state by another (`_commit_steps`). So the cost per finish is the steps per
finish times the cost per step, and the steps per finish grow with the pressure; bench_scale.py
(a) and (c) measure the totals, this prints the anatomy behind them. For each case and mode:
 - CPU time per sequence finish (best of several runs, uninstrumented);
 - per finish: planned refill steps (a plan made in chunks, refill.py's `LazyPlan`, counted as each
   chunk is planned), preemptions, drain spans, span-by-span spans (and how many
   of those ran while new weights were pending: no plan is made then, engine.py `_can_refill`);
 - CPU per planned step, and the shares of planning refills, committing them, planning
   drains, and the rest (one instrumented run; the wrappers add ~1 us a call).
Times are the process's CPU time; on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter

import rlsim.simulator.engine as engine_module
import rlsim.simulator.refill as refill_module
from rlsim.placement import resolve
from rlsim.scenario import Mode, load_scenario
from rlsim.simulator.run import simulate

MODES = [m.value for m in Mode]
CASES = {
    "long-cot (KV-bound)": ("long-cot", ["steps=4"]),
    "default, 32K mean (KV-pressured)": (
        "default",
        ["steps=2", "workload.response_tokens={kind: lognormal, mean: 32768, sigma: 0.9, max: 98304}"],
    ),
    "default, 2K mean": (
        "default",
        ["steps=2", "workload.response_tokens={kind: lognormal, mean: 2048, sigma: 0.9, max: 6144}"],
    ),
}


class _Anatomy:
    """Counts and CPU times of the engine's planning and committing calls, while installed."""

    def __init__(self) -> None:
        self.count: Counter = Counter()
        self.cpu: Counter = Counter()
        self._saved: list[tuple[object, str, object]] = []

    def _timed(self, key: str, fn, tally):
        def wrapper(*args):
            t = time.process_time()
            out = fn(*args)
            self.cpu[key] += time.process_time() - t
            tally(args, out)
            return out

        return wrapper

    def _refill(self, args, r) -> None:
        if r is not None:
            self.count["refill steps"] += len(r.steps)

    def _extended(self, fn):
        """`LazyPlan.extend`: a plan made in chunks (refill.py) plans its later steps here."""

        def wrapper(lazy, r):
            before, t = len(r.steps), time.process_time()
            fn(lazy, r)
            self.cpu["plan refills"] += time.process_time() - t
            self.count["refill steps"] += len(r.steps) - before

        return wrapper

    def _drain(self, args, d) -> None:
        if d is not None:
            self.count["drain spans"] += d.spans

    def _span(self, args, span) -> None:
        engine = args[0]
        self.count["span-by-span"] += 1
        if engine.pending is not None:
            self.count["pending"] += 1

    def __enter__(self) -> _Anatomy:
        E = engine_module.Engine
        patches = [
            (engine_module, "plan_refill", self._timed("plan refills", engine_module.plan_refill, self._refill)),
            (engine_module, "commit_refill", self._timed("commit refills", engine_module.commit_refill, _none)),
            (engine_module, "plan_drain", self._timed("plan drains", engine_module.plan_drain, self._drain)),
            (E, "_plan_span", self._timed("span-by-span", E._plan_span, self._span)),
            (refill_module.LazyPlan, "extend", self._extended(refill_module.LazyPlan.extend)),
        ]
        for owner, name, new in patches:
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, old in reversed(self._saved):
            setattr(owner, name, old)


def _none(args, out) -> None:
    pass


def best_run(res, repeats: int) -> tuple[float, int, int]:
    """(best CPU seconds, sequences trained, preemptions) of simulating `res`."""
    best, samples, preempts = math.inf, 0, 0
    for _ in range(repeats):
        t = time.process_time()
        result = simulate(res)
        best = min(best, time.process_time() - t)
        samples = sum(s.samples for s in result.recorder.steps)
        preempts = result.recorder.preemptions
    return best, samples, preempts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeats = 1 if args.quick else 3
    simulate(resolve(load_scenario("default", ["steps=1"])))  # warm-up: first-call costs out of the first figure
    for label, (name, over) in CASES.items():
        print(f"{label}:")
        for mode in MODES:
            res = resolve(load_scenario(name, over).with_mode(mode))
            total, n, preempts = best_run(res, repeats)
            with _Anatomy() as a:
                t = time.process_time()
                simulate(res)
                instrumented = time.process_time() - t
            c, cpu = a.count, a.cpu
            steps = c["refill steps"]
            shares = ", ".join(f"{k} {v / instrumented:.0%}" for k, v in cpu.items() if k != "span-by-span")
            rest = 1 - sum(v for k, v in cpu.items() if k != "span-by-span") / instrumented
            per_step = (cpu["plan refills"] + cpu["commit refills"]) / steps * 1e6 if steps else 0.0
            print(
                f"  {mode:12s} {total / n * 1e6:5.1f} us/finish | per finish: {steps / n:4.1f} refill steps, "
                f"{preempts / n:4.1f} preemptions, {c['drain spans'] / n:4.2f} drain spans, "
                f"{c['span-by-span'] / n:4.2f} span-by-span ({c['pending'] / n:4.2f} with weights pending) | "
                f"{per_step:4.1f} us per refill step planned and committed; {shares}, rest {rest:.0%}"
            )


if __name__ == "__main__":
    main()
