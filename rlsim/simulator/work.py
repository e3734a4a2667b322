"""Units of work: a sequence (one completion) and a group (one prompt's G completions).

Token bookkeeping lives here so that the invariant "generated = trained + dropped + in flight"
has one place to check: a sequence counts the tokens it produced, the tokens thrown away by an
abort, and the version of the policy that produced its first and last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class Sequence:
    """One completion being generated."""

    group: Group
    index: int
    prompt_tokens: int
    response_tokens: int  # target length
    length: int  # prompt + response tokens: the full sample (training FLOPs, the KV freed when it ends)
    generated: int = 0  # tokens of the response produced so far (kept across preemption)
    discarded: int = 0  # tokens produced then thrown away (abort + discard)
    version_start: int = -1  # policy version of the first token
    version_end: int = -1  # policy version of the last token
    admit_iter: int = 0  # engine iteration counter when (re)admitted
    finish_iter: int = 0  # engine iteration counter at which it will finish, once (re)admitted
    generated_at_admit: int = 0
    finish_s: float = -1.0  # simulated time its last token was produced
    # multi-turn agent episodes (tools.py): the turn being generated; for a turn that returned to
    # the engine keeping its KV cache, the context already cached there (prompt_tokens is then
    # only the observation to prefill, and `length` what the turn frees when it ends: 0 unless
    # it is the last); the episode's plan; the engine that admitted it last
    turn: int = 0
    held: int = 0
    episode: object = None
    engine: object = None

    @property
    def remaining(self) -> int:
        return self.response_tokens - self.generated

    @property
    def context(self) -> int:
        """Tokens in this sequence's KV cache when it is running."""
        return self.held + self.prompt_tokens + self.generated


_new = object.__new__


def new_sequences(group: Group, prompt_tokens: int, responses: list[int]) -> list[Sequence]:
    """`Sequence(group, i, prompt_tokens, r, prompt_tokens + r)` for each response length r, in
    one frame: a group's sequences are the run's most numerous objects, and calling the
    dataclass's `__init__` once each (a frame, twelve defaults) costs ~20% more instructions.
    Every field is set here as the dataclass would set it (tests/test_work.py checks all of them).
    """
    out = []
    for i, r in enumerate(responses):
        seq = _new(Sequence)
        seq.group, seq.index, seq.prompt_tokens, seq.response_tokens = group, i, prompt_tokens, r
        seq.length = prompt_tokens + r
        seq.generated = seq.discarded = seq.admit_iter = seq.finish_iter = seq.generated_at_admit = 0
        seq.version_start = seq.version_end = -1
        seq.finish_s = -1.0
        seq.turn = seq.held = 0
        seq.episode = seq.engine = None
        out.append(seq)
    return out


@dataclass(eq=False, slots=True)
class Group:
    """A prompt and its G completions; trainable only when every completion is scored."""

    gid: int
    batch: int  # the trainer step this group is generated for
    min_version: int  # engines must hold at least this policy version to start it
    prompt_tokens: int
    sequences: list[Sequence] = field(default_factory=list)
    size: int = 0  # G, the number of completions
    scored: int = 0
    done_at: float = 0.0
    status: str = "pending"  # pending | trained | dropped

    @property
    def version_start(self) -> int:
        return min(s.version_start for s in self.sequences)

    @property
    def response_tokens(self) -> int:
        return sum(s.response_tokens for s in self.sequences)

    @property
    def lengths(self) -> list[int]:
        """Full lengths (prompt + response) of each sample, for training FLOPs."""
        return [s.length for s in self.sequences]
