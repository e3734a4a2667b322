"""What vLLM 0.6.0's scheduling does to the two vLLM 0.6 serving rows: occupancy against step cost.

Run: `python benchmarks/bench_v0_sched.py [--seed N]` (from the repository root; ~1 minute).

The `vllm060-*` rows (Lambda's vLLM 0.6.0 benchmark, 10-step scheduling) are rlsim's largest
component error: predicted output tokens/s +50% (8B) and +55% (70B TP4) on 2026-12-07. Lambda's table also
gives the median TPOT and the median ITL (one ITL is one streamed chunk, 10 steps), which split
the error into the cost of a step and the number of sequences a step serves. This replays the
rows' workload iteration by iteration under the scheduling policy that vLLM 0.6.0's source
implements, with rlsim's own cost models (`Costs.iteration`, `Costs.prefill_s`), and prints
throughput, median TPOT and median ITL of the replay beside the published ones and the engine's.

vLLM 0.6.0's V0 scheduler, read at vllm-project/vllm@32e7db25365415841ebc7c4215851743fbb1bad1
(tag v0.6.0, the commit its PyPI wheel records in vllm/commit_id.py):

- A prefill pass takes waiting prompts while their tokens fit `max_num_batched_tokens` and the
  running count stays within `max_num_seqs` (core/scheduler.py `_schedule_prefills`). Without
  chunked prefill the budget defaults to max(max_model_len, 2048) (config.py `SchedulerConfig`):
  2048 tokens at Lambda's max-seq-len 2048. Multi-step refuses chunked prefill
  (engine/arg_utils.py `create_engine_config`).
- A pass that schedules prefills schedules no decodes (`_schedule_default`: "Don't schedule
  decodes if prefills are scheduled"): the running batch waits for it.
- A prefill runs one step (`_get_num_lookahead_slots(is_prefill=True)` is 0, so
  `init_multi_step(1)`); the engine calls the scheduler again at once (engine/llm_engine.py and
  async_llm_engine.py `step_async`: `_has_remaining_steps`), which prefers prefills again. So
  prefill passes run back to back until the free slots are taken: the budget splits the
  admissions into passes, it does not cap them per decode window.
- Decodes run `num_scheduler_steps` steps per scheduling pass with the batch fixed
  (`_append_slots`: `init_multi_step(num_lookahead_slots + 1)`, num_lookahead_slots =
  steps - 1); a sequence that stops mid-window is still in the batch (the GPU steps every
  scheduled sequence; engine/output_processor/multi_step.py drops its tokens after the stop) and
  its slot is freed at the next pass. Outputs stream once per window (the last step's
  RequestOutputs), which is why Lambda's ITL is ~10 steps long.

The replay omits what the rows do not encode either (arrivals over HTTP, the async output
processor's extra window for a sequence that stops at a window's last step, preemption: the KV
cache holds ~400K tokens against ~110K in use). It is an estimate beside the simulator, not a
second simulator: its one-step line replays rlsim's policy before these terms (admit at every
finish, one prefill of all that fits) and its V0 line the policy that the engine's
`pipeline.inference.scheduler_steps` and `max_num_batched_tokens` now follow, set in both rows
(tests/test_bench_v0_sched.py holds the engine to the replay).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsim.placement import resolve  # noqa: E402
from rlsim.scenario import scenario_from_dict  # noqa: E402
from rlsim.simulator.costs import Costs  # noqa: E402
from rlsim.validation.published import PublishedRow, published_rows  # noqa: E402
from rlsim.validation.published_run import simulate_row  # noqa: E402
from rlsim.workload import GroupSampler  # noqa: E402

# Lambda's table, v0.6.0 with 10 scheduler steps (LambdaLabsML/vllm-benchmark@0e8fc5d:benchmark_v0.md):
# output tokens/s, median TPOT ms, median ITL ms (one streamed chunk)
PUBLISHED = {
    "vllm060-llama8b-h100": (8088.35, 25.57, 243.76),
    "vllm060-llama70b-h100-tp4": (3542.88, 61.10, 574.07),
}
V0_BUDGET_TOKENS = 2048  # max(max_model_len 2048, 2048): SchedulerConfig's default without chunked prefill
V0_STEPS = 10  # --num-scheduler-steps 10
SCHEDULING_FIELDS = ("scheduler_steps", "max_num_batched_tokens")


def replay(costs: Costs, prompts, responses, max_batch: int, budget: int | None, steps: int):
    """(output tokens/s, median TPOT s, median ITL s of a streamed chunk) of one batch of prompts.

    `budget`: prompt tokens per prefill pass (None: all that fit in one pass); `steps`: decode
    steps per scheduling pass, finished sequences held to the pass's end (1: freed at once).
    """
    waiting = deque(range(len(prompts)))
    kv: dict[int, int] = {}  # running sequence -> cached tokens
    left: dict[int, int] = {}  # running sequence -> tokens still to generate
    t = 0.0
    tokens = 0
    first: dict[int, float] = {}
    last_chunk: dict[int, float] = {}
    tpot: list[float] = []
    itl: list[float] = []
    while waiting or kv:
        admitted, pass_tokens = [], 0
        while waiting and len(kv) + len(admitted) < max_batch:
            p = prompts[waiting[0]]
            if budget is not None and admitted and pass_tokens + p > budget:
                break
            admitted.append(waiting.popleft())
            pass_tokens += p
        if admitted:  # a prefill-only pass: each prompt's first token
            t += costs.prefill_s(tuple(prompts[i] for i in admitted))
            for i in admitted:
                tokens += 1
                first[i] = last_chunk[i] = t
                if responses[i] > 1:
                    kv[i], left[i] = prompts[i] + 1, responses[i] - 1
            continue
        batch = list(kv)
        live = set(batch)
        cached = sum(kv.values())
        for _ in range(steps):
            t += costs.iteration(len(batch)).at(cached)
            cached += len(batch)
            for i in list(live):
                tokens += 1
                left[i] -= 1
                if left[i] == 0:
                    live.discard(i)
                    if steps == 1:  # streamed and freed at its own step
                        itl.append(t - last_chunk[i])
                        tpot.append((t - first[i]) / (responses[i] - 1))
                        del kv[i], left[i]
            if steps == 1:
                for i in live:
                    itl.append(t - last_chunk[i])
                    last_chunk[i] = t
        if steps > 1:  # the window's chunk reaches every sequence in it; the finished leave
            for i in batch:
                itl.append(t - last_chunk[i])
                last_chunk[i] = t
                kv[i] += steps
                if i not in live:
                    tpot.append((t - first[i]) / (responses[i] - 1))
                    del kv[i], left[i]
        else:
            for i in live:
                kv[i] += 1
    return tokens / t, _median(tpot), _median(itl)


def _median(values: list[float]) -> float:
    """The median, NaN with no values (a batch of one-token responses has no TPOT)."""
    return statistics.median(values) if values else float("nan")


def with_scheduling(row: PublishedRow, budget: int | None, steps: int) -> PublishedRow:
    """The row with its engine's prefill budget and scheduler steps replaced (None, 1: neither)."""
    data = dict(row.scenario, name=row.id)
    inference = {k: v for k, v in data["pipeline"]["inference"].items() if k not in SCHEDULING_FIELDS}
    if steps > 1:
        inference["scheduler_steps"] = steps
    if budget is not None:
        inference["max_num_batched_tokens"] = budget
    data["pipeline"] = dict(data["pipeline"], inference=inference)
    return row.model_copy(update={"scenario": data})


def row_lengths(row: PublishedRow, seed: int) -> tuple[Costs, list[int], list[int]]:
    """The row's engine costs and one prompt and response length per prompt of its step."""
    sc = scenario_from_dict(dict(row.scenario, name=row.id), base_dir=".")
    draws = GroupSampler(sc, np.random.default_rng(seed)).draw_many(sc.algorithm.prompts_per_step)
    return Costs(resolve(sc)), [d.prompt_tokens for d in draws], [d.response_tokens[0] for d in draws]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the replay's length draws")
    args = ap.parse_args()
    rows = {r.id: r for r in published_rows()}
    for rid, (tok_s, tpot_ms, itl_ms) in PUBLISHED.items():
        row = rows[rid]
        costs, prompts, responses = row_lengths(row, args.seed)
        max_batch = costs.res.scenario.pipeline.inference.max_batch
        print(f"{rid}: {len(prompts)} prompts, max_batch {max_batch}")
        print(f"  {'':46s} {'tok/s':>8s} {'err':>6s} {'TPOT ms':>8s} {'ITL ms':>8s} {'tok/s x TPOT':>13s}")
        print(
            f"  {'published (Lambda, v0.6.0, 10 steps)':46s} {tok_s:8.0f} {'':6s} {tpot_ms:8.1f} {itl_ms:8.1f} "
            f"{tok_s * tpot_ms / 1e3:13.0f}"
        )
        for label, r in (
            ("rlsim engine, the row", row),
            ("rlsim engine, one step, no budget", with_scheduling(row, None, 1)),
        ):
            engine = simulate_row(r)["output_tokens_per_s"]
            print(f"  {label:46s} {engine:8.0f} {engine / tok_s - 1:+6.0%}")
        cases = (
            ("replay, one step, no budget (rlsim's policy)", None, 1),
            (f"replay, V0: budget {V0_BUDGET_TOKENS}, 1 step", V0_BUDGET_TOKENS, 1),
            (f"replay, V0: budget {V0_BUDGET_TOKENS}, {V0_STEPS} steps (the row)", V0_BUDGET_TOKENS, V0_STEPS),
        )
        for label, budget, steps in cases:
            r_tok, r_tpot, r_itl = replay(costs, prompts, responses, max_batch, budget, steps)
            print(
                f"  {label:46s} {r_tok:8.0f} {r_tok / tok_s - 1:+6.0%} {r_tpot * 1e3:8.1f} {r_itl * 1e3:8.1f} "
                f"{r_tok * r_tpot:13.0f}"
            )
        print(
            f"  published / replayed V0 TPOT: {tpot_ms / 1e3 / r_tpot:.2f}x (a step's cost); "
            f"sequences served per TPOT: {tok_s * tpot_ms / 1e3 / (r_tok * r_tpot):.2f}x (occupancy)"
        )


if __name__ == "__main__":
    main()
