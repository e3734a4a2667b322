"""The pipeline modes, apart from the scenario model, so the CLI can name them without pydantic.

`rlsim --help` builds every command's options, and `--mode` takes a `Mode`; importing the whole
scenario model (pydantic) for an enum cost ~90 ms of every start. `rlsim.scenario` re-exports
both names.
"""

from __future__ import annotations

from enum import Enum


class YamlEnum(str, Enum):
    """An enum that prints as the name a user writes in YAML (`async`, not `Mode.async_`)."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


class Mode(YamlEnum):
    """Pipeline architectures, from fully serial to fully overlapped."""

    colocated = "colocated"
    sync = "sync"
    one_step_off = "one_step_off"
    async_ = "async"
    streaming = "streaming"
