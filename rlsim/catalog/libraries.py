"""The library fact sheet: what each RL library of the presets supports, and how mature it is.

`libraries.yaml` holds one entry per library named by a preset (`Preset.library`): inference
engines, training backends, multi-node support, the largest published run, algorithms, LoRA,
multi-turn support, licence, and maturity signals measured on a stated git snapshot. Every fact
is a `Fact`: a value with the source it was read from and the date it was read, or an explicit
unknown (value null) with a note saying why. Judgements such as "supports multi-node" follow
the rule of the same name in the file's `rules:` mapping, which the loader requires.

Nothing here is simulated: these are the facts shown beside the simulated step time and dollars
(`rlsim libraries --details`, `compare-presets`, `report --presets`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlsim.catalog.provenance import DateStr
from rlsim.errors import ScenarioError
from rlsim.inputs import load_shipped_yaml

LIBRARIES_YAML = Path(__file__).with_name("libraries.yaml")

T = TypeVar("T")

InferenceEngine = Literal["vllm", "sglang", "megatron", "hf", "jax"]
TrainingBackend = Literal[
    "fsdp", "fsdp2", "megatron", "deepspeed", "jax", "torchtitan", "unsloth", "archon", "olmo-core", "native", "trl"
]


class Fact(BaseModel, Generic[T]):
    """One fact: its value with where and when it was read, or an unknown with the reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    value: T | None = Field(description="The fact; null when no source established it.")
    source: str | None = Field(
        default=None, min_length=1, description="Where it was read: owner/repo@commit:path (what it says), or a URL."
    )
    date: DateStr = Field(description="The day the fact was read (YYYY-MM-DD).")
    as_of: DateStr | None = Field(
        default=None, description="The date the source reflects (a snapshot's commit date, a survey's date)."
    )
    note: str | None = Field(default=None, min_length=1, description="A caveat; required when value is null.")

    @model_validator(mode="after")
    def _sourced(self) -> Fact[T]:
        if self.value is not None and not self.source:
            raise ValueError("a fact with a value needs its source (owner/repo@commit:path or URL)")
        if self.value is None and not self.note:
            raise ValueError("an unknown fact (value null) needs a note saying why it is unknown")
        return self

    @property
    def known(self) -> bool:
        return self.value is not None


class LargestRun(BaseModel):
    """The largest RL run a library's own repository or docs publish (rule: largest_run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str = Field(description="The model as the source names it.")
    params_b: float | None = Field(gt=0, description="Total parameters, billions; null when the source omits it.")
    gpus: int | None = Field(gt=0, description="GPUs of the run; null when the source omits it.")
    nodes: int | None = Field(gt=0, description="Nodes of the run; null when the source omits it.")
    kind: Literal["reported run", "recipe", "claimed scale"] = Field(
        description="A run with results, a shipped configuration, or a size claim without a named run."
    )


class Release(BaseModel):
    """A version tag and its date (rule: release)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tag: str = Field(min_length=1, description="The git tag.")
    date: DateStr = Field(description="The tag's creator date.")


class Snapshot(BaseModel):
    """The git snapshot the maturity signals were measured on."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="Commit of the snapshot's HEAD.")
    date: DateStr = Field(description="Commit date of that HEAD.")


class LibraryFacts(BaseModel):
    """Every fact of one library (`Preset.library` names it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    library: str = Field(min_length=1, description="The library as the presets name it, e.g. 'verl'.")
    repository: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="GitHub owner/name.")
    snapshot: Snapshot = Field(description="The snapshot the repository facts and maturity signals come from.")
    inference_engines: Fact[list[InferenceEngine]] = Field(description="Rollout engines (rule: inference_engines).")
    training_backends: Fact[list[TrainingBackend]] = Field(description="Training backends (rule: training_backends).")
    multi_node: Fact[bool] = Field(description="Trains across nodes (rule: multi_node).")
    largest_run: Fact[LargestRun] = Field(description="Largest published run (rule: largest_run).")
    algorithms: Fact[list[str]] = Field(description="RL algorithms (rule: algorithms).")
    lora: Fact[bool] = Field(description="LoRA RL training (rule: lora).")
    multi_turn: Fact[bool] = Field(description="Multi-turn / agentic RL (rule: multi_turn).")
    licence: Fact[str] = Field(description="SPDX licence (rule: licence).")
    first_release: Fact[Release] = Field(description="First release (rule: release).")
    latest_release: Fact[Release] = Field(description="Latest release up to the snapshot (rule: release).")
    releases_last_12_months: Fact[int] = Field(description="Releases in the 12 months before the snapshot.")
    contributors: Fact[int] = Field(description="Distinct authors (rule: contributors).")
    open_issues: Fact[int] = Field(description="Open issues (rule: issues).")
    closed_issues: Fact[int] = Field(description="Closed issues (rule: issues).")
    docs: Fact[bool] = Field(description="A documentation folder (rule: docs).")
    examples: Fact[bool] = Field(description="An examples folder (rule: examples).")

    def facts(self) -> dict[str, Fact]:
        """Every fact by field name, in the file's order."""
        return {k: v for k, v in self if isinstance(v, Fact)}


# The rule each fact follows (its judgement, written in libraries.yaml `rules:`).
RULE_OF = {
    "inference_engines": "inference_engines",
    "training_backends": "training_backends",
    "multi_node": "multi_node",
    "largest_run": "largest_run",
    "algorithms": "algorithms",
    "lora": "lora",
    "multi_turn": "multi_turn",
    "licence": "licence",
    "first_release": "release",
    "latest_release": "release",
    "releases_last_12_months": "releases_last_12_months",
    "contributors": "contributors",
    "open_issues": "issues",
    "closed_issues": "issues",
    "docs": "docs",
    "examples": "examples",
}


class FactSheet(BaseModel):
    """The whole file: the rules behind the judgements and one entry per library."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rules: dict[str, str] = Field(description="Rule name -> the rule a judgement follows.")
    libraries: list[LibraryFacts] = Field(min_length=1, description="One entry per library.")

    @model_validator(mode="after")
    def _rules_and_names(self) -> FactSheet:
        missing = sorted(set(RULE_OF.values()) - set(self.rules))
        if missing:
            raise ValueError(f"rules: missing the rule for {', '.join(missing)}")
        names = [lib.library for lib in self.libraries]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"libraries: {', '.join(dupes)} listed twice")
        return self

    def rule(self, fact_name: str) -> str:
        return self.rules[RULE_OF[fact_name]]


def short_source(source: str) -> str:
    """A source without its quoted detail and with a 7-digit commit, for tables and flag lines."""
    head = source.split(" (", 1)[0]
    return re.sub(r"@([0-9a-f]{7})[0-9a-f]{33}", r"@\1", head)


def parse_fact_sheet(data: object, where: str = "libraries.yaml") -> FactSheet:
    """Validate a parsed fact sheet; a row without source or date is a ScenarioError naming it."""
    try:
        return FactSheet.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ScenarioError(f"{where}: {loc}", err["msg"]) from None


@lru_cache(maxsize=1)
def load_fact_sheet(path: str | None = None) -> FactSheet:
    """The fact sheet (the built-in one unless `path` is given)."""
    file = Path(path) if path else LIBRARIES_YAML
    return parse_fact_sheet(load_shipped_yaml(file.read_text(encoding="utf-8")), file.name)


def library_facts(library: str) -> LibraryFacts | None:
    """The facts of `library` (a `Preset.library`, case-insensitive), or None when the sheet lacks it."""
    for lib in load_fact_sheet().libraries:
        if lib.library.lower() == library.lower():
            return lib
    return None


def fact_text(fact: Fact) -> str:
    """A fact's value as short text for tables ('unknown' for an unknown)."""
    v = fact.value
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    if isinstance(v, LargestRun):
        size = [v.model]
        if v.gpus:
            size.append(f"{v.gpus} GPUs")
        elif v.nodes:
            size.append(f"{v.nodes} nodes")
        text = ", ".join(size)
        return text if v.kind == "reported run" else f"{text} ({v.kind})"
    if isinstance(v, Release):
        return f"{v.tag} ({v.date})"
    return str(v)


# The facts shown beside simulated numbers (compare-presets, report), with their column titles.
SUMMARY_FACTS = {
    "inference_engines": "engines",
    "training_backends": "backends",
    "multi_node": "multi-node",
    "lora": "LoRA",
    "multi_turn": "multi-turn",
    "largest_run": "largest published run",
    "latest_release": "latest release",
    "releases_last_12_months": "releases, 12 mo",
    "contributors": "contributors",
    "licence": "licence",
}
