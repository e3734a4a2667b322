"""Simulator speed: event skipping vs the iteration-level reference, scaling in length, sims/s.

Run: `python benchmarks/bench_simulator.py` (add --quick for a shorter run). Prints:
 (a) the speed ratio of the event-skipping simulator over the iteration-level reference on a
     16K-mean-token workload (target >= 100x), and whether their results agree;
 (b) how simulation time grows from 2K to 32K mean response length (target <= 1.3x);
 (c) simulations per second of the default scenario, 20 steps, one mode (target >= 20/s on 2
     cores): in one process, and on every core with one worker process per core (the way
     `rlsim sweep` and `rlsim plan` run simulations).
Wall-clock timings on a shared machine are noisy: each figure is the best of several repeats.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.run import simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_engine import ReferenceEngine  # noqa: E402  (tests/: the iteration-level oracle)


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


@cache
def _default_sync():
    return resolve(load_scenario(None, ["steps=20"]).with_mode("sync"))


def _simulate_default(_i: int) -> float:
    """One default simulation in a worker process; returns the simulated wall time."""
    return simulate(_default_sync()).recorder.end_s


def throughput(workers: int, sims: int, repeats: int) -> float:
    """Simulations per second with `workers` processes (warmed up: imports and first run excluded)."""
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_simulate_default, range(2 * workers)))
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            results = list(pool.map(_simulate_default, range(sims)))
            best = max(best, sims / (time.perf_counter() - t))
    assert len(set(results)) == 1  # every worker simulated the same run
    return best


def long_workload(mean: int, steps: int, prompts: int):
    # Qwen2.5-7B has 131,072 positions; the default scenario's prompts reach 4,096 tokens
    longest = min(4 * mean, 131072 - 4096)
    return resolve(
        load_scenario(
            "default",
            [
                f"steps={steps}",
                f"algorithm.prompts_per_step={prompts}",
                "pipeline.mode=sync",
                f"workload.response_tokens={{kind: lognormal, mean: {mean}, sigma: 0.9, max: {longest}}}",
                "cluster.gpu=h200",
                "model=qwen2.5-7b",
            ],
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeats = 2 if args.quick else 5

    res = long_workload(16384, steps=2, prompts=8)
    fast_s = best_time(lambda: simulate(res), repeats)
    ref_s = best_time(lambda: simulate(res, engine_cls=ReferenceEngine), 1)
    fast, ref = simulate(res), simulate(res, engine_cls=ReferenceEngine)
    same_tokens = fast.recorder.generated_tokens == ref.recorder.generated_tokens
    rel = abs(fast.recorder.end_s - ref.recorder.end_s) / ref.recorder.end_s
    print(
        f"(a) 16K-mean workload ({fast.recorder.generated_tokens:,} tokens): event-skipping {fast_s * 1e3:.1f} ms,"
        f" reference {ref_s:.2f} s -> {ref_s / fast_s:,.0f}x (target >= 100x);"
        f" tokens identical: {same_tokens}, wall-time difference {rel:.2e}"
    )

    times = {}
    for mean in (2048, 32768):
        r = long_workload(mean, steps=4, prompts=16)
        times[mean] = best_time(lambda r=r: simulate(r), repeats)
    print(
        f"(b) 2K -> 32K mean response: {times[2048] * 1e3:.1f} ms -> {times[32768] * 1e3:.1f} ms,"
        f" growth {times[32768] / times[2048]:.2f}x (target <= 1.3x)"
    )

    default = _default_sync()
    for _ in range(3):  # steady state, as in a sweep: the first runs grow the allocator's arenas
        simulate(default)
    t = best_time(lambda: simulate(default), 2 * repeats)
    modes = ["colocated", "sync", "one_step_off", "async", "streaming"]
    every = [resolve(load_scenario(None, ["steps=20"]).with_mode(m)) for m in modes]
    all_s = best_time(lambda: [simulate(r) for r in every], max(1, repeats // 2))
    cores = os.cpu_count() or 1
    rate = throughput(cores, sims=10 * cores if args.quick else 20 * cores, repeats=max(1, repeats // 2))
    print(
        f"(c) default scenario, 20 steps, sync mode: {t * 1e3:.0f} ms per simulation -> {1 / t:.1f} simulations/s"
        f" in one process; {rate:.1f} simulations/s on {cores} cores (target >= 20/s on 2 cores);"
        f" all five modes in one process: {all_s:.2f} s"
    )


if __name__ == "__main__":
    main()
