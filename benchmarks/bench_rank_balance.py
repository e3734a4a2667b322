"""The slowest-data-parallel-rank term's cost per sequence finish, and its factors against verl's own.

Run: `python benchmarks/bench_rank_balance.py` (from the repository root; ~10 s). Prints:
 (a) the CPU time of `rank_balance.slowest_rank_factors` per sequence finish on a step of the
     default scenario scaled to 1,024 x 16 prompts (16,384 sequences over its 4 training ranks, 4
     minibatches; one call per step), with the layout cached (the same step size as the last
     step) and uncached (a new size); issue 12's target: <= 0.2 us per finish added;
 (b) the factors of the canonical order against verl's Karmarkar-Karp
     (tests/verl_karmarkar_karp.py, the exact port) averaged over 6 random orders of the same
     lengths, at the suite's shapes (8,192 sequences over 32-128 GPUs, 16 minibatches), and the
     Karmarkar-Karp port's own time per step.
Times are the best of several repeats (the machine may be shared).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsim.catalog import get_llm  # noqa: E402
from rlsim.models import footprint  # noqa: E402
from rlsim.models.rank_balance import RankAssignment, canonical_layout, slowest_rank_factors  # noqa: E402
from rlsim.placement import resolve  # noqa: E402
from rlsim.scenario import load_scenario  # noqa: E402
from rlsim.simulator.costs import Costs  # noqa: E402
from tests.verl_karmarkar_karp import factors_of_chunks, verl_rank_chunks  # noqa: E402


def best_s(fn, repeats: int = 15) -> float:
    """Best CPU seconds of one call of `fn` over `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def long_tail(n: int, rng: np.random.Generator) -> np.ndarray:
    """Prompt + response lengths: a lognormal response of mean ~1.6K with a long tail."""
    return rng.integers(100, 1000, n) + np.minimum(rng.lognormal(7.0, 0.9, n).astype(int), 16384)


def per_finish() -> None:
    sc = load_scenario("default", ["algorithm.prompts_per_step=1024", "algorithm.group_size=16"])
    costs = Costs(resolve(sc))
    shape = costs.train_shape
    lin, quad = footprint.forward_flops(costs.llm, 1.0), footprint.forward_flops(costs.llm, 0.0, 1.0)
    lengths = long_tail(sc.algorithm.samples_per_step, np.random.default_rng(0)).tolist()
    n = len(lengths)

    def call() -> None:
        slowest_rank_factors(lengths, shape.dp, shape.minibatches, shape.rank_assignment, lin, quad, shape.gpus)

    def uncached() -> None:
        canonical_layout.cache_clear()
        call()

    call()
    for label, fn in (("cached layout", call), ("new step size", uncached)):
        s = best_s(fn)
        print(f"(a) {n} sequences, dp {shape.dp}, {shape.minibatches} minibatches, {label}: {s * 1e3:.2f} ms per step")
        print(f"    = {s / n * 1e6:.3f} us per sequence finish (target <= 0.2)")


def against_karmarkar_karp() -> None:
    q7 = get_llm("qwen2.5-7b")
    lin, quad = footprint.forward_flops(q7, 1.0), footprint.forward_flops(q7, 0.0, 1.0)
    rng = np.random.default_rng(1)
    for n, dp, world, mb in ((8192, 32, 32, 16), (8192, 64, 64, 16), (8192, 128, 128, 16), (8192, 32, 64, 16)):
        lengths = long_tail(n, rng)
        kk, kk_s = [], float("inf")
        for _ in range(6):
            order = rng.permutation(lengths)
            work = lin * order + quad * order.astype(float) ** 2
            t = time.process_time()
            chunks = verl_rank_chunks(order.tolist(), dp, world)
            kk_s = min(kk_s, time.process_time() - t)
            kk.append(factors_of_chunks(work, chunks, mb))
        kk_lp, kk_up = np.mean(kk, axis=0)
        f = slowest_rank_factors(lengths.tolist(), dp, mb, RankAssignment.balanced, lin, quad, world)
        print(
            f"(b) {n} over {dp} ranks ({world} GPUs), {mb} minibatches: log-prob {f.logprob:.3f} vs "
            f"Karmarkar-Karp {kk_lp:.3f} ({f.logprob / kk_lp - 1:+.1%}), update {f.update:.3f} vs {kk_up:.3f} "
            f"({f.update / kk_up - 1:+.1%}); the port takes {kk_s * 1e3:.0f} ms per step"
        )


def main() -> None:
    per_finish()
    against_karmarkar_karp()


if __name__ == "__main__":
    main()
