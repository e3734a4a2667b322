"""The V0 scheduling replay of benchmarks/bench_v0_sched.py: its own-policy case lands on the
engine's figure (so its V0 case differs only by the policy), and its V0 terms do what vLLM 0.6.0's
scheduler does: a prefill pass holds at most the token budget, and under k-step scheduling a
finished sequence keeps its slot, and its tokens stream, only at the window's end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlsim.validation.published import select_rows
from rlsim.validation.published_run import simulate_row

_spec = importlib.util.spec_from_file_location(
    "bench_v0_sched", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_v0_sched.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


class _UnitCosts:
    """Every decode step and every prefill pass takes one second."""

    class _Step:
        def at(self, kv_tokens: float) -> float:
            return 1.0

    def iteration(self, batch: int) -> _Step:
        return self._Step()

    def prefill_s(self, lengths) -> float:
        return 1.0


def test_the_own_policy_replay_is_the_engine() -> None:
    (row,) = select_rows(["vllm060-llama8b-h100"])
    one_step = bench.with_scheduling(row, None, 1)
    costs, prompts, responses = bench.row_lengths(one_step, 0)
    tok_s, _, _ = bench.replay(costs, prompts, responses, 256, None, 1)
    assert tok_s == pytest.approx(simulate_row(one_step)["output_tokens_per_s"], rel=0.02)


@pytest.mark.parametrize("budget,steps", [(2048, 1), (None, 10), (2048, 10)])
def test_the_engine_schedules_as_the_v0_replay(budget, steps) -> None:
    """The engine's `scheduler_steps` and `max_num_batched_tokens` move the 8B serving row as
    the iteration-by-iteration replay of vLLM 0.6.0's policy does (the two draw their lengths
    apart, so their ratios to their own one-step figures are compared)."""
    (row,) = select_rows(["vllm060-llama8b-h100"])
    base, v0 = bench.with_scheduling(row, None, 1), bench.with_scheduling(row, budget, steps)
    engine = simulate_row(v0)["output_tokens_per_s"] / simulate_row(base)["output_tokens_per_s"]
    costs, prompts, responses = bench.row_lengths(base, 0)
    replayed = (
        bench.replay(costs, prompts, responses, 256, budget, steps)[0]
        / bench.replay(costs, prompts, responses, 256, None, 1)[0]
    )
    assert engine == pytest.approx(replayed, rel=0.005)
    if steps > 1:
        assert engine > 1.05  # windows batch the prefills of ~13 finishes into two passes


def test_a_prefill_pass_holds_at_most_the_budget() -> None:
    one_token = [1] * 4  # each response ends with its prefill
    whole, _, _ = bench.replay(_UnitCosts(), [1000] * 4, one_token, 4, None, 1)
    split, _, _ = bench.replay(_UnitCosts(), [1000] * 4, one_token, 4, 2048, 1)
    assert whole == 4.0  # 4 tokens in one pass
    assert split == 2.0  # two passes of two prompts


def test_a_finished_sequence_holds_its_slot_to_the_window_end() -> None:
    # four sequences of 25 tokens: 1 from the prefill, 24 decode steps
    one, tpot1, itl1 = bench.replay(_UnitCosts(), [100] * 4, [25] * 4, 4, None, 1)
    ten, tpot10, itl10 = bench.replay(_UnitCosts(), [100] * 4, [25] * 4, 4, None, 10)
    assert one == 100 / 25  # 1 s of prefill + 24 steps
    assert ten == 100 / 31  # 1 s of prefill + three windows of 10 steps
    assert (tpot1, itl1) == (1.0, 1.0)
    assert (tpot10, itl10) == (30 / 24, 10.0)  # a chunk of 10 steps per window
