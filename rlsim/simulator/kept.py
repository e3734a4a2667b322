"""An engine holding agent episodes' KV caches over their tool calls (`workload.agent.kv_cache: kept`).

A turn that ends in a tool call keeps its blocks on its engine (tools.py): it frees nothing when
it finishes, so the engine's cache holds it (`parked`) while the call runs, and the engine has
that much less room. When the call returns, the episode waits in the engine's own list, behind
its preempted work and ahead of the queue, as a swapped-out request does, and is admitted at the
next iteration boundary where it fits, prefilling only its observation. Its cached prefix is
`Sequence.held` from then on; preempting or aborting it frees the whole context (batch.py).

Kept caches are not reclaimed under pressure while anything runs (decoding sequences are
preempted first, as for any other sequence); an engine with nothing running whose next work does
not fit frees them, the earliest call first, then those of returned turns waiting behind the
head, the last first. Without that an engine could hold nothing but parked caches for good.
(vLLM's prefix cache, by contrast, keeps finished blocks only while nobody needs the room.)
These are methods of the engine (engine.py binds them). Sizes in tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsim.simulator.planned import cut_refill
from rlsim.simulator.work import Sequence

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine


def park(engine: Engine, seq: Sequence, tokens: int) -> None:
    """An agent turn went to a tool call keeping its `tokens` of KV cache on this engine."""
    engine.parked[seq] = tokens


def resume(engine: Engine, seq: Sequence) -> None:
    """An agent turn is back from its tool call, its KV cache still here.

    It waits in the engine's own list and is admitted at the next iteration boundary where it
    fits: a decode span, drain or refill is cut at the iteration in progress (a refill in a
    prefill ends with it), where a span-by-span engine would look.
    """
    batch = engine.batch
    engine.ledger.settle()  # its batch as of the last flush (a plan's bulk commits wait to be settled)
    engine.parked.pop(seq, None)
    batch.local.append(seq)
    engine._report_load()
    if engine._listening and (len(batch.running) < batch.max_batch or engine.drain is not None):
        r = engine.drain
        if r is not None and r.is_refill:
            cut_refill(engine, r, at_iteration=True)
        if engine._listening:
            engine._listening = False
            engine.process.interrupt()
    engine.queue.notify()  # an idle engine wakes (a busy one looks at its own list first)


def free_kept(engine: Engine) -> bool:
    """Nothing runs and the next work does not fit: free kept caches until it does.

    Parked caches go first, the earliest call first; then those of returned turns waiting here,
    from the last in line to the first (the head's own last). A freed episode prefills its whole
    context when it is admitted. Returns whether anything was freed (the loop then tries
    admission again).
    """
    batch = engine.batch
    queued = engine.queue.items
    if batch.local:
        head = batch.local[0]
    elif queued and not engine._paused() and queued[0].group.min_version <= engine.version:
        head = queued[0]
    else:
        return False
    need = head.prompt_tokens + head.generated + 2
    if batch.kv + need <= batch.capacity:
        return False
    freed = False
    parked = engine.parked
    for seq in sorted(parked, key=_call_order):
        if batch.kv + need <= batch.capacity:
            break
        batch.kv -= parked.pop(seq)
        seq.episode.evicted = True
        freed = True
    for seq in reversed(batch.local):
        if batch.kv + need <= batch.capacity:
            break
        if seq.held:
            batch.kv -= seq.held
            seq.prompt_tokens += seq.held
            seq.held = 0
            freed = True
    return freed


def _call_order(seq: Sequence) -> tuple[float, int, int]:
    """Parked caches are freed in the order their tool calls began (then group, then member)."""
    return seq.finish_s, seq.group.gid, seq.index
