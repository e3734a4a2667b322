"""Dollars: a run's GPU time priced by a catalog row.

The whole cluster is rented for the wall time, so cost = GPUs x wall hours x $/GPU-hour, and
the idle dollars are the GPU-hours spent in idle states (plus GPUs no pool uses) times the same
price. Spot prices are labelled interruptible; an optional preemption overhead inflates time.
"""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, Field

from rlsim.catalog.prices import PriceRow, is_stale
from rlsim.metrics.summary import RunMetrics
from rlsim.simulator.states import IDLE_STATES


class CostLine(BaseModel):
    """The cost of one run at one price."""

    provider: str
    product: str
    pricing: str = Field(description="on_demand | spot | committed.")
    region: str | None
    usd_per_gpu_hour: float
    observed: str = Field(description="Date the price was observed.")
    source: str
    stale: bool = Field(description="Price observed more than a year before today (or undated).")
    interruptible: bool = Field(description="Spot capacity that the provider may reclaim.")
    usd_per_step: float
    usd_per_1000_steps: float
    usd_per_million_tokens: float = Field(description="Dollars per million generated tokens.")
    usd_per_run: float
    gpu_hours_per_run: float
    wall_days_per_run: float
    idle_usd_per_run: float = Field(description="Dollars of GPU time spent idle (or unassigned).")


def idle_gpu_seconds(m: RunMetrics) -> float:
    """Idle GPU-seconds of the run, counting rented GPUs that no pool uses as idle throughout."""
    used = sum(m.gpu_seconds_by_state.values())
    unassigned = max(0.0, m.gpus * m.wall_time_s - used)
    return sum(m.gpu_seconds_by_state[s] for s in IDLE_STATES) + unassigned


def cost_line(m: RunMetrics, row: PriceRow, *, run_steps: int | None = None, today: date | None = None,
              preemption_overhead: float = 0.0) -> CostLine:
    """Price a simulated run; `run_steps` scales the simulated steps to a whole run."""
    steps = run_steps or m.steps
    scale = steps / m.steps
    spot = row.pricing == "spot"
    overhead = 1.0 + (preemption_overhead if spot else 0.0)
    wall_s = m.wall_time_s * scale * overhead
    gpu_hours = m.gpus * wall_s / 3600.0
    usd_run = gpu_hours * row.usd_per_gpu_hour
    idle_usd = idle_gpu_seconds(m) * scale * overhead / 3600.0 * row.usd_per_gpu_hour
    tokens = m.generated_tokens * scale
    return CostLine(
        provider=row.provider, product=row.product, pricing=row.pricing, region=row.region,
        usd_per_gpu_hour=row.usd_per_gpu_hour, observed=row.observed, source=row.source,
        stale=is_stale(row, today or date.today()), interruptible=spot,
        usd_per_step=usd_run / steps, usd_per_1000_steps=usd_run / steps * 1000.0,
        usd_per_million_tokens=usd_run / tokens * 1e6 if tokens else 0.0,
        usd_per_run=usd_run, gpu_hours_per_run=gpu_hours, wall_days_per_run=wall_s / 86400.0,
        idle_usd_per_run=idle_usd,
    )
