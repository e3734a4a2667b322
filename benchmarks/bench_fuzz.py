"""The CLI under fuzzing for a fixed time: how many cases ran, and how each one ended.

Run: `python benchmarks/bench_fuzz.py --seconds 300` (from the repository root). Draws cases
from tests/fuzz_cases.py (valid small scenarios, and one-point hostile mutations of them) in
batches of 200 with a new Hypothesis seed per batch, runs each as `rlsim compare FILE --json -`
in this process with a time limit per case, and prints the counts: ok (exit 0, strict JSON,
invariants hold), refused (exit 2, one error line), failures (anything else), then the most
common refusals and every failure. The test suite runs the same cases, fewer of them
(tests/test_fuzz.py); exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_cases import cases, run_case  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

BATCH = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="Stop drawing new batches after this long.")
    parser.add_argument("--time-limit", type=float, default=20.0, help="Seconds one case may run.")
    args = parser.parse_args()

    counts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    slowest = (0.0, "")
    start = time.monotonic()

    @settings(
        max_examples=BATCH,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases())
    def batch(case) -> None:
        nonlocal slowest
        if time.monotonic() - start > args.seconds:
            return
        t = time.perf_counter()
        outcome, detail = run_case(case, args.time_limit)
        took = time.perf_counter() - t
        slowest = max(slowest, (took, case.what))
        counts[outcome] += 1
        kind = "valid" if case.valid is not None else case.what.split(" ")[0].split(":")[0]
        kind = (
            kind
            if kind
            in (
                "valid",
                "corrupt",
                "delete",
                "add",
                "duplicate",
                "--set",
                "lengths",
                "config.json",
                "profile",
                "prices",
            )
            else "set a field"
        )
        kinds[f"{kind} {outcome}"] += 1
        if outcome == "refused":
            refusals[re.sub(r"'[^']*'|\d+", "_", detail)[:90]] += 1
        elif outcome == "failure":
            failures.append(detail[:300])

    k = 0
    while time.monotonic() - start < args.seconds:
        seed(k)(batch)()
        k += 1
    elapsed = time.monotonic() - start
    total = sum(counts.values())
    print(f"fuzzed the CLI for {elapsed:.0f} s: {total} cases ({total / elapsed:.1f}/s), {k} batches")
    print(f"  ok (exit 0, strict JSON, invariants hold): {counts['ok']}")
    print(f"  refused (exit 2, one error line):        {counts['refused']}")
    print(f"  failures (traceback, hang, bad output):  {counts['failure']}")
    print(f"  slowest case {slowest[0]:.2f} s ({slowest[1][:60]}); by kind of case and outcome:")
    for name, n in sorted(kinds.items()):
        print(f"  {n:5d}  {name}")
    print("most common refusals (numbers and quoted values as _):")
    for text, n in refusals.most_common(12):
        print(f"  {n:5d}  {text}")
    for line in failures:
        print(f"FAILURE {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
