"""Simulator scale: cost per sequence finish in every mode and regime, and its growth.

Run: `python benchmarks/bench_scale.py` (add --quick for fewer repeats and sizes). Prints:
 (a) wall time per sequence finish (the run's time over the samples it trained) in every mode,
     on the default scenario scaled to 1,024 x 16 prompts per step (slot-bound queues) and on
     long-cot (KV-bound); target <= 3 us;
 (b) the growth exponent of run time over sequences per step, 512 -> 65,536 (the default
     scenario, 8 completions per prompt), stopping after a size that took more than
     --max-seconds; target <= 1.1;
 (c) the 2K -> 32K mean-response-length time ratio in every mode on a KV-pressured scenario
     (the default scenario, 512 sequences per step: at 32K the cache holds a fraction of the
     batch); target <= 1.3x;
 (d) peak memory per simulated sequence (resident set growth of a fresh process over one
     simulation of 2 x 65,536 sequences, async mode); target <= 1 KB.
Times are the simulating process's CPU time (single-threaded, so its wall time on an idle
machine); on a shared machine even that is noisy, so each figure is the best of several repeats.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time

from rlsim.placement import resolve
from rlsim.scenario import Mode, load_scenario
from rlsim.simulator.run import simulate

MODES = [m.value for m in Mode]


def best_run(res, repeats: int) -> tuple[float, int]:
    """(best CPU seconds, sequences trained) of simulating `res`."""
    best, samples = math.inf, 0
    for _ in range(repeats):
        t = time.process_time()
        result = simulate(res)
        best = min(best, time.process_time() - t)
        samples = sum(s.samples for s in result.recorder.steps)
    return best, samples


def scenario(name: str, mode: str, overrides: list[str]):
    return resolve(load_scenario(name, overrides).with_mode(mode))


def per_finish(repeats: int) -> None:
    cases = {
        "default 1,024 x 16": ("default", ["steps=2", "algorithm.prompts_per_step=1024", "algorithm.group_size=16"]),
        "long-cot (KV-bound)": ("long-cot", ["steps=4"]),
    }
    for label, (name, over) in cases.items():
        cells = []
        for mode in MODES:
            s, n = best_run(scenario(name, mode, over), repeats)
            cells.append(f"{mode} {s / n * 1e6:.1f}")
        print(f"(a) {label}: us per sequence finish: " + ", ".join(cells) + " (target <= 3)")


def growth(repeats: int, max_seconds: float, mode: str, largest: int) -> None:
    sizes, times = [], []
    prompts = 64
    while prompts * 8 <= largest:
        res = scenario("default", mode, ["steps=2", f"algorithm.prompts_per_step={prompts}"])
        s, _ = best_run(res, repeats if prompts * 8 <= 8192 else 1)
        sizes.append(prompts * 8)
        times.append(s)
        if s > max_seconds:
            break
        prompts *= 2
    cells = ", ".join(f"{n:,}: {t:.2f} s" for n, t in zip(sizes, times))
    exponent = math.log(times[-1] / times[0]) / math.log(sizes[-1] / sizes[0])
    print(f"(b) {mode}, sequences per step -> run time: {cells}; exponent {exponent:.2f} (target <= 1.1)")


def length_ratio(repeats: int) -> None:
    cells = []
    for mode in MODES:
        t = {}
        for mean in (2048, 32768):
            over = [
                "steps=2",
                f"workload.response_tokens={{kind: lognormal, mean: {mean}, sigma: 0.9, max: {3 * mean}}}",
            ]
            t[mean], _ = best_run(scenario("default", mode, over), repeats)
        cells.append(f"{mode} {t[2048] * 1e3:.0f} -> {t[32768] * 1e3:.0f} ms ({t[32768] / t[2048]:.2f}x)")
    print("(c) 2K -> 32K mean response, KV-pressured default: " + ", ".join(cells) + " (target <= 1.3x)")


_MEMORY = """
import resource, sys
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.run import simulate
res = resolve(load_scenario("default", ["steps=2", "algorithm.prompts_per_step=8192"]).with_mode("async"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(s.samples for s in simulate(res).recorder.steps)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 / (2 * 8192 * 8), n)
"""


def memory() -> None:
    out = subprocess.run([sys.executable, "-c", _MEMORY], capture_output=True, text=True, check=True).stdout.split()
    print(
        f"(d) peak memory: {float(out[0]):.0f} bytes per simulated sequence ({int(out[1]):,} trained; target <= 1,024)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="stop the growth series after a slower size")
    ap.add_argument("--only", choices=["a", "b", "c", "d"], help="print one figure")
    args = ap.parse_args()
    repeats = 1 if args.quick else 3
    simulate(scenario("default", "colocated", ["steps=1"]))  # warm-up: first-call costs out of the first figure
    if args.only in (None, "a"):
        per_finish(repeats)
    if args.only in (None, "b"):
        for mode in ("colocated", "async"):
            growth(repeats, args.max_seconds, mode, 8192 if args.quick else 65536)
    if args.only in (None, "c"):
        length_ratio(repeats)
    if args.only in (None, "d"):
        memory()


if __name__ == "__main__":
    main()
