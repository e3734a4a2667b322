"""`new_sequences` builds a group's sequences exactly as the `Sequence` dataclass would."""

from __future__ import annotations

import dataclasses

from rlsim.simulator.work import Group, Sequence, new_sequences


def test_new_sequences_set_every_field_as_the_dataclass_does():
    group = Group(3, 1, 0, 120, size=3)
    built = new_sequences(group, 120, [7, 300, 1])
    expected = [Sequence(group, i, 120, r, 120 + r) for i, r in enumerate([7, 300, 1])]
    names = [f.name for f in dataclasses.fields(Sequence)]
    assert len(built) == 3
    for seq, ref in zip(built, expected):
        assert type(seq) is Sequence
        for name in names:  # a field added to Sequence and not set here fails on the read
            assert getattr(seq, name) == getattr(ref, name), name
            assert type(getattr(seq, name)) is type(getattr(ref, name)), name
        assert seq.group is group
