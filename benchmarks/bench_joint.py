"""Joint refills on a shared queue: what planning the engines together saves, and how often it applies.

Run: `python benchmarks/bench_joint.py` (add --quick for fewer repeats). Engines that pull from
one queue (streaming) used to step span by span whenever their batches were full (a span event
and a prefill event per finish); joint_refill.py plans them together while every batch is full.
For each case, streaming, with joint plans and without (`plans_jointly` off, as before):
 - CPU time per sequence finish (best of several runs) and the ratio;
 - SimPy events per finish;
 - the plans made, and the times none was made, by reason (an engine prefilling, draining or
   preempting; the cache binding; two engines at one time; a plan too short to pay).
Cases: the default scenario at 1,024 x 16 prompts per step (full batches, a long queue: the
plan's regime) and long-cot (KV-bound: the cache binds, so the engines seldom plan together).
Times are the process's CPU time; on a shared machine they are noisy (instruction counts under
`valgrind --tool=callgrind` are the steadier comparison).
"""

from __future__ import annotations

import argparse
import math
import time

import simpy

import rlsim.simulator.engine as engine_module
import rlsim.simulator.joint_refill as joint
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.run import simulate

CASES = {
    "default 1,024 x 16": ("default", ["steps=3", "algorithm.prompts_per_step=1024", "algorithm.group_size=16"]),
    "long-cot (KV-bound)": ("long-cot", ["steps=3"]),
}


def _measure(res, repeats: int, jointly: bool) -> tuple[float, int, int, dict]:
    """(best CPU seconds, finishes, SimPy events, plan tally) of simulating `res`."""
    original = engine_module.plans_jointly
    if not jointly:
        engine_module.plans_jointly = lambda engine: False
    step, count = simpy.Environment.step, [0]

    def counting(env):
        count[0] += 1
        return step(env)

    try:
        best, finishes = math.inf, 0
        for _ in range(repeats):
            t = time.process_time()
            result = simulate(res)
            best = min(best, time.process_time() - t)
            finishes = sum(s.samples for s in result.recorder.steps)
        joint.STATS.clear()
        simpy.Environment.step = counting
        simulate(res)
        return best, finishes, count[0], dict(joint.STATS)
    finally:
        simpy.Environment.step = step
        engine_module.plans_jointly = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats instead of 4")
    repeats = 2 if parser.parse_args().quick else 4
    for label, (name, over) in CASES.items():
        res = resolve(load_scenario(name, over).with_mode("streaming"))
        before = _measure(res, repeats, jointly=False)
        after = _measure(res, repeats, jointly=True)
        n = after[1]
        print(
            f"{label}, streaming: us per finish {before[0] / n * 1e6:.1f} -> {after[0] / n * 1e6:.1f}"
            f" ({after[0] / before[0]:.2f}x); SimPy events per finish {before[2] / n:.2f} -> {after[2] / n:.2f}"
        )
        tally = after[3]
        made = tally.pop("planned", 0)
        refused = ", ".join(f"{reason} {count}" for reason, count in sorted(tally.items(), key=lambda x: -x[1]))
        print(f"  joint plans made {made}; not made: {refused or 'none'}")


if __name__ == "__main__":
    main()
