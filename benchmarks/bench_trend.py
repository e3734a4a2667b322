"""The OpenRLHF/verl length trend at every published length: 1K, 2K, 4K and 8K generated tokens.

Run: `python benchmarks/bench_trend.py [--prompts N] [--host-per-sequence-s S]` (from the
repository root). The published suite compares only 8K against 1K (`openrlhf-verl-*-8k` rows,
`ratio_to` their 1K rows); Table 1 of the OpenRLHF paper (arXiv 2405.11143) also has 2K and 4K.
This prints, per model size, the simulated step at each length (with its decode and training
seconds) beside verl's published step, the growth per doubling of the length, and the 8K/1K
ratio the suite counts, so the trend can be checked point by point. Each length is the 8K row's
scenario with the response cap and the one-sequence micro-batch at that length, as the 1K and
8K rows differ. The options change the rows' unpublished inputs, to see how much each moves
the trend; they are not the rows' assumptions (those are in the YAML files).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsim.scenario import scenario_from_dict  # noqa: E402
from rlsim.simulator.run import simulate  # noqa: E402
from rlsim.validation.phases import phase_times, simulated_timeline  # noqa: E402
from rlsim.validation.published import published_rows  # noqa: E402

LENGTHS = (1024, 2048, 4096, 8192)
# verl column of Table 1 (seconds per step), docs: ../shared/reference/published-validation.md section 6.1
PUBLISHED_S = {"1.5b": (16.2, 33.1, 65.5, 134.8), "7b": (17.3, 47.3, 101.3, 232.4), "14b": (28.5, 74.3, 202.8, 511.1)}
PROMPT_MAX_TOKENS = 1024


def step_at(scenario: dict, length: int) -> tuple[float, float, float]:
    """(step, decode + prefill, log-prob + train) seconds per step of `scenario` capped at `length`."""
    data = copy.deepcopy(scenario)
    data["workload"]["response_tokens"]["max"] = length
    data["pipeline"]["training"]["micro_batch_tokens"] = PROMPT_MAX_TOKENS + length
    data.setdefault("name", f"trend-{length}")
    pt = phase_times(simulated_timeline(simulate(scenario_from_dict(data, base_dir=".")).recorder))
    s = pt.per_step_s
    generate = s.get("inference/prefill", 0.0) + s.get("inference/decode", 0.0)
    train = s.get("training/logprob", 0.0) + s.get("training/train", 0.0) + s.get("training/optimizer", 0.0)
    return pt.step_s, generate, train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=None, help="prompts per step instead of the rows' 128")
    parser.add_argument("--host-per-sequence-s", type=float, default=None, help="engine host seconds per sequence")
    args = parser.parse_args()
    rows = {r.id: r for r in published_rows()}
    for size, published in PUBLISHED_S.items():
        scenario = copy.deepcopy(rows[f"openrlhf-verl-{size}-8k"].scenario)
        if args.prompts is not None:
            scenario["algorithm"]["prompts_per_step"] = args.prompts
            scenario["algorithm"]["minibatches"] = 1
        if args.host_per_sequence_s is not None:
            scenario["pipeline"]["inference"]["host_per_sequence_s"] = args.host_per_sequence_s
        points = [step_at(scenario, n) for n in LENGTHS]
        print(f"{size}: length  predicted (decode, train)        published  growth pred / pub")
        for i, (n, (step, gen, train), pub) in enumerate(zip(LENGTHS, points, published, strict=True)):
            growth = "" if i == 0 else f"{step / points[i - 1][0]:.2f}x / {pub / published[i - 1]:.2f}x"
            print(f"  {n:>5}  {step:8.1f} s ({gen:6.1f}, {train:6.1f})  {pub:8.1f} s  {growth}")
        ratio, pub_ratio = points[-1][0] / points[0][0], published[-1] / published[0]
        print(f"  8K/1K: {ratio:.2f}x predicted, {pub_ratio:.2f}x published ({ratio / pub_ratio - 1:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
