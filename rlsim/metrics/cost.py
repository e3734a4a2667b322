"""Dollars: a run's GPU time priced by a catalog row, and projections from simulated steps to a run.

The whole cluster is rented for the wall time, so cost = GPUs x wall hours x $/GPU-hour, and
the idle dollars are the GPU-hours spent in idle states (plus GPUs no pool uses) times the same
price. Spot prices are labelled interruptible; an optional preemption overhead inflates time.

A simulation covers a few steps; a run has many. A `RunProjection` carries a whole run's wall
time, idle GPU-seconds and generated tokens, and `price_projection` turns it into dollars.
`project_linear` scales the simulated steps (what `cost_line` does); `project_points` keeps the
simulated pipeline fill once and runs every further step at the steady step time, integrating
over sample points of a length schedule with the trapezoid rule. Units: seconds, USD, tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date

from pydantic import BaseModel, Field, model_serializer

from rlsim.catalog.prices import PriceRow, assembles, is_stale
from rlsim.errors import ScenarioError
from rlsim.metrics.summary import RunMetrics
from rlsim.simulator.states import IDLE_STATES


def _drop_unset_pools(data: dict) -> dict:
    """Runs on one GPU type price every GPU alike and list no pools (their output is unchanged)."""
    if data.get("pools") is None:
        data.pop("pools", None)
    return data


class PoolShare(BaseModel):
    """A pool of its own GPUs in a run whose pools run on different GPU types (before any price)."""

    pool: str = Field(description="Pool name: inference, training or reward.")
    gpu_type: str = Field(description="Catalog GPU type of the pool.")
    gpus: int = Field(description="GPUs of the pool.")
    idle_share: float = Field(description="The pool's share of the run's idle GPU-seconds.")
    usd_per_gpu_hour: float | None = Field(description="Default catalog price of the pool's GPU type.")


class PoolCost(BaseModel):
    """One pool's dollars in a run priced per pool: its GPU-hours times its GPU type's price."""

    pool: str
    gpu_type: str
    gpus: int
    usd_per_gpu_hour: float
    gpu_hours_per_run: float
    usd_per_run: float
    idle_usd_per_run: float


class CostLine(BaseModel):
    """The cost of one run at one price (per pool when the pools run on different GPU types)."""

    provider: str
    product: str
    pricing: str = Field(description="on_demand | spot | committed | capacity_block.")
    gpus_per_instance: int | None = Field(default=None, description="GPUs of one instance (a node).")
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
    pools: list[PoolCost] | None = Field(
        default=None,
        description="Per-pool dollars when the pools' GPU types differ: the row prices the pools of its GPU type, "
        "each other pool its type's default catalog price; usd_per_run is their sum (listed only then).",
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler):
        return _drop_unset_pools(handler(self))


class RunProjection(BaseModel):
    """A whole run's GPU time and tokens, projected from simulated steps (before any price)."""

    steps: int = Field(description="RL steps of the projected run.")
    gpus: int = Field(description="GPUs rented for the whole run.")
    wall_time_s: float = Field(description="Projected wall-clock time of the run, s.")
    idle_gpu_seconds: float = Field(description="Projected idle (or unassigned) GPU-seconds of the run.")
    generated_tokens: float = Field(description="Projected generated response tokens of the run.")
    method: str = Field(description="linear | steady | schedule | schedule-average (see rlsim.metrics.cost).")
    sample_fractions: list[float] = Field(description="Run fractions simulated (length-schedule points).")
    pools: list[PoolShare] | None = Field(
        default=None, description="Pools of different GPU types, each priced at its own (listed only then)."
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler):
        return _drop_unset_pools(handler(self))


def pool_shares(m: RunMetrics) -> list[PoolShare] | None:
    """The pools on their own GPUs when the run's pools have different GPU types (None otherwise)."""
    if not any(p.gpu_type for p in m.pools):
        return None
    idle = idle_gpu_seconds(m) or 1.0
    return [
        PoolShare(
            pool=p.pool,
            gpu_type=p.gpu_type,
            gpus=p.gpus,
            idle_share=sum(p.gpu_seconds_by_state[s] for s in IDLE_STATES) / idle,
            usd_per_gpu_hour=p.usd_per_gpu_hour,
        )
        for p in m.pools
        if p.shares_gpus_with is None
    ]


def idle_gpu_seconds(m: RunMetrics) -> float:
    """Idle GPU-seconds of the run, counting rented GPUs that no pool uses as idle throughout."""
    used = sum(m.gpu_seconds_by_state.values())
    unassigned = max(0.0, m.gpus * m.wall_time_s - used)
    return sum(m.gpu_seconds_by_state[s] for s in IDLE_STATES) + unassigned


def periodic_s(m: RunMetrics, run_steps: int) -> float:
    """Seconds a run of `run_steps` spends on periodic evaluation and checkpoints (0 when both are off).

    Training waits for them, and the whole cluster is rented meanwhile, so they add to the run's
    wall time (not to its idle GPU-seconds: rlsim does not say which GPUs wait then)."""
    return m.periodic.run_s(run_steps) if m.periodic is not None else 0.0


def project_linear(m: RunMetrics, run_steps: int, *, with_periodic: bool = True) -> RunProjection:
    """Every step of the run costs the simulated average step (pipeline fill included), plus the
    run's periodic evaluation and checkpoints unless `with_periodic` is False (the simulated steps alone)."""
    scale = run_steps / m.steps
    return RunProjection(
        steps=run_steps,
        gpus=m.gpus,
        wall_time_s=m.wall_time_s * scale + (periodic_s(m, run_steps) if with_periodic else 0.0),
        idle_gpu_seconds=idle_gpu_seconds(m) * scale,
        generated_tokens=m.generated_tokens * scale,
        method="linear",
        sample_fractions=[0.0],
        pools=pool_shares(m),
    )


def _mean_over_run(fractions: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoid mean of a quantity sampled at run fractions (one sample: that value)."""
    if len(values) == 1:
        return values[0]
    area = sum(
        (f1 - f0) * (v0 + v1) / 2.0
        for f0, f1, v0, v1 in zip(fractions, fractions[1:], values, values[1:], strict=False)
    )
    return area / (fractions[-1] - fractions[0])


def project_points(points: Sequence[tuple[float, RunMetrics]], run_steps: int, *, fill_steps: int = 1) -> RunProjection:
    """Project a run from simulations at sample fractions of it (sorted, ideally 0 ... 1).

    The first point's pipeline fill (its wall time minus steps x steady step time) is paid
    once; then every step runs at the steady step time, idle GPUs at the steady idle rate and
    tokens at the per-step mean, each integrated over the run with the trapezoid rule. The
    run's periodic evaluation and checkpoints (`periodic_s`, the first point's) add to its wall time.
    `fill_steps` is how many steps a pipeline takes to reach steady state (buffer depth + 1):
    the steady step time is measured over the second half of the simulated steps, so a
    simulation shorter than 2 x fill_steps has not measured it, and each point then counts its
    average step, fill included (conservative). A single point is also charged its average
    step when the run is no longer than its simulation (`project_linear`).
    """
    f = [p[0] for p in points]
    ms = [p[1] for p in points]
    if not ms or f != sorted(f) or len(set(f)) != len(f):
        raise ValueError(f"sample fractions must increase strictly, got {f}")
    m0 = ms[0]
    if len(ms) == 1 and run_steps <= m0.steps:
        return project_linear(m0, run_steps)
    steady = all(m.steps >= 2 * fill_steps for m in ms)
    step_s = [m.steady_step_time_s if steady else m.step_time_s for m in ms]
    fill_s = m0.wall_time_s - m0.steps * step_s[0]  # zero when charged the average step
    idle_rate = [idle_gpu_seconds(m) / m.wall_time_s for m in ms]  # idle GPUs, on average
    wall = fill_s + run_steps * _mean_over_run(f, step_s) + periodic_s(m0, run_steps)
    idle = fill_s * idle_rate[0] + run_steps * _mean_over_run(
        f, [s * r for s, r in zip(step_s, idle_rate, strict=True)]
    )
    tokens = run_steps * _mean_over_run(f, [m.generated_tokens / m.steps for m in ms])
    method = "schedule" if len(ms) > 1 else "steady"
    return RunProjection(
        steps=run_steps,
        gpus=m0.gpus,
        wall_time_s=wall,
        idle_gpu_seconds=idle,
        generated_tokens=tokens,
        method=method if steady else f"{method}-average" if len(ms) > 1 else "linear",
        sample_fractions=list(f),
        pools=pool_shares(m0),
    )


def price_projection(
    p: RunProjection, row: PriceRow, *, today: date | None = None, preemption_overhead: float = 0.0
) -> CostLine:
    """Price a projected run at one catalog row; spot time grows by the preemption overhead."""
    spot = row.pricing == "spot"
    overhead = 1.0 + (preemption_overhead if spot else 0.0)
    wall_s = p.wall_time_s * overhead
    gpu_hours = p.gpus * wall_s / 3600.0
    usd_run = gpu_hours * row.usd_per_gpu_hour
    idle_usd = p.idle_gpu_seconds * overhead / 3600.0 * row.usd_per_gpu_hour
    pools = _pool_costs(p, row, wall_s, overhead) if p.pools else None
    if pools is not None:  # the pools' sum, plus GPUs no pool uses at the row's price
        unassigned = p.gpus - sum(c.gpus for c in pools)
        unassigned_idle = 1.0 - sum(s.idle_share for s in p.pools)
        usd_run = sum(c.usd_per_run for c in pools) + unassigned * wall_s / 3600.0 * row.usd_per_gpu_hour
        idle_usd = sum(c.idle_usd_per_run for c in pools) + max(0.0, unassigned_idle) * (
            p.idle_gpu_seconds * overhead / 3600.0 * row.usd_per_gpu_hour
        )
    return CostLine(
        provider=row.provider,
        product=row.product,
        pricing=row.pricing,
        region=row.region,
        gpus_per_instance=row.gpus_per_instance,
        usd_per_gpu_hour=row.usd_per_gpu_hour,
        observed=row.observed,
        source=row.source,
        stale=is_stale(row, today or date.today()),
        interruptible=spot,
        usd_per_step=usd_run / p.steps,
        usd_per_1000_steps=usd_run / p.steps * 1000.0,
        usd_per_million_tokens=usd_run / p.generated_tokens * 1e6 if p.generated_tokens else 0.0,
        usd_per_run=usd_run,
        gpu_hours_per_run=gpu_hours,
        wall_days_per_run=wall_s / 86400.0,
        idle_usd_per_run=idle_usd,
        pools=pools,
    )


def _pool_costs(p: RunProjection, row: PriceRow, wall_s: float, overhead: float) -> list[PoolCost]:
    """Each pool's GPU-hours at its price: the row's for pools of the row's GPU, else the type's default."""
    out = []
    for share in p.pools:
        price = row.usd_per_gpu_hour if share.gpu_type == row.gpu else share.usd_per_gpu_hour
        if price is None:
            raise ScenarioError(
                {"reward": "pipeline.reward_model.gpu"}.get(share.pool, f"pipeline.{share.pool}.gpu"),
                f"no on-demand catalog price for {share.gpu_type} in instances of this cluster's nodes; "
                "the run cannot be priced per pool",
            )
        hours = share.gpus * wall_s / 3600.0
        idle_hours = p.idle_gpu_seconds * share.idle_share * overhead / 3600.0
        out.append(
            PoolCost(
                pool=share.pool,
                gpu_type=share.gpu_type,
                gpus=share.gpus,
                usd_per_gpu_hour=price,
                gpu_hours_per_run=hours,
                usd_per_run=hours * price,
                idle_usd_per_run=idle_hours * price,
            )
        )
    return out


def cost_line(
    m: RunMetrics,
    row: PriceRow,
    *,
    run_steps: int | None = None,
    today: date | None = None,
    preemption_overhead: float = 0.0,
) -> CostLine:
    """Price a simulated run; `run_steps` scales the simulated steps to a whole run, with its
    periodic evaluation and checkpoints (without it, the simulated steps alone are priced)."""
    projection = project_linear(m, run_steps or m.steps, with_periodic=run_steps is not None)
    return price_projection(projection, row, today=today, preemption_overhead=preemption_overhead)


def cost_lines(
    p: RunProjection,
    rows: Iterable[PriceRow],
    *,
    today: date | None = None,
    preemption_overhead: float = 0.0,
) -> list[CostLine]:
    """One line per price row, cheapest run first (ties by provider, product, class, region)."""
    lines = [price_projection(p, r, today=today, preemption_overhead=preemption_overhead) for r in rows]
    return sorted(lines, key=lambda c: (c.usd_per_run, c.provider, c.product, c.pricing, c.region or ""))


def rows_for_gpu(
    rows: Iterable[PriceRow],
    gpu: str,
    *,
    providers: Sequence[str] = (),
    pricing: str | None = None,
    gpus_per_node: int | None = None,
) -> list[PriceRow]:
    """The rows pricing `gpu` (a catalog key), optionally one pricing class and some providers.

    With `gpus_per_node`, only products whose instances build such nodes (`assembles`).
    """
    wanted = {p.lower() for p in providers}
    return [
        r
        for r in rows
        if r.gpu == gpu
        and (pricing is None or r.pricing == pricing)
        and (not wanted or r.provider.lower() in wanted)
        and (gpus_per_node is None or assembles(r, gpus_per_node))
    ]


def cheapest_row(
    rows: Iterable[PriceRow],
    gpu: str,
    pricing: str = "on_demand",
    gpus_per_node: int | None = None,
) -> PriceRow | None:
    """The lowest $/GPU-hour row for a GPU and pricing class (ties by provider, product, region)."""
    pool = rows_for_gpu(rows, gpu, pricing=pricing, gpus_per_node=gpus_per_node)

    def key(r: PriceRow) -> tuple[float, str, str, str]:
        return (r.usd_per_gpu_hour, r.provider, r.product, r.region or "")

    return min(pool, key=key) if pool else None
