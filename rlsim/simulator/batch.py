"""The running batch of one inference engine: vLLM admission, decode bookkeeping, preemption.

What a vLLM scheduler decides at an iteration boundary depends only on integers: which
sequences run, how many tokens each holds in the KV cache, how many decode iterations have
passed. This class holds that state and the rules that change it (admit what fits, preempted
work first; advance k iterations; preempt the newest when the cache is full; remove or take
back sequences), with no clock and no SimPy, so that the process loop (engine.py), the plans
that replay it (drain.py, refill.py) and the tests can reason about it alone. Sizes in tokens.

A sequence runs to `response_tokens`, fixed when it is admitted (`finish_iter`); a feature that
ends a sequence elsewhere (a turn of an agent episode) sets that target before admission and
decides in the engine's route (lifecycle.py) where the sequence goes next.
"""

from __future__ import annotations

import heapq
from collections import deque

from rlsim.simulator.work import Sequence


class RunningBatch:
    """The sequences one engine decodes, its own preempted ones, and their token/KV bookkeeping.

    `running` maps admission order to sequence, in admission order (the newest is the last);
    `local` holds preempted sequences waiting to be recomputed here, ahead of the queue: a vLLM
    engine keeps a preempted request in its own waiting list, and no other engine can take it.
    """

    __slots__ = (
        "capacity",
        "max_batch",
        "share_prompt_prefill",
        "running",
        "local",
        "heap",
        "order",
        "iters",
        "kv",
        "owner",
        "token_budget",
    )

    def __init__(self, capacity_tokens: int, max_batch: int, share_prompt_prefill: bool) -> None:
        self.capacity, self.max_batch, self.share_prompt_prefill = capacity_tokens, max_batch, share_prompt_prefill
        self.running: dict[int, Sequence] = {}
        self.local: deque[Sequence] = deque()
        # (iteration at which it finishes, admission order) of the running sequences, for the
        # span-by-span path; None while not needed (a drain plans from the batch itself)
        self.heap: list[tuple[int, int]] | None = None
        self.order = 0  # the next admission order
        self.iters = 0  # decode iterations done so far
        self.kv = 0  # tokens cached by the running sequences (and by agent turns waiting on tools, kv kept)
        self.owner: object = None  # the engine (stamped on what it admits: a turn keeping its KV returns there)
        self.token_budget: int | None = None  # prompt tokens one prefill pass may hold (None: no limit)

    @property
    def load(self) -> int:
        """The sequences this engine holds, decoding or preempted (what least_loaded compares)."""
        return len(self.running) + len(self.local)

    def sync_tokens(self, seq: Sequence) -> None:
        """Bring a running sequence's `generated` up to the iterations done."""
        seq.generated = seq.generated_at_admit + (self.iters - seq.admit_iter)

    def admit(self, items: deque[Sequence], version: int) -> list[int]:
        """Admit what fits from the preempted list, then `items`; returns the contexts to prefill.

        Admission stops at the first sequence that does not fit (vLLM's FCFS): a free slot
        (`max_batch`) and cache room for its context, its first token and one token per running
        sequence; or that waits for newer weights than `version`; or whose prefill would take the
        pass past `token_budget` (vLLM V0's max_num_batched_tokens: the next pass takes it, and a
        pass always takes one). The prefill pass also produces
        each sequence's next token (vLLM samples the first token from the prefill), so a
        response of r tokens needs r - 1 decode iterations. Fresh members of one group admitted
        together share the prompt's prefill. Empty: nothing was admitted.
        """
        local, running, heap, iters = self.local, self.running, self.heap, self.iters
        capacity, max_batch, share = self.capacity, self.max_batch, self.share_prompt_prefill
        lengths: list[int] = []
        prefilled: set = set()  # groups whose prompt this admission already prefills
        kv, order, b, owner = self.kv, self.order, len(running), self.owner
        budget, pass_tokens = self.token_budget, 0
        blocked = False
        for source in (local, items) if local else (items,):  # its own preempted work first
            while source and b < max_batch:
                seq = source[0]
                group = seq.group
                if group.min_version > version:
                    blocked = True
                    break
                generated = seq.generated
                context = seq.prompt_tokens + generated
                if kv + context + b + 2 > capacity:  # its prompt and first token, plus one per sequence
                    blocked = True
                    break
                prefills = generated or not share or group not in prefilled or seq.turn  # a later turn: its own
                if budget is not None and prefills and lengths and pass_tokens + context > budget:
                    blocked = True
                    break
                source.popleft()
                if prefills:
                    lengths.append(context)
                    pass_tokens += context
                prefilled.add(group)
                if seq.version_start < 0:
                    seq.version_start = version
                generated += 1  # the token the prefill produces
                seq.generated = seq.generated_at_admit = generated
                seq.admit_iter = iters
                seq.engine = owner
                seq.finish_iter = finish = iters + seq.response_tokens - generated
                running[order] = seq
                if heap is not None:
                    heapq.heappush(heap, (finish, order))
                elif finish <= iters:  # a one-token response ends with its prefill: advance(0) needs the heap
                    heap = self.heap = []
                order += 1
                b += 1
                kv += context + 1
            if blocked:
                break
        self.kv, self.order = kv, order
        if heap is not None and len(heap) < b:
            self.build_heap()
        return lengths

    def build_heap(self) -> list[tuple[int, int]]:
        heap = self.heap = [(seq.finish_iter, order) for order, seq in self.running.items()]
        heapq.heapify(heap)
        return heap

    def advance(self, n: int, version: int, now: float) -> list[Sequence] | None:
        """n decode iterations done: every running sequence gained n tokens.

        Returns the sequences that reached their target (removed, stamped with `version` and
        `now`), or None when none did. Under multi-step scheduling n may pass a sequence's target
        (it stays in the batch to the window's end): the cache it grew since is freed with it.
        """
        running, heap = self.running, self.heap
        if heap is None and n:
            heap = self.build_heap()
        iters = self.iters = self.iters + n
        self.kv += n * len(running)
        if not heap or heap[0][0] > iters:
            return None
        finished = []
        while heap and heap[0][0] <= iters:
            order = heapq.heappop(heap)[1]
            seq = running.pop(order, None)
            if seq is None:
                continue  # preempted or aborted earlier
            seq.generated = seq.response_tokens
            self.kv -= seq.length + iters - seq.finish_iter
            seq.version_end = version
            seq.finish_s = now
            finished.append(seq)
        return finished

    def next_finish(self) -> int:
        """Decode iterations until the next running sequence finishes."""
        heap = self.heap if self.heap is not None else self.build_heap()
        running = self.running
        while heap[0][1] not in running:
            heapq.heappop(heap)
        return heap[0][0] - self.iters

    def remove(self, order: int) -> Sequence:
        """Take one sequence out of the batch, its tokens up to date and its cache freed.

        An agent turn that had kept its cache over a tool call loses it too: its whole context
        is prefilled again when it is readmitted.
        """
        seq = self.running.pop(order)
        self.sync_tokens(seq)
        self.kv -= seq.context
        if seq.held:
            seq.prompt_tokens += seq.held
            seq.held = 0
        return seq

    def preempt_newest(self) -> Sequence:
        """KV cache full: recompute-preempt the newest sequence (vLLM's default) to the local list."""
        seq = self.remove(next(reversed(self.running)))
        self.local.appendleft(seq)
        return seq
