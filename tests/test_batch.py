"""The running batch alone (no SimPy): vLLM admission, decode bookkeeping and preemption, by hand."""

from __future__ import annotations

from collections import deque

from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.work import Group, Sequence


def _seqs(gid: int, prompt: int, responses: list[int], min_version: int = 0) -> list[Sequence]:
    g = Group(gid, 0, min_version, prompt, size=len(responses))
    g.sequences = [Sequence(g, i, prompt, r, prompt + r) for i, r in enumerate(responses)]
    return g.sequences


def test_admission_needs_room_for_the_prefill_and_one_iteration() -> None:
    """A context c joins b running sequences holding kv tokens if kv + (c + 1) + (b + 1) <= capacity."""
    (a,), (b,), (c,) = _seqs(0, 100, [10]), _seqs(1, 50, [10]), _seqs(2, 1, [10])
    batch = RunningBatch(capacity_tokens=155, max_batch=8, share_prompt_prefill=True)
    queue = deque([a, b, c])
    assert batch.admit(queue, 0) == [100, 50]  # 101 + 51 cached; c: 152 + 2 + 3 = 157 > 155
    assert list(queue) == [c] and batch.kv == 152 and list(batch.running.values()) == [a, b]
    assert a.generated == b.generated == 1  # the prefill produces the first token
    assert (a.finish_iter, b.finish_iter) == (9, 9) and a.version_start == 0


def test_admission_is_first_come_first_served_and_capped_by_max_batch() -> None:
    big, small = _seqs(0, 1000, [5])[0], _seqs(1, 1, [5])[0]
    batch = RunningBatch(capacity_tokens=500, max_batch=8, share_prompt_prefill=True)
    assert batch.admit(deque([big, small]), 0) == []  # the small one waits behind the head
    many = deque(_seqs(2, 10, [5] * 6))
    batch = RunningBatch(capacity_tokens=10_000, max_batch=4, share_prompt_prefill=False)
    assert batch.admit(many, 0) == [10, 10, 10, 10] and len(many) == 2


def test_newer_weights_block_the_head() -> None:
    queue = deque(_seqs(0, 10, [5], min_version=1) + _seqs(1, 10, [5]))
    batch = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    assert batch.admit(queue, 0) == [] and len(queue) == 2
    assert batch.admit(queue, 1) == [10, 10]


def test_a_group_admitted_together_shares_its_prompt_prefill() -> None:
    seqs = _seqs(0, 64, [5, 5, 5])
    shared = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    assert shared.admit(deque(seqs), 0) == [64]
    apart = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=False)
    assert apart.admit(deque(_seqs(1, 64, [5, 5, 5])), 0) == [64, 64, 64]


def test_advance_counts_tokens_and_hands_on_finishers_in_admission_order() -> None:
    seqs = _seqs(0, 10, [3, 5, 3])
    batch = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    batch.admit(deque(seqs), 0)
    assert batch.kv == 33 and batch.next_finish() == 2
    assert batch.advance(1, version=0, now=1.0) is None
    assert batch.kv == 36
    done = batch.advance(1, version=2, now=2.5)
    assert done == [seqs[0], seqs[2]]
    assert [(s.generated, s.version_end, s.finish_s) for s in done] == [(3, 2, 2.5), (3, 2, 2.5)]
    assert batch.kv == 39 - 2 * 13 and list(batch.running.values()) == [seqs[1]]
    assert batch.next_finish() == 2


def test_preempted_work_goes_first_and_keeps_its_tokens() -> None:
    first, newest = _seqs(0, 10, [20]) + _seqs(1, 10, [20])
    batch = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    batch.admit(deque([first, newest]), 0)
    batch.advance(4, version=0, now=1.0)
    assert batch.preempt_newest() is newest
    assert newest.generated == 5 and list(batch.local) == [newest] and batch.kv == 15
    assert batch.load == 2
    (fresh,) = _seqs(2, 10, [20])
    assert batch.admit(deque([fresh]), 0) == [15, 10]  # its context is re-prefilled, ahead of the queue
    assert list(batch.running.values()) == [first, newest, fresh] and not batch.local
    assert newest.generated == 6 and newest.finish_iter == 4 + 20 - 6


def test_a_prefill_pass_holds_at_most_the_token_budget() -> None:
    """vLLM V0's max_num_batched_tokens: a pass stops before the prompt that would pass the
    budget (the next pass takes it); a prompt longer than the budget still goes alone."""
    batch = RunningBatch(capacity_tokens=100_000, max_batch=8, share_prompt_prefill=True)
    batch.token_budget = 2048
    queue = deque(_seqs(0, 1000, [5]) + _seqs(1, 1000, [5]) + _seqs(2, 100, [5]) + _seqs(3, 3000, [5]))
    assert batch.admit(queue, 0) == [1000, 1000] and len(queue) == 2
    assert batch.admit(queue, 0) == [100] and len(queue) == 1  # 100 + 3000 > 2048
    assert batch.admit(queue, 0) == [3000] and not queue
    shared = RunningBatch(capacity_tokens=100_000, max_batch=8, share_prompt_prefill=True)
    shared.token_budget = 100  # a group's shared prompt counts once
    assert shared.admit(deque(_seqs(4, 64, [5, 5, 5])), 0) == [64] and len(shared.running) == 3


def test_advancing_past_a_target_frees_the_cache_grown_since() -> None:
    """Under multi-step scheduling a sequence that ends inside a window is computed to its end:
    the iterations past its target grew its cache, which is freed with it."""
    short, long = _seqs(0, 10, [3])[0], _seqs(1, 10, [20])[0]
    batch = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    batch.admit(deque([short, long]), 0)
    assert batch.kv == 22
    assert batch.advance(10, version=0, now=1.0) == [short]  # it ended 8 iterations before
    assert short.generated == 3 and batch.kv == 10 + 11  # the long one: its prompt and 11 tokens
