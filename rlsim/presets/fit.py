"""Whether a library's facts let it run a scenario at all, with the reason when they do not.

Three rules, each reading one fact of the library fact sheet (rlsim/catalog/libraries.yaml)
against the user's scenario (before any preset overlay):
- a cluster of more than one node needs `multi_node: true`;
- a scenario with `pipeline.lora` needs `lora: true`;
- the scenario's `pipeline.inference.engine` (the engine the team runs) must be among the
  library's `inference_engines`.
A fact that says no rules the library out ("ruled_out"); a fact the sheet records as unknown
gives a "caution" instead, because no source settled it either way. The simulation still runs
for every library, so the numbers stay comparable; the flag sits beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlsim.catalog.libraries import Fact, LibraryFacts, short_source
from rlsim.scenario import Scenario


@dataclass(frozen=True)
class FitFlag:
    """One reason a library cannot (or may not) run the scenario."""

    fact: str
    verdict: Literal["ruled_out", "caution"]
    reason: str

    def line(self, name: str) -> str:
        word = "ruled out" if self.verdict == "ruled_out" else "caution"
        return f"{name} {word}: {self.reason}"


def _cite(fact: Fact) -> str:
    return f"{short_source(fact.source)}, read {fact.date}" if fact.source else f"unknown: {fact.note}"


def _multi_node(sc: Scenario, lib: LibraryFacts) -> FitFlag | None:
    nodes = sc.cluster.nodes
    if nodes <= 1:
        return None
    f = lib.multi_node
    if f.value is False:
        return FitFlag(
            "multi_node",
            "ruled_out",
            f"the cluster has {nodes} nodes but {lib.library} has no multi-node support ({_cite(f)})",
        )
    if f.value is None:
        return FitFlag(
            "multi_node",
            "caution",
            f"the cluster has {nodes} nodes; {lib.library}'s multi-node support is not established: {f.note}",
        )
    return None


def _lora(sc: Scenario, lib: LibraryFacts) -> FitFlag | None:
    if sc.pipeline.lora is None:
        return None
    f = lib.lora
    if f.value is False:
        return FitFlag(
            "lora",
            "ruled_out",
            f"the scenario trains LoRA (rank {sc.pipeline.lora.rank}) but {lib.library} has no LoRA RL "
            f"training ({_cite(f)})",
        )
    if f.value is None:
        return FitFlag(
            "lora", "caution", f"the scenario trains LoRA; {lib.library}'s LoRA support is not established: {f.note}"
        )
    return None


def _engine(sc: Scenario, lib: LibraryFacts) -> FitFlag | None:
    engine = sc.pipeline.inference.engine.value
    f = lib.inference_engines
    if f.value is None:
        return FitFlag(
            "inference_engines", "caution", f"{lib.library}'s inference engines are not established: {f.note}"
        )
    if engine not in f.value:
        return FitFlag(
            "inference_engines",
            "ruled_out",
            f"the team runs {engine} (pipeline.inference.engine) but {lib.library} rolls out with "
            f"{', '.join(f.value)} only ({_cite(f)})",
        )
    return None


def library_fit(scenario: Scenario, lib: LibraryFacts | None) -> list[FitFlag]:
    """Every flag for `lib` on `scenario` (empty: nothing in the facts stops it)."""
    if lib is None:
        return [FitFlag("library", "caution", "the fact sheet has no entry for this library")]
    flags = (rule(scenario, lib) for rule in (_multi_node, _lora, _engine))
    return [f for f in flags if f is not None]
