"""Partial rollouts with over-provisioning: a step ends when B groups are done, the rest is carried.

APRIL (arXiv 2509.18521) and slime's `--partial-rollout` (THUDM/slime, rollout/sglang_rollout.py)
start generation for more prompts than a step trains on, stop once the target number of groups
is complete, abort what is still running (keeping the tokens it has) and put the unfinished
groups back in front of the data source, so the next step continues them on its new weights;
Kimi k1.5 (arXiv 2501.12599, "partial rollouts") carries long trajectories over too, but ends an
iteration at a fixed token budget (not modelled here: a step ends at B groups).
Here, per step s:

- N = `prompts_in_flight` groups generate: the ones carried from step s - 1 first, in their
  original order, then N - carried fresh ones. The release of step s also waits until step
  s - 1 has ended (so one step's prompts generate at a time, as in slime, where the next
  rollout starts when the previous one returns), besides the buffer depth's gate.
- A group of step s that is complete (every member finished and scored) goes to the buffer,
  until B have; the B-th is held back and the step ends: every engine hands its running and
  preempted sequences over at the end of the iteration (or prefill) in progress, keeping their
  tokens and freeing their cache (`Engine.end_step`), and the queues give back what they hold.
  Once every engine has, the B-th group goes to the buffer (the trainer starts: as slime
  returns the batch only after its abort) and the step's other groups become step s + 1's,
  complete ones included (slime drops those; here no token is lost).
- A carried sequence resumes like an aborted-and-resubmitted one: its prompt and generated
  tokens are prefilled again, on whatever weights the engine then holds.

Every carry records each sequence's tokens so far and the policy version of the engine it left
(`CarryRecord`), so the trained samples' token lag (trainer step - version of the policy that
produced each token) can be reported; in sync modes each step generates on one version, so the
tokens of a carried segment are exactly that version's. Counts in tokens and groups.
"""

from __future__ import annotations

import simpy

from rlsim.simulator.dispatcher import Dispatcher, WorkQueue
from rlsim.simulator.lifecycle import StepEnding
from rlsim.simulator.recorder import CarryRecord, Recorder
from rlsim.simulator.work import Group, Sequence


class PartialRollouts:
    """Ends each step when B groups are complete and carries the rest into the next step.

    Sits between the reward pool and the rollout buffer (it has the buffer's `put`), and is the
    sink the engines hand their unfinished sequences to (lifecycle.CarrySink).
    """

    def __init__(self, env: simpy.Environment, buffer, rec: Recorder, prompts_per_step: int) -> None:
        self.env, self.buffer, self.rec = env, buffer, rec
        self.B = prompts_per_step
        self.ledger = None
        self.engines: list[StepEnding] = []
        self.queues: list[WorkQueue] = []
        self.step = -1  # the step generating now (-1: none)
        self.pool: list[Group] = []  # its groups
        self.taken = 0  # its complete groups sent to the buffer
        self._sent: list[Group] = []  # ... which its trainer step trains
        self._last: Group | None = None  # the B-th, held until every engine has stopped
        self._waiting = 0  # engines yet to hand their work over
        self._carried: list[Sequence] = []  # unfinished sequences of the step that ended
        self._held: list[Group] = []  # complete groups of a step not yet generating
        self._next: list[Group] = []  # groups moving to the next step
        self.ended = env.event()  # succeeds when the step generating now has ended
        self.segments: dict[Sequence, list[tuple[int, int]]] = {}  # (tokens by then, version) per carry
        self._versions: dict[Sequence, int] = {}  # version of the carry in progress, per sequence

    def attach(self, ledger, engines: list[StepEnding], queues: list[WorkQueue]) -> None:
        """The finish ledger (flushed at a step's end), the engines and the queues it stops."""
        self.ledger, self.engines, self.queues = ledger, engines, queues

    # ------------------------------------------------------------ the dispatcher's side
    def begin(self, step: int) -> list[Sequence]:
        """Step `step` starts with the carried groups (the dispatcher adds the fresh ones to
        `pool`); returns the carried sequences to queue first: their groups in original order,
        members in order. Complete carried groups go to the buffer now."""
        self.pool, self._next = self._next, []
        self.step, self.taken, self._sent = step, 0, []
        self.ended = self.env.event()
        seqs = sorted(self._carried, key=lambda s: (s.group.gid, s.index))
        self._carried = []
        held, self._held = self._held, []
        for group in held:
            self.put(group)
        return seqs

    def carried_groups(self) -> list[Group]:
        """The groups the next step inherits (known once the step has ended)."""
        return self._next

    # ------------------------------------------------------------ the reward pool's side
    def put(self, group: Group) -> None:
        """A complete group: to the buffer while its step needs it, else held for its step."""
        if group.batch != self.step or self.taken >= self.B:
            self._held.append(group)
            return
        self.taken += 1
        self._sent.append(group)
        if self.taken < self.B:
            self.buffer.put(group)
            return
        self._last = group
        self.env.timeout(0).callbacks.append(self._end_step)  # not inside the reward pool's delivery

    # ------------------------------------------------------------ the step's end
    def _end_step(self, _event) -> None:
        """B groups are complete: every engine hands its sequences over; the queues give theirs."""
        self.ledger.flush(self.env.now)  # every finish up to now is where it belongs
        self._waiting = len(self.engines)
        for engine in self.engines:
            engine.end_step(self)  # at once when it runs nothing, else at its next boundary
        for queue in self.queues:
            if queue.items:
                seqs = list(queue.items)
                queue.items.clear()
                self._take(seqs, None)

    def carried(self, seqs: list[Sequence], version: int | None) -> None:
        """An engine's unfinished sequences (lifecycle.CarrySink); the step ends with the last engine's."""
        self._take(seqs, version)
        self._waiting -= 1
        if self._waiting == 0:
            self._finish_step()

    def _take(self, seqs: list[Sequence], version: int | None) -> None:
        self._carried.extend(seqs)
        for seq in seqs:
            if seq.generated:
                self._versions[seq] = version if version is not None else self._last_version(seq)

    def _last_version(self, seq: Sequence) -> int:
        """Tokens given back to a queue (an abort on a shared queue): the version of its last carry,
        else the one that produced its first token."""
        seg = self.segments.get(seq)
        return seg[-1][1] if seg else seq.version_start

    def _finish_step(self) -> None:
        step, group, self._last = self.step, self._last, None
        sent = {id(g) for g in self._sent}
        self._next = [g for g in self.pool if id(g) not in sent]
        for g in self._next:  # complete ones too (held since the B-th): trained next step, not lost
            g.batch = step + 1
        tokens = prefill = started = 0
        for seq in self._carried:
            if seq.generated:
                started += 1
                tokens += seq.generated
                prefill += seq.context
                self.segments.setdefault(seq, []).append((seq.generated, self._versions.pop(seq)))
        samples = [seq for g in self._sent for seq in g.sequences]
        lag_sum, lag_max = token_lag(samples, step, self.segments)
        self.rec.on_carry(
            CarryRecord(
                step=step,
                end_s=self.env.now,
                groups=len(self._next),
                sequences=started,
                tokens=tokens,
                resumed_prefill_tokens=prefill,
                trained_tokens=sum(seq.response_tokens for seq in samples),
                token_lag_sum=lag_sum,
                token_lag_max=lag_max,
                trained_carried=sum(1 for seq in samples if seq in self.segments),
            )
        )
        self.step = -1
        self.buffer.put(group)
        self.ended.succeed()


def token_lag(samples: list[Sequence], step: int, segments: dict[Sequence, list[tuple[int, int]]]) -> tuple[int, int]:
    """(sum, max) over the response tokens of `samples` trained at `step` of (step - the version of
    the policy that produced the token): a carried segment's tokens at the version the sequence
    left its engine with, the rest at the version of its last token."""
    total = worst = 0
    for seq in samples:
        done = 0
        for upto, version in segments.get(seq, ()):
            total += (upto - done) * (step - version)
            worst = max(worst, step - version)
            done = upto
        rest = seq.response_tokens - done
        total += rest * (step - seq.version_end)
        worst = max(worst, step - seq.version_end)
    return total, worst


class CarryingDispatcher(Dispatcher):
    """The dispatcher of a partial-rollout pipeline: N prompts per step, the carried ones first.

    Step s is released once the trainer's version reaches s - depth (as without partial
    rollouts) and step s - 1 has ended; it holds the carried groups and N - carried fresh ones.
    """

    def __init__(self, *args, partial: PartialRollouts, prompts_in_flight: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.partial, self.N = partial, prompts_in_flight

    def run(self):
        """Process: release step s after step s - 1 ended and the trainer's version reaches s - depth."""
        partial = self.partial
        for s in range(self.steps):
            if s:
                yield partial.ended
            while self.bus.trainer_version < s - self.depth:
                yield self.bus.changed()
            if self.schedule is not None:
                self.sampler.set_response_mean(self.schedule(s))
            inherited = partial.carried_groups()
            version = self.min_version(s)
            for group in inherited:
                group.min_version = version
            for seqs in _by_group(partial.begin(s)):
                self._assign_seqs(seqs)
            first = len(self.groups)
            self.release(self.N - len(inherited), version, s)
            partial.pool.extend(self.groups[first:])

    def _assign_seqs(self, seqs: list[Sequence]) -> None:
        """A carried group's unfinished members, to queues as a fresh group's would go."""
        if len(self.queues) == 1:
            self.queues[0].put(seqs)
        elif self.together:
            self.queues[self._pick()].put(seqs)
        else:
            for seq in seqs:
                self.queues[self._pick()].put([seq])


def _by_group(seqs: list[Sequence]) -> list[list[Sequence]]:
    runs: list[list[Sequence]] = []
    for seq in seqs:
        if runs and runs[-1][0].group is seq.group:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    return runs
