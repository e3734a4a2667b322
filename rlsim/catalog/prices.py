"""Cloud price catalog: USD per GPU-hour by provider, product, pricing class and region.

Each row is one dated observation with its source (`prices.yaml`); prices move, so nothing here
is "the" price of a GPU. Only the latest observation of each (provider, product, gpu, pricing,
region) is kept (`latest_rows`): an older one is superseded, not a second offer. A user price
file (a YAML list of rows, or a mapping with a `prices:` list as `prices.yaml` itself is; same
schema) overrides built-in rows with the same key and adds the rest. A row's `gpus_per_instance`
says which clusters it can price (`assembles`: each node is one instance), so a 16-GPU job is
never priced at a 1-GPU product's rate. `default_price` picks, deterministically, the row
`rlsim simulate` shows when the user names no provider, and `is_stale` flags observations older
than a year (or undated) so outputs can warn about them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlsim.catalog.gpus import get_gpu
from rlsim.catalog.lookup import first_error
from rlsim.catalog.provenance import DateStr, parse_date
from rlsim.errors import ScenarioError
from rlsim.inputs import YAML_LIMIT_BYTES, load_shipped_yaml, load_yaml, read_text

STALE_AFTER_DAYS = 365

PriceKey = tuple[str, str, str, str, str | None]


class PriceRow(BaseModel):
    """One observed price of one GPU at one provider."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1, description="Cloud or marketplace, e.g. 'AWS', 'Lambda'.")
    product: str = Field(min_length=1, description="Instance type or SKU as the provider names it.")
    gpu: str = Field(description="Catalog GPU key; an alias such as 'H100 SXM 80GB' is resolved on load.")
    gpus_per_instance: int | None = Field(
        default=None,
        gt=0,
        description="GPUs in one instance (a node of the cluster); rows without it price any cluster.",
    )
    pricing: Literal["on_demand", "spot", "committed", "capacity_block"] = Field(
        description="Pricing class: on_demand; spot (preemptible); committed (committed-use pricing: a "
        "1- or 3-year reservation or savings plan); capacity_block (a short reservation of whole "
        "instances for fixed dates, paid up front, e.g. AWS EC2 Capacity Blocks)."
    )
    region: str | None = Field(default=None, description="Region(s) the price applies to, if stated.")
    instance_usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        description="Whole-instance price, USD per hour, if the source gives it.",
    )
    usd_per_gpu_hour: float = Field(gt=0, description="Price of one GPU for one hour, USD.")
    observed: DateStr = Field(description="ISO date the source recorded the price, or 'unknown'.")
    source: str = Field(min_length=1, description="Where the price comes from: URL or repo@commit path.")
    notes: str = Field(default="", description="How the row was derived or classified.")

    @field_validator("gpu")
    @classmethod
    def _catalog_gpu(cls, value: str) -> str:
        """Store the catalog key, so rows written with any alias compare equal."""
        try:
            return get_gpu(value, field="gpu").key
        except ScenarioError as exc:  # pydantic reports ValueErrors raised here with their field
            raise ValueError(exc.reason) from None

    @property
    def key(self) -> PriceKey:
        """Identity for overrides: a user row replaces built-in rows with the same key."""
        return (self.provider, self.product, self.gpu, self.pricing, self.region)


def _parse_rows(entries: Any, where: str) -> list[PriceRow]:
    """Validate a list of row mappings; the first bad field becomes a one-line ScenarioError."""
    if not isinstance(entries, list):
        raise ScenarioError(where, "must be a YAML list of price rows")
    rows = []
    for i, entry in enumerate(entries):
        try:
            rows.append(PriceRow.model_validate(entry))
        except ValidationError as exc:
            loc, reason = first_error(exc)
            raise ScenarioError(f"{where}[{i}]{'.' + loc if loc else ''}", reason) from None
    return rows


@functools.cache
def _builtin_prices() -> tuple[PriceRow, ...]:
    """The rows of prices.yaml, read once per process."""
    text = resources.files("rlsim.catalog").joinpath("prices.yaml").read_text(encoding="utf-8")
    return tuple(_parse_rows(load_shipped_yaml(text)["prices"], "prices.yaml"))


@functools.cache
def _builtin_latest() -> tuple[PriceRow, ...]:
    """`latest_rows` of the built-in catalog, once per process (every `resolve` asks for it)."""
    return tuple(latest_rows(_builtin_prices()))


def _read_user_rows(path: Path) -> list[PriceRow]:
    """Rows from a user price file, or a ScenarioError naming the file and the problem."""
    field = "price_file"
    data = load_yaml(read_text(path, field, "price file", YAML_LIMIT_BYTES), field, str(path))
    if isinstance(data, dict) and "prices" in data:  # the catalog's own format
        data = data["prices"]
    return _parse_rows(data, field)


def _observed_ordinal(row: PriceRow) -> int:
    """Sort key of an observation date; an unknown date counts as the oldest."""
    observed = parse_date(row.observed)
    return observed.toordinal() if observed else -1


def latest_rows(rows: Sequence[PriceRow]) -> list[PriceRow]:
    """One row per (provider, product, gpu, pricing, region): the latest observed, in first-seen order.

    Equal dates keep the later row (a user file's rows follow the catalog's).
    """
    best: dict[PriceKey, PriceRow] = {}
    for row in rows:
        kept = best.get(row.key)
        if kept is None or _observed_ordinal(row) >= _observed_ordinal(kept):
            best[row.key] = row
    order = {key: i for i, key in reversed(list(enumerate(r.key for r in rows)))}
    return sorted(best.values(), key=lambda r: order[r.key])


def assembles(row: PriceRow, gpus_per_node: int) -> bool:
    """True when instances of this row build nodes of `gpus_per_node` GPUs: one instance per node.

    A 1-GPU product cannot give an 8-GPU node its NVLink domain, and an 8-GPU instance bills 8 GPUs
    for a 4-GPU node; a row that does not state its GPUs per instance is taken at its word.
    """
    return row.gpus_per_instance is None or row.gpus_per_instance == gpus_per_node


def load_prices(extra_file: str | Path | None = None) -> list[PriceRow]:
    """Built-in price rows, with a user file's rows overriding same-key rows and adding others.

    Built-in rows keep their file order; user rows follow in theirs. A user row replaces every
    built-in row with its (provider, product, gpu, pricing, region).
    """
    if extra_file is None:
        return list(_builtin_latest())
    rows = list(_builtin_prices())
    user_rows = _read_user_rows(Path(extra_file))
    overridden = {row.key for row in user_rows}
    return latest_rows([row for row in rows if row.key not in overridden] + user_rows)


def default_price(gpu_key: str, rows: Sequence[PriceRow] | None = None, gpus_per_node: int | None = None) -> PriceRow:
    """The on-demand price shown for a GPU when the user names no provider.

    Among on-demand rows for the GPU (from `rows`, default the built-in catalog) that can build
    nodes of `gpus_per_node` GPUs (any, when None), the most recently observed wins ("unknown"
    counts as oldest); ties go to the lowest price, then provider, product and region names, so
    the choice never depends on file order.
    """
    gpu = get_gpu(gpu_key).key
    candidates = [
        r
        for r in (load_prices() if rows is None else rows)
        if r.gpu == gpu and r.pricing == "on_demand" and (gpus_per_node is None or assembles(r, gpus_per_node))
    ]
    if not candidates:
        size = f" in instances of {gpus_per_node} GPUs" if gpus_per_node else ""
        raise ScenarioError(
            "cluster.gpu",
            f"no on-demand price for GPU '{gpu}'{size} in the catalog; add one with a price file",
        )

    def rank(row: PriceRow) -> tuple[int, float, str, str, str]:
        observed = parse_date(row.observed)
        age = -observed.toordinal() if observed else 0  # unknown sorts after every real date
        return (age, row.usd_per_gpu_hour, row.provider, row.product, row.region or "")

    return min(candidates, key=rank)


def is_stale(row: PriceRow, today: date) -> bool:
    """True when the price was observed more than a year before `today`, or on an unknown date."""
    observed = parse_date(row.observed)
    return observed is None or (today - observed).days > STALE_AFTER_DAYS
