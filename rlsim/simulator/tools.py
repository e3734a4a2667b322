"""Multi-turn agent episodes: a finished turn waits on its tool call, then goes back to an engine.

With `workload.agent`, each completion is an episode of T turns (turns.py draws them). The
engines see one turn at a time as an ordinary sequence: its context so far is the prompt, its
turn's response the target. When a turn that is not the last finishes, the route here
(`ToolCalls`, the lifecycle route of lifecycle.py) sends it to a tool call, which uses no GPU:
it starts at the turn's finish, or when one of the `environments` frees up (first come, first
served: a closed form over the slots' free times, as the reward pool's verifiers), and lasts
the drawn seconds. Then the episode comes back with the observation appended:
- `kv_cache: evicted` (an engine freeing a finished request's blocks: vLLM or SGLang without a
  prefix-cache hit): its blocks were freed when the turn ended, and the whole context (prompt,
  every response and observation so far) is prefilled again. It joins the tail of a queue: its
  engine's own under a fixed dispatch (a sticky session), the shared one under pull dispatch,
  where any engine may take it.
- `kv_cache: kept` (the engine holds the episode's blocks over the call): the turn frees
  nothing when it ends (`length` 0), so the engine has that much less room while the call
  runs; it returns to the engine that holds them, ahead of its queue (`Engine.resume`), and
  prefills only the observation (without the attention over the cached prefix). Preempting or
  aborting it later frees the blocks like any sequence's: its whole context is prefilled then.
  An engine with nothing running whose next work does not fit frees kept caches, oldest call
  first (`Engine._evict_for_head`); such an episode comes back as an evicted one. (A kept cache
  is otherwise never reclaimed: vLLM's prefix cache would evict it under any pressure.)
Meanwhile the engines decode whatever else they hold. The last turn goes to scoring as the
whole episode: its response tokens (trained) are every turn's, its length (training FLOPs) the
whole context; observations are context, not trained. The episode's policy version is the
version of its first token (an abort that discards a later turn's tokens restarts that turn
only), so staleness counts from the first turn; the group barrier waits for every episode.

Engines that plan ahead (drain.py, refill.py) see a finished turn as a finish; the ledger
(finishes.py) asks `call_times` for the times where planned turns leave, and flushes there, so
each call starts exactly at its turn's finish. Times in seconds, sizes in tokens.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.ports import TurnHolder
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.slot_bound import FIN
from rlsim.simulator.work import Group, Sequence


@dataclass(eq=False, slots=True)
class Episode:
    """One completion's turns, and what the route needs to carry it from turn to turn."""

    responses: tuple[int, ...]  # each turn's response tokens
    observations: tuple[int, ...]  # tokens each tool call appends
    tool_s: tuple[float, ...]  # seconds of each tool call
    last: int  # the last turn's index
    released_s: float  # when its group was released to the engines
    done_tokens: int = 0  # response tokens of the turns before the current one (the sequence counts its own)
    version_start: int = -1  # policy version of its first token (turn 0's)
    tool_wait_s: float = 0.0  # seconds in tool calls and waiting for an environment
    evicted: bool = False  # its kept cache was freed during the call (an idle engine needed room)


def start_episodes(group: Group, episodes, kept: bool, now: float) -> None:
    """Turn 0 of each of the group's sequences (one turns.EpisodeDraw each), made at release."""
    for seq, draw in zip(group.sequences, episodes):
        last = len(draw.responses) - 1
        if last == 0:
            continue  # one turn: an ordinary sequence
        seq.episode = Episode(draw.responses, draw.observations, draw.tool_s, last, now)
        if kept:
            seq.length = 0  # the turn keeps its cache when it ends


def leaves_for_tool(seq: Sequence) -> bool:
    """The turn that just finished is not its episode's last: it goes to a tool call."""
    ep = seq.episode
    return ep is not None and seq.turn < ep.last


def call_times(plan) -> list[float]:
    """The distinct times at which a drain's or refill's planned finishers leave for a tool call."""
    if not plan.is_refill:
        return sorted({t for seq, t in zip(plan.finishers, plan.finish_s) if leaves_for_tool(seq)})
    times, lo, finishers = [], 0, plan.finishers
    for end_s, hi in zip(plan.end_s, plan.steps[:, FIN].tolist()):
        if any(leaves_for_tool(seq) for seq in finishers[lo:hi]):
            times.append(end_s)
        lo = hi
    return times


class ToolCalls:
    """The lifecycle route of an agent scenario: finished turns to tool calls, episodes to scoring."""

    call_times = staticmethod(call_times)

    def __init__(
        self,
        env: simpy.Environment,
        score: Callable[[list[Sequence]], None],
        rec: Recorder,
        *,
        kept: bool,
        environments: int | None,
        shared_queue=None,
    ) -> None:
        self.env, self.score, self.rec, self.kept = env, score, rec, kept
        self._free_at = [0.0] * environments if environments else None  # heap: when each environment frees up
        self.shared_queue = shared_queue  # pull dispatch: an evicted episode comes back to this queue

    def finished(self, seqs: list[Sequence]) -> None:
        """Finished turns, in order of finish time: tool calls for all but last turns."""
        done = []
        for seq in seqs:
            ep = seq.episode
            if ep is None:
                done.append(seq)
            elif seq.turn < ep.last:
                self._call(seq, ep)
            else:
                done.append(self._episode_done(seq, ep))
        if done:
            self.score(done)

    def _call(self, seq: Sequence, ep: Episode) -> None:
        """The tool call after this turn: from its finish, or when an environment frees up."""
        if seq.turn == 0:
            ep.version_start = seq.version_start
        start = seq.finish_s
        free_at = self._free_at
        if free_at is not None and free_at[0] > start:
            start = free_at[0]
        end = start + ep.tool_s[seq.turn]
        if free_at is not None:
            heapq.heapreplace(free_at, end)
        ep.tool_wait_s += end - seq.finish_s
        if self.kept:
            seq.engine.park(seq, seq.held + seq.prompt_tokens + seq.response_tokens)
        self.rec.on_tool_call(seq.finish_s, ep.tool_s[seq.turn], start - seq.finish_s)
        now = self.env.now
        (timeout_at(self.env, end, seq) if end > now else self.env.timeout(0.0, seq)).callbacks.append(self._back)

    def _back(self, event: simpy.Event) -> None:
        """The call returned: the next turn, with the observation, goes back to an engine."""
        seq: Sequence = event.value
        ep: Episode = seq.episode
        self.rec.on_tool_return(self.env.now)
        turn = seq.turn
        context = seq.held + seq.prompt_tokens + seq.response_tokens  # everything cached at the turn's end
        observation = ep.observations[turn]
        ep.done_tokens += seq.response_tokens
        turn += 1
        seq.turn = turn
        seq.response_tokens = response = ep.responses[turn]
        seq.generated = 0
        engine: TurnHolder = seq.engine
        if self.kept and not ep.evicted:
            seq.held, seq.prompt_tokens = context, observation
            seq.length = context + observation + response if turn == ep.last else 0
            engine.resume(seq)
            return
        ep.evicted = False
        seq.held, seq.prompt_tokens = 0, context + observation
        seq.length = seq.prompt_tokens + response if turn == ep.last or not self.kept else 0
        (self.shared_queue or engine.queue).put([seq])

    def _episode_done(self, seq: Sequence, ep: Episode) -> Sequence:
        """The last turn ended: the sample to score is the whole episode."""
        seq.response_tokens = seq.generated = ep.done_tokens + seq.response_tokens
        ep.done_tokens = 0
        seq.version_start = ep.version_start
        self.rec.on_episode(ep.last + 1, seq.finish_s - ep.released_s, ep.tool_wait_s)
        return seq
