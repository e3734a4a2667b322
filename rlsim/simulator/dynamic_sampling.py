"""Dynamic sampling (DAPO): scored groups whose rewards are all equal never reach the buffer.

A GRPO group whose G completions are all correct or all wrong has zero advantage, so DAPO
filters it out and generates more prompts until the step has B useful groups. This stage sits
between the reward pool and the rollout buffer (the reward pool puts scored groups here instead
of into the buffer) and asks the dispatcher for more prompts through a SimPy `Store` of
requests, the dispatcher's only link back from scoring (no reference cycle between them).

Two refill rules (`filter_groups.refill`; by default the first for colocated, sync and
one-step-off, the second for async and streaming):
- rounds: verl's DAPO trainer
  (volcengine/verl@9d7720026a1e, recipe/dapo/dapo_ray_trainer.py, fit()). A round generates
  and scores a whole gen batch (`prompts_per_gen_batch`); its useful groups are kept; if the step
  has fewer than B, another round starts once this one is fully scored. A round's useful groups
  wait here until it completes (verl gets a gen batch back from one call), then enter the
  buffer together, so a step never starts before its last round ends; the first B useful
  groups (in prompt order, verl's `batch[:traj_bsz]`) are trained and the rest dropped. After
  `max_num_gen_batches` rounds short of B, verl raises ValueError ("Generated too many"); so
  does the simulation (a ScenarioError naming the field).
- continuous: slime's over-sampling rollout and fully asynchronous generators (the rollout side
  keeps going): a group is filtered the moment it is scored, and as soon as the useful groups
  plus those still being generated fall short of B, that many fresh prompts go out at once;
  useful groups go to the buffer as they come. The cap then bounds prompts per step to
  max_num_gen_batches x prompts_per_gen_batch, and "rounds" are prompts / gen batch, rounded up.

Which groups are all-equal is a property of the prompt: one seeded draw per group id, from a
stream of its own (the length draws, and so every scenario without dynamic sampling, stay put),
in group-id order, so every mode filters the same prompts whatever order they finish in.
Filtered and surplus groups' response tokens are waste (`FilterLog.filtered_tokens`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from rlsim.errors import ScenarioError
from rlsim.scenario import FilterGroups
from rlsim.simulator.recorder import FilterLog
from rlsim.simulator.work import Group

DRAW_CHUNK = 1024  # groups' outcomes drawn per numpy call (a fixed size: the stream stays the same)
STREAM_KEY = 0xDA90  # the filter's own seed sequence key, beside the scenario seed
CAP_FIELD = "algorithm.filter_groups.max_num_gen_batches"


class AllOrNoneDraws:
    """Whether group `gid` has all-equal rewards: a seeded Bernoulli per group id."""

    def __init__(self, cfg: FilterGroups, group_size: int, seed: int) -> None:
        self.cfg, self.group_size = cfg, group_size
        self.rng = np.random.default_rng([seed, STREAM_KEY])
        self._flags: list[bool] = []

    def __call__(self, gid: int) -> bool:
        while gid >= len(self._flags):
            self._extend()
        return self._flags[gid]

    def _extend(self) -> None:
        u = self.rng.random(DRAW_CHUNK)
        if self.cfg.pass_rate is None:
            p_equal = np.full(DRAW_CHUNK, self.cfg.all_or_none_share)
        else:  # one pass rate per prompt, then "all G right or all G wrong" given it
            p = self.rng.beta(self.cfg.pass_rate.alpha, self.cfg.pass_rate.beta, DRAW_CHUNK)
            p_equal = p**self.group_size + (1.0 - p) ** self.group_size
        self._flags.extend((u < p_equal).tolist())


@dataclass
class _Fill:
    """One batch being filled with B useful groups."""

    released: int = 0  # prompts released for this batch
    scored: int = 0
    delivered: int = 0  # useful groups handed to the buffer (minus those dropped as stale)
    rounds: int = 0
    filled: bool = False  # reached B useful groups (a stale drop may take one back later)
    held: list[Group] = field(default_factory=list)  # this round's useful groups (batch rule)


class DynamicSampling:
    """Filters scored groups and requests more prompts until each batch has B useful ones."""

    def __init__(
        self,
        env: simpy.Environment,
        buffer,
        log: FilterLog,
        draws: AllOrNoneDraws,
        *,
        prompts_per_step: int,
        prompts_per_gen_batch: int,
        max_rounds: int,
        continuous: bool,
    ) -> None:
        self.env, self.buffer, self.log, self.draws = env, buffer, log, draws
        self.B, self.gen = prompts_per_step, prompts_per_gen_batch
        self.max_rounds, self.continuous = max_rounds, continuous
        self.requests = simpy.Store(env)  # (batch, prompts) for the dispatcher to release
        self._fills: dict[int, _Fill] = {}

    # ------------------------------------------------ told by the dispatcher

    def on_release(self, batch: int, n: int) -> None:
        """The dispatcher released n prompts of `batch` on its own (the first round, or
        replacements for stale groups); prompts this stage requests are counted when requested."""
        fill = self._fills.setdefault(batch, _Fill())
        if fill.released == 0:
            fill.rounds = 1
        self._count(batch, fill, n)

    def on_replace(self, batch: int, n: int) -> None:
        """n trained-to-be groups of `batch` were dropped as stale; their replacements must be
        delivered too."""
        self._fills[batch].delivered -= n

    # ------------------------------------------------ told by the reward pool

    def put(self, group: Group) -> None:
        fill = self._fills[group.batch]
        fill.scored += 1
        useful = not self.draws(group.gid)
        if not useful:
            self._discard(group, surplus=False)
        if self.continuous:
            if useful:
                self._deliver_or_drop([group], fill)
            self._top_up(group.batch, fill)
        else:
            if useful:
                fill.held.append(group)
            if fill.scored == fill.released:  # the round is complete (verl's barrier)
                fill.held.sort(key=lambda g: g.gid)
                self._deliver_or_drop(fill.held, fill)
                fill.held = []
                if fill.delivered < self.B:
                    self._next_round(group.batch, fill)

    # ------------------------------------------------ internals

    def _count(self, batch: int, fill: _Fill, n: int) -> None:
        fill.released += n
        rounds = self._rounds(fill)
        if rounds > self.log.rounds.get(batch, 0):
            self.log.round_starts.append((self.env.now, batch, rounds))
        self.log.prompts[batch] = fill.released
        self.log.rounds[batch] = rounds

    def _request(self, batch: int, fill: _Fill, n: int) -> None:
        """Ask the dispatcher for n more prompts, counted at once: a group scored at the same
        instant, before the dispatcher acts, must not ask for them again."""
        self._count(batch, fill, n)
        self.requests.put((batch, n))

    def _rounds(self, fill: _Fill) -> int:
        return math.ceil(fill.released / self.gen) if self.continuous else fill.rounds

    def _deliver_or_drop(self, groups: list[Group], fill: _Fill) -> None:
        for group in groups:
            if fill.delivered < self.B:
                fill.delivered += 1
                self.buffer.put(group)
                if fill.delivered == self.B and not fill.filled:
                    fill.filled = True
                    self.log.filled.append(group.batch)
            else:
                self._discard(group, surplus=True)

    def _discard(self, group: Group, *, surplus: bool) -> None:
        group.status = "filtered"
        self.log.filtered_tokens += group.response_tokens
        if surplus:
            self.log.surplus_groups += 1
        else:
            self.log.filtered_groups += 1
        self.log.discards.append((self.env.now, self.log.filtered_groups + self.log.surplus_groups))

    def _next_round(self, batch: int, fill: _Fill) -> None:
        if self.max_rounds and fill.rounds >= self.max_rounds:
            self._cap_reached(batch, fill)
        fill.rounds += 1
        self._request(batch, fill, self.gen)

    def _top_up(self, batch: int, fill: _Fill) -> None:
        """Continuous: release as many prompts as the batch is short, counting those in flight."""
        short = self.B - fill.delivered - (fill.released - fill.scored)
        if short <= 0:
            return
        if self.max_rounds:
            short = min(short, self.max_rounds * self.gen - fill.released)
            if short <= 0:
                if fill.released == fill.scored:
                    self._cap_reached(batch, fill)
                return
        self._request(batch, fill, short)

    def _cap_reached(self, batch: int, fill: _Fill) -> None:
        raise ScenarioError(
            CAP_FIELD,
            f"step {batch} has {fill.delivered} of {self.B} useful groups after {self._rounds(fill)} generation "
            f"rounds (max_num_gen_batches={self.max_rounds}); verl stops the run here ('Generated too many'): "
            "raise the cap, set 0 for no limit, or lower the all-or-none share",
        )
