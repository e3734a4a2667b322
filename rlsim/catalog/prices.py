"""Cloud price catalog: USD per GPU-hour by provider, product, pricing class and region.

Each row is one dated observation with its source (`prices.yaml`); prices move, so nothing here
is "the" price of a GPU. A user price file (a YAML list of rows, same schema) overrides built-in
rows with the same (provider, product, gpu, pricing, region) and adds the rest. `default_price`
picks, deterministically, the row `rlsim simulate` shows when the user names no provider, and
`is_stale` flags observations older than a year so outputs can warn about them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlsim.catalog.gpus import get_gpu
from rlsim.catalog.lookup import first_error
from rlsim.catalog.provenance import DateStr, parse_date
from rlsim.errors import ScenarioError
from rlsim.inputs import YAML_LIMIT_BYTES, load_yaml, read_text

STALE_AFTER_DAYS = 365

PriceKey = tuple[str, str, str, str, str | None]


class PriceRow(BaseModel):
    """One observed price of one GPU at one provider."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1, description="Cloud or marketplace, e.g. 'AWS', 'Lambda'.")
    product: str = Field(min_length=1, description="Instance type or SKU as the provider names it.")
    gpu: str = Field(
        description="Catalog GPU key; an alias such as 'H100 SXM 80GB' is resolved on load."
    )
    gpus_per_instance: int | None = Field(
        default=None, gt=0, description="GPUs in the instance, if the source states it."
    )
    pricing: Literal["on_demand", "spot", "committed"] = Field(
        description="Pricing class: on-demand, spot/preemptible, or committed/reserved."
    )
    region: str | None = Field(
        default=None, description="Region(s) the price applies to, if stated."
    )
    instance_usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        description="Whole-instance price, USD per hour, if the source gives it.",
    )
    usd_per_gpu_hour: float = Field(gt=0, description="Price of one GPU for one hour, USD.")
    observed: DateStr = Field(description="ISO date the source recorded the price, or 'unknown'.")
    source: str = Field(
        min_length=1, description="Where the price comes from: URL or repo@commit path."
    )
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
    return tuple(_parse_rows(yaml.safe_load(text)["prices"], "prices.yaml"))


def _read_user_rows(path: Path) -> list[PriceRow]:
    """Rows from a user price file, or a ScenarioError naming the file and the problem."""
    field = "price_file"
    data = load_yaml(read_text(path, field, "price file", YAML_LIMIT_BYTES), field, str(path))
    return _parse_rows(data, field)


def load_prices(extra_file: str | Path | None = None) -> list[PriceRow]:
    """Built-in price rows, with a user file's rows overriding same-key rows and adding others.

    Built-in rows keep their file order; user rows follow in theirs. A user row replaces every
    built-in row with its (provider, product, gpu, pricing, region).
    """
    rows = list(_builtin_prices())
    if extra_file is None:
        return rows
    user_rows = _read_user_rows(Path(extra_file))
    overridden = {row.key for row in user_rows}
    return [row for row in rows if row.key not in overridden] + user_rows


def default_price(gpu_key: str, rows: Sequence[PriceRow] | None = None) -> PriceRow:
    """The on-demand price shown for a GPU when the user names no provider.

    Among on-demand rows for the GPU (from `rows`, default the built-in catalog), the most
    recently observed wins ("unknown" counts as oldest); ties go to the lowest price, then
    provider, product and region names, so the choice never depends on file order.
    """
    gpu = get_gpu(gpu_key).key
    candidates = [
        r
        for r in (load_prices() if rows is None else rows)
        if r.gpu == gpu and r.pricing == "on_demand"
    ]
    if not candidates:
        raise ScenarioError(
            "cluster.gpu",
            f"no on-demand price for GPU '{gpu}' in the catalog; add one with a price file",
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
