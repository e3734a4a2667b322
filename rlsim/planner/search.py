"""The plan: simulate every runnable candidate, apply constraints, find the frontier, recommend.

Each candidate is simulated for a few steps (at 2 points of the length schedule, if any) and
projected to a run of `run_steps` (`rlsim.metrics.cost.project_points`: steady steps when the
simulation outlasts twice the pipeline fill, else the simulated average step), priced at the
cheapest row of the chosen pricing class for its GPU. A candidate is feasible when it meets
every given constraint: run hours <= deadline, run dollars <= budget, largest staleness <= K.
The frontier holds the feasible candidates no other feasible one dominates on (run hours, run
dollars, mean staleness): at most as much on all three and less on one. The recommendation is
the best feasible candidate on the objective (cost: dollars, then hours, staleness, index;
time: hours, then dollars, staleness, index), so it is always on the frontier; the runner-up is the
next one in the same order whose results differ (exact ties are reported, not ranked).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rlsim.catalog.gpus import get_gpu
from rlsim.catalog.prices import PriceRow, load_prices
from rlsim.errors import ScenarioError
from rlsim.metrics.cost import CostLine, cheapest_row, price_projection, project_points
from rlsim.metrics.summary import periodic_of
from rlsim.placement import Resolved, resolve
from rlsim.planner.bounds import BatchDraws, run_bound
from rlsim.planner.candidates import Candidate, CandidateScenarios, Pruned, SearchSpace, check, generate
from rlsim.planner.costing import run_length, sample_fractions, sample_scenarios
from rlsim.planner.executors import (
    Executor,
    LocalExecutor,
    Pending,
    Progress,
    SimOutcome,
    simulate_metrics,
    submitter,
)
from rlsim.planner.watch import Settle, Watch
from rlsim.pools import REWARD, pool_layout
from rlsim.scenario import Scenario

PLAN_SCHEDULE_POINTS = 2  # start and end of the run: exact when step time is linear in length
LOOKAHEAD = 16  # bounded search: simulations under way while the next candidate is decided
WATCH = True  # bounded search: stop a simulation once its results so far settle it (`watch.py`)


@dataclass(frozen=True)
class Constraints:
    """Limits a feasible plan meets; None means unconstrained."""

    deadline_hours: float | None = None
    budget_usd: float | None = None
    max_staleness: int | None = None


@dataclass(frozen=True)
class Evaluation:
    """A simulated candidate: its projected run, priced, and its staleness and idle share."""

    candidate: Candidate
    cost: CostLine
    run_hours: float
    staleness_mean: float
    staleness_max: int
    idle_fraction: float
    step_time_s: float  # steady step time at the start of the run
    tail_fraction: float = 0.0  # decode GPU time at low batch, share of all GPU time
    decode_occupancy: float = 0.0  # mean running batch / max_batch while decoding

    @property
    def run_usd(self) -> float:
        return self.cost.usd_per_run

    def violations(self, c: Constraints) -> dict[str, float]:
        """Relative excess over each broken constraint (0.25 = 25% over), by option name."""
        out = {}
        if c.deadline_hours is not None and self.run_hours > c.deadline_hours:
            out["--deadline-hours"] = self.run_hours / c.deadline_hours - 1.0
        if c.budget_usd is not None and self.run_usd > c.budget_usd:
            out["--budget-usd"] = self.run_usd / c.budget_usd - 1.0
        if c.max_staleness is not None and self.staleness_max > c.max_staleness:
            out["--max-staleness"] = (self.staleness_max - c.max_staleness) / max(1, c.max_staleness)
        return out


@dataclass
class PlanResult:
    """Everything a plan found; `recommended` is on `frontier`, `runner_up` may be None."""

    scenario: str
    objective: str
    constraints: Constraints
    sim_steps: int
    run_steps: int
    pricing: str
    candidates: int
    pruned: list[Pruned]
    failed: list[Pruned]  # simulations that could not finish
    evaluations: list[Evaluation]
    feasible: list[Evaluation]
    frontier: list[Evaluation]
    recommended: Evaluation
    runner_up: Evaluation | None
    reason: str
    prices: dict[str, PriceRow] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)  # generate+prune(+bound), simulate, rank
    skipped: list[Pruned] = field(default_factory=list)  # runnable, not simulated: see `Bound`

    def to_records(self) -> list[dict[str, Any]]:
        """One flat mapping per simulated candidate (a table: `pandas.DataFrame(records)`)."""
        feasible = {e.candidate.index for e in self.feasible}
        frontier = {e.candidate.index for e in self.frontier}
        return [_eval_row(e, feasible, frontier) for e in self.evaluations]

    def to_dict(self) -> dict[str, Any]:
        """Everything the plan found, as `rlsim plan --json` writes it."""

        def aside(items: list[Pruned]) -> list[dict[str, Any]]:
            return [{"index": p.candidate.index, "label": p.candidate.label, "reason": p.reason} for p in items]

        return {
            "scenario": self.scenario,
            "objective": self.objective,
            "constraints": asdict(self.constraints),
            "simulated_steps": self.sim_steps,
            "run_steps": self.run_steps,
            "pricing": self.pricing,
            "candidates": self.candidates,
            "simulated": len(self.evaluations) + len(self.failed),
            "pruned": aside(self.pruned),
            "skipped": aside(self.skipped),
            "counts": {
                "candidates": self.candidates,
                "pruned": len(self.pruned),
                "simulated": len(self.evaluations) + len(self.failed),
                "failed": len(self.failed),
                "skipped": len(self.skipped),
            },
            "failed": aside(self.failed),
            "evaluations": self.to_records(),
            "frontier": [e.candidate.index for e in self.frontier],
            "recommended": self.recommended.candidate.index,
            "runner_up": self.runner_up.candidate.index if self.runner_up else None,
            "reason": self.reason,
        }


def _candidate_fields(cand: Candidate) -> dict[str, Any]:
    """The candidate's fields; `inference_gpu` only when the plan searched the inference pool's type."""
    fields = asdict(cand)
    if fields["inference_gpu"] is None:
        del fields["inference_gpu"]
    return fields


def _eval_row(e: Evaluation, feasible: set[int], frontier: set[int]) -> dict[str, Any]:
    c = e.cost
    return {
        **_candidate_fields(e.candidate),
        "label": e.candidate.label,
        "run_hours": e.run_hours,
        "run_usd": e.run_usd,
        "usd_per_step": c.usd_per_step,
        "step_time_s": e.step_time_s,
        "staleness_mean": e.staleness_mean,
        "staleness_max": e.staleness_max,
        "idle_fraction": e.idle_fraction,
        "tail_fraction": e.tail_fraction,
        "decode_occupancy": e.decode_occupancy,
        "provider": c.provider,
        "product": c.product,
        "pricing": c.pricing,
        "usd_per_gpu_hour": c.usd_per_gpu_hour,
        "observed": c.observed,
        "stale_price": c.stale,
        "feasible": e.candidate.index in feasible,
        "frontier": e.candidate.index in frontier,
    }


def dominates(a: Evaluation, b: Evaluation) -> bool:
    """a is at most b on run hours, dollars and mean staleness, and below it on one."""
    xa = (a.run_hours, a.run_usd, a.staleness_mean)
    xb = (b.run_hours, b.run_usd, b.staleness_mean)
    return all(p <= q for p, q in zip(xa, xb, strict=True)) and xa != xb


def pareto_frontier(evals: Sequence[Evaluation]) -> list[Evaluation]:
    """The non-dominated evaluations, fastest first (a sort, then one pass per survivor)."""
    ordered = sorted(evals, key=lambda e: (e.run_hours, e.run_usd, e.staleness_mean, e.candidate.index))
    front: list[Evaluation] = []
    for e in ordered:  # anything dominating e sorts before it
        if not any(dominates(f, e) for f in front):
            front.append(e)
    return front


def objective_key(objective: str) -> Callable[[Evaluation], tuple[float, float, float, int]]:
    if objective == "cost":
        return lambda e: (e.run_usd, e.run_hours, e.staleness_mean, e.candidate.index)
    if objective == "time":
        return lambda e: (e.run_hours, e.run_usd, e.staleness_mean, e.candidate.index)
    raise ScenarioError("--objective", f"unknown objective '{objective}'; choose cost or time")


def _evaluate(
    cand: Candidate,
    sc: Scenario,
    points: list[tuple[float, SimOutcome]],
    prices: dict[str, PriceRow],
    run_steps: int,
) -> Evaluation:
    metrics = [o.metrics for _, o in points]
    proj = project_points(
        [(f, m) for (f, _), m in zip(points, metrics, strict=True)],
        run_steps,
        fill_steps=sc.pipeline.depth + 1,
    )
    row = prices[price_key(cand)]
    if proj.pools:  # pools of several GPU types: each at its type's row of the plan's pricing class
        by_type = _type_prices(cand, sc, prices)
        pools = [s.model_copy(update={"usd_per_gpu_hour": by_type[s.gpu_type]}) for s in proj.pools]
        proj = proj.model_copy(update={"pools": pools})
    cost = price_projection(proj, row)
    idle = proj.idle_gpu_seconds / (proj.gpus * proj.wall_time_s)
    samples = sum(m.rollouts_per_s * m.wall_time_s for m in metrics)
    stale_mean = sum(m.staleness_mean * m.rollouts_per_s * m.wall_time_s for m in metrics) / samples
    if len(metrics) == 1:  # the simulated mean itself, not re-weighted (x * w / w may be x plus an ulp)
        stale_mean = metrics[0].staleness_mean
    return Evaluation(
        cand,
        cost,
        proj.wall_time_s / 3600.0,
        stale_mean,
        max(m.staleness_max for m in metrics),
        idle,
        metrics[0].steady_step_time_s,
        sum(m.tail_fraction for m in metrics) / len(metrics),
        sum(m.decode_occupancy for m in metrics) / len(metrics),
    )


def price_key(cand: Candidate, gpu: str | None = None) -> str:
    """The GPU (default the cluster's) and node size a price row must build, e.g. 'h100-sxm x8'."""
    return f"{gpu or cand.gpu} x{cand.gpus_per_node}"


def _pool_types(cand: Candidate, sc: Scenario) -> tuple[str, ...]:
    """Every GPU type the candidate's pools run on (a reward pool of the base's own type too)."""
    return tuple(dict.fromkeys((*cand.pool_types, *(p.gpu for p in pool_layout(sc)))))


def _type_prices(cand: Candidate, sc: Scenario, prices: dict[str, PriceRow]) -> dict[str, float]:
    """$/GPU-hour of each GPU type the candidate rents (the types were priced by `_prices`)."""
    out = {}
    for gpu in _pool_types(cand, sc):
        key = get_gpu(gpu).key
        out[gpu] = out[key] = prices[price_key(cand, key)].usd_per_gpu_hour
    return out


def candidate_usd_per_hour(cand: Candidate, sc: Scenario, prices: dict[str, PriceRow]) -> float:
    """Dollars per wall-clock hour of the candidate's rented GPUs: each pool at its type's price."""
    row = prices[price_key(cand)]
    if len(_pool_types(cand, sc)) == 1:
        return cand.gpus * row.usd_per_gpu_hour
    by_type = _type_prices(cand, sc, prices)
    own = [p for p in pool_layout(sc) if p.shares is None]
    spare = cand.gpus - sum(p.gpus for p in own)
    return sum(p.gpus * by_type[p.gpu] for p in own) + spare * row.usd_per_gpu_hour


def _pinned_types(base: Scenario, space: SearchSpace) -> tuple[str, ...]:
    """GPU types the base's pools keep in every candidate: a reward model's own pool, and a
    training or inference pool the scenario puts on its own type (unless the plan searches it)."""
    pipe = base.pipeline
    pinned = [("pipeline.training.gpu", pipe.training.gpu)]
    if not space.inference_gpu_types:
        pinned.append(("pipeline.inference.gpu", pipe.inference.gpu))
    pinned += [("pipeline.reward_model.gpu", p.gpu) for p in pool_layout(base) if p.name == REWARD]
    return tuple(dict.fromkeys(get_gpu(gpu, field=name).key for name, gpu in pinned if gpu is not None))


def _unpriced_type(cand: Candidate, extra_types: Sequence[str], prices: dict[str, PriceRow]) -> str | None:
    """The first GPU type of the candidate without a price row for its node size, if any."""
    return next((g for g in (*cand.pool_types, *extra_types) if price_key(cand, g) not in prices), None)


def _prices(
    cands: Sequence[Candidate], pricing: str, prices_file: str | Path | None, extra_types: Sequence[str] = ()
) -> dict[str, PriceRow]:
    """The cheapest row per GPU and node size whose instances build that node (see `assembles`),
    for the candidates' GPU types and `extra_types` (a reward pool's own type)."""
    rows = load_prices(prices_file)
    out = {}
    for cand in cands:
        for gpu in (*cand.pool_types, *extra_types):
            key = price_key(cand, gpu)
            if key not in out:
                row = cheapest_row(rows, gpu, pricing, gpus_per_node=cand.gpus_per_node)
                if row is not None:
                    out[key] = row
    searched = [(c.gpu, "--gpu-types") for c in cands] + [(c.inference_gpu, "--inference-gpu-types") for c in cands]
    for gpu, option in dict.fromkeys((g, o) for g, o in searched if g is not None):
        if not any(k.startswith(f"{gpu} x") for k in out):
            raise ScenarioError(
                option,
                f"no {pricing} price for GPU '{gpu}' in the catalog in instances any candidate "
                "can use; add one with --prices or drop it",
            )
    return out


def simulate_candidates(
    runnable: list[tuple[Candidate, Scenario]], executor: Executor, progress: Progress | None
) -> list[list[tuple[float, SimOutcome]]]:
    """Every sample point of every runnable candidate, through the executor, in candidate order."""
    samples = [sample_scenarios(sc, PLAN_SCHEDULE_POINTS) for _, sc in runnable]
    flat = [sc for points in samples for _, sc in points]
    outcomes = iter(executor.map(simulate_metrics, flat, progress))
    return [[(f, next(outcomes)) for f, _ in points] for points in samples]


def _simulate(
    runnable: list[tuple[Candidate, Scenario]],
    executor: Executor,
    progress: Progress | None,
    rows: dict[str, PriceRow],
    run_steps: int,
) -> tuple[list[Evaluation], list[Pruned]]:
    """Simulate and evaluate candidates; (evaluations, failed), in the order given."""
    evals, failed = [], []
    for (cand, sc), points in zip(runnable, simulate_candidates(runnable, executor, progress), strict=True):
        error = next((o.error for _, o in points if o.error), None)
        if error:
            failed.append(Pruned(cand, error))
        else:
            evals.append(_evaluate(cand, sc, points, rows, run_steps))
    return evals, failed


@dataclass(frozen=True)
class Bound:
    """A candidate's lower bounds on run hours, dollars and mean staleness (`rlsim.planner.bounds`)."""

    hours: float
    usd: float
    staleness_mean: float
    sim_s: tuple[float, float] | None = None  # one sample point: (simulated wall, steady step) floors (s)
    usd_per_hour: float = 0.0  # what the candidate's GPUs cost an hour (usd = hours x this)
    tail_s: float = 0.0  # one sample point: the last step's end - any released sequence's completion, floor (s)


def candidate_bound(
    cand: Candidate,
    sc: Scenario,
    row: PriceRow,
    run_steps: int,
    draws: BatchDraws,
    prices: dict[str, PriceRow] | None = None,
    resolved: Resolved | None = None,
) -> Bound:
    """`row` prices the cluster's GPU type; `prices` (by `price_key`) every type of a mixed
    candidate; `resolved` is `resolve(sc)` when the caller has it."""
    fractions = sample_fractions(sc, PLAN_SCHEDULE_POINTS)
    b = run_bound(sc, fractions, run_steps, draws, fill_steps=sc.pipeline.depth + 1, resolved=resolved)
    periodic = periodic_of(resolved or resolve(sc))  # evaluation and checkpoints: the projection's own term
    hours = (b.wall_s + (periodic.run_s(run_steps) if periodic is not None else 0.0)) / 3600.0
    per_hour = candidate_usd_per_hour(cand, sc, prices) if prices else cand.gpus * row.usd_per_gpu_hour
    return Bound(hours, hours * per_hour, b.staleness_mean, b.sim_s, per_hour, b.tail_s)


SCREEN_CHUNK = 64  # candidates per screening task: few enough tasks, yet both halves of a pool busy


def _screen_chunk(
    base: Scenario, pricing: tuple[dict[str, PriceRow], int] | None, cands: Sequence[Candidate]
) -> tuple[list[tuple[Scenario, Bound | None] | Pruned], list[tuple[type[Warning], str]]]:
    """`check` each candidate (`base` at the simulated steps) and, given (prices, run steps), bound
    the runnable ones on the placement `check` resolved (one task of `_screen`); with the warnings
    raised, for the caller to raise again (a worker process has no one-line printer)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _screen_each(base, pricing, cands)
    return out, [(w.category, str(w.message)) for w in caught]


def _screen_each(
    base: Scenario, pricing: tuple[dict[str, PriceRow], int] | None, cands: Sequence[Candidate]
) -> list[tuple[Scenario, Bound | None] | Pruned]:
    draws, scenarios = BatchDraws(), CandidateScenarios(base)
    out: list[tuple[Scenario, Bound | None] | Pruned] = []
    for cand in cands:
        checked = check(base, cand, scenarios)
        if isinstance(checked, Pruned):
            out.append(checked)
            continue
        sc, res = checked
        if pricing is None:
            out.append((sc, None))
            continue
        rows, run_steps = pricing
        out.append((sc, candidate_bound(cand, sc, rows[price_key(cand)], run_steps, draws, rows, res)))
    return out


def _screen(
    base: Scenario,
    cands: list[Candidate],
    sim_steps: int,
    executor: Executor,
    pricing: tuple[dict[str, PriceRow], int] | None,
) -> tuple[list[tuple[Candidate, Scenario]], list[Pruned], dict[int, Bound]]:
    """`candidates.prune` through the executor, with each runnable candidate's `Bound` when
    `pricing` is given: (runnable, pruned, bounds by index), in candidate order, as in one process."""
    base = base.model_copy(update={"steps": sim_steps})
    chunks = [cands[i : i + SCREEN_CHUNK] for i in range(0, len(cands), SCREEN_CHUNK)]
    results = executor.map(partial(_screen_chunk, base, pricing), chunks)
    for _, caught in results:  # as if checked here, in candidate order
        for category, text in caught:
            warnings.warn(text, category, stacklevel=2)
    runnable, pruned, bounds = [], [], {}
    for cand, out in zip(cands, (o for chunk, _ in results for o in chunk), strict=True):
        if isinstance(out, Pruned):
            pruned.append(out)
            continue
        runnable.append((cand, out[0]))
        if out[1] is not None:
            bounds[cand.index] = out[1]
    return runnable, pruned, bounds


def skip_reason(
    b: Bound, front: list[Evaluation], second: Evaluation | None, c: Constraints, objective: str
) -> str | None:
    """Why simulating a candidate of bound b cannot change the plan's result (None: it may).

    It must be infeasible, or dominated by a simulated feasible candidate (its true point is at
    least its bound, so it is never on the frontier) and rank after two simulated feasible ones
    of different outcomes (so it is neither the recommendation, a tie of it, nor the runner-up).
    """
    if c.deadline_hours is not None and b.hours > c.deadline_hours:
        return f"infeasible: at least {b.hours:,.2f} h > --deadline-hours"
    if c.budget_usd is not None and b.usd > c.budget_usd:
        return f"infeasible: at least ${b.usd:,.2f} > --budget-usd"
    if second is None:
        return None
    primary = (b.usd, second.run_usd) if objective == "cost" else (b.hours, second.run_hours)
    if not primary[0] > primary[1]:
        return None
    for f in front:
        if (
            f.run_hours <= b.hours
            and f.run_usd <= b.usd
            and f.staleness_mean <= b.staleness_mean
            and (f.run_hours < b.hours or f.run_usd < b.usd)
        ):
            return f"at least {b.hours:,.2f} h and ${b.usd:,.2f}: dominated by #{f.candidate.index}"
    return None


def simulate_points(scenarios: list[Scenario]) -> list[SimOutcome]:
    """Every sample point of one candidate (a task of the bounded search)."""
    return [simulate_metrics(sc) for sc in scenarios]


def simulate_watched(item: tuple[Scenario, Watch]) -> list[SimOutcome]:
    """One candidate of one sample point under a watch that may stop it (a task of the bounded search)."""
    sc, watch = item
    return [simulate_metrics(sc, watch)]


class _Visible:
    """The simulated results a skip decision may use: whether any is feasible, the frontier of
    the feasible ones and the second best of a different outcome, kept up to date as they come."""

    def __init__(self, constraints: Constraints, objective: str) -> None:
        self.constraints, self.key = constraints, objective_key(objective)
        self.feasible = 0
        self.front: list[Evaluation] = []  # the non-dominated feasible ones (in no order)
        self.best: Evaluation | None = None
        self.second: Evaluation | None = None

    def add(self, e: Evaluation) -> None:
        if e.violations(self.constraints):
            return
        self.feasible += 1
        if not any(dominates(f, e) for f in self.front):
            self.front = [f for f in self.front if not dominates(e, f)] + [e]
        best, key = self.best, self.key
        if best is None:
            self.best = e
        elif key(e) < key(best):
            if _outcome(e) != _outcome(best):
                self.second = best  # the next in order after e, and of another outcome
            self.best = e
        elif _outcome(e) != _outcome(best) and (self.second is None or key(e) < key(self.second)):
            self.second = e


def search_order(
    runnable: list[tuple[Candidate, Scenario]], bounds: dict[int, Bound], objective: str
) -> list[tuple[Candidate, Scenario]]:
    """The bounded search's order: by the bound on the objective, then the other figure, then index.

    A candidate that dominates another is at most its bound on every figure, so it comes first
    (`LOOKAHEAD` places apart, its result is seen in time to skip the other)."""
    first = (lambda b: (b.usd, b.hours)) if objective == "cost" else (lambda b: (b.hours, b.usd))
    return sorted(runnable, key=lambda cs: (*first(bounds[cs[0].index]), cs[0].index))


def _branch_and_bound(
    runnable: list[tuple[Candidate, Scenario]],
    bounds: dict[int, Bound],
    executor: Executor,
    progress: Progress | None,
    rows: dict[str, PriceRow],
    run_steps: int,
    constraints: Constraints,
    objective: str,
) -> tuple[list[Evaluation], list[Pruned], list[Pruned]]:
    """Simulate most promising bound first; skip what the simulated ones already settle.

    The i-th candidate in bound order is decided on the results of the candidates before
    position i - LOOKAHEAD only, so up to LOOKAHEAD simulations run at once and which
    candidates are skipped never depends on the executor or on timing. Returns (evaluations,
    failed, skipped), in candidate order. When no simulated candidate is feasible, the skipped
    ones are simulated too, so the report of the closest miss is the exhaustive one.
    """
    order = search_order(runnable, bounds, objective)
    visible = _Visible(constraints, objective)
    limited = constraints.deadline_hours is not None or constraints.budget_usd is not None
    handles: dict[int, tuple[Candidate, Scenario, list[float], Pending]] = {}
    outcomes: dict[int, Evaluation | Pruned] = {}
    skipped: list[tuple[Candidate, Scenario, str]] = []
    total = len(order)

    def settle(pos: int) -> None:
        """Collect position pos's result (if it was simulated) and let later decisions see it."""
        if pos not in handles:
            return
        cand, sc, fractions, handle = handles.pop(pos)
        points = list(zip(fractions, handle.result(), strict=True))
        stopped = next((o.stopped for _, o in points if o.stopped), None)
        if stopped is not None:  # its results so far settled it: as if its bound had
            skipped.append((cand, sc, stopped))
            if progress:
                progress(len(outcomes) + len(skipped), total)
            return
        error = next((o.error for _, o in points if o.error), None)
        outcome = Pruned(cand, error) if error else _evaluate(cand, sc, points, rows, run_steps)
        outcomes[pos] = outcome
        if isinstance(outcome, Evaluation):
            visible.add(outcome)
        if progress:
            progress(len(outcomes) + len(skipped), total)

    with submitter(executor) as sub:
        for i, (cand, sc) in enumerate(order):
            if i - LOOKAHEAD - 1 >= 0:
                settle(i - LOOKAHEAD - 1)
            b = bounds[cand.index]
            why = skip_reason(b, visible.front, visible.second, constraints, objective)
            if why is not None:
                skipped.append((cand, sc, why))
                continue
            samples = sample_scenarios(sc, PLAN_SCHEDULE_POINTS)
            fractions = [f for f, _ in samples]
            if WATCH and len(samples) == 1 and b.sim_s is not None and (visible.second is not None or limited):
                settle_on = Settle(tuple(visible.front), visible.second, constraints, objective)
                handle = sub.submit(simulate_watched, (sc, Watch(sc, b, run_steps, settle_on)))
            else:
                handle = sub.submit(simulate_points, [x for _, x in samples])
            handles[i] = (cand, sc, fractions, handle)
        for pos in sorted(handles):
            settle(pos)
    evals = [o for o in outcomes.values() if isinstance(o, Evaluation)]
    failed = [o for o in outcomes.values() if isinstance(o, Pruned)]
    if skipped and not visible.feasible:  # nothing feasible yet: the exhaustive report
        more, bad = _simulate([(c, sc) for c, sc, _ in skipped], executor, progress, rows, run_steps)
        evals, failed, skipped = evals + more, failed + bad, []
    evals.sort(key=lambda e: e.candidate.index)
    failed.sort(key=lambda p: p.candidate.index)
    out = sorted((Pruned(c, why) for c, _, why in skipped), key=lambda p: p.candidate.index)
    return evals, failed, out


def plan(
    base: Scenario,
    space: SearchSpace,
    *,
    constraints: Constraints = Constraints(),
    objective: str = "cost",
    sim_steps: int = 4,
    run_steps: int | None = None,
    pricing: str = "on_demand",
    prices_file: str | Path | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    exhaustive: bool = False,
) -> PlanResult:
    """Generate, prune, simulate, constrain; raises ScenarioError when nothing is feasible.

    By default candidates are simulated most promising first and one whose lower bound is
    already dominated is skipped (`_branch_and_bound`); `exhaustive=True` simulates them all.
    Both give the same frontier, recommendation, runner-up and ties.
    """
    key = objective_key(objective)
    if sim_steps < 1:
        raise ScenarioError("--steps", f"must be >= 1, got {sim_steps}")
    run_steps = run_length(base, run_steps, "--steps-run")
    t0 = time.perf_counter()
    cands = generate(base, space)
    extra = _pinned_types(base, space)
    prices = _prices(cands, pricing, prices_file, extra)
    missing = {c.index: _unpriced_type(c, extra, prices) for c in cands}
    unpriced = [c for c in cands if missing[c.index]]
    cls = pricing.replace("_", "-")
    pool = executor or LocalExecutor()
    rows = prices
    priced = [c for c in cands if not missing[c.index]]
    screener = pool if isinstance(pool, LocalExecutor) else LocalExecutor(1)  # a Ray map starts Ray (~5 s)
    runnable, pruned, bounds = _screen(base, priced, sim_steps, screener, None if exhaustive else (rows, run_steps))
    pruned += [
        Pruned(c, f"no {cls} product rents {c.gpus_per_node}x {missing[c.index]} as one instance") for c in unpriced
    ]
    pruned.sort(key=lambda p: p.candidate.index)
    if not runnable:
        example = pruned[0].reason if pruned else "the search space is empty"
        raise ScenarioError("--max-gpus", f"none of {len(cands)} configurations can run; e.g. {example}")
    t1 = time.perf_counter()
    if exhaustive:
        evals, failed = _simulate(runnable, pool, progress, rows, run_steps)
        skipped: list[Pruned] = []
    else:
        evals, failed, skipped = _branch_and_bound(
            runnable, bounds, pool, progress, rows, run_steps, constraints, objective
        )
    t2 = time.perf_counter()
    feasible = [e for e in evals if not e.violations(constraints)]
    if not feasible:
        raise ScenarioError(*_infeasible(evals, constraints, run_steps))
    ranked = sorted(feasible, key=key)
    best = ranked[0]
    ties = [e for e in ranked[1:] if _outcome(e) == _outcome(best)]
    second = next((e for e in ranked[1:] if _outcome(e) != _outcome(best)), None)
    return PlanResult(
        scenario=base.name, objective=objective, constraints=constraints, sim_steps=sim_steps,
        run_steps=run_steps, pricing=pricing, candidates=len(cands), pruned=pruned, failed=failed,
        evaluations=evals, feasible=feasible, frontier=pareto_frontier(feasible), recommended=best,
        runner_up=second, reason=_reason(best, second, ties, objective, constraints, len(feasible), len(skipped)),
        prices=prices, skipped=skipped,
        timings_s={"prune": t1 - t0, "simulate": t2 - t1, "rank": time.perf_counter() - t2},
    )  # fmt: skip


def _outcome(e: Evaluation) -> tuple[float, float, float]:
    return (e.run_hours, e.run_usd, e.staleness_mean)


def _summary(e: Evaluation) -> str:
    return (
        f"{e.candidate.label}: {e.run_hours:,.2f} h, ${e.run_usd:,.2f}, "
        f"staleness {e.staleness_mean:.2f} mean / {e.staleness_max} max"
    )


def _infeasible(evals: list[Evaluation], c: Constraints, run_steps: int) -> tuple[str, str]:
    """(binding option(s), message) when no simulated candidate meets every constraint."""
    if not evals:
        return "--max-gpus", "no candidate could be simulated"
    alone = {
        "--deadline-hours": Constraints(deadline_hours=c.deadline_hours),
        "--budget-usd": Constraints(budget_usd=c.budget_usd),
        "--max-staleness": Constraints(max_staleness=c.max_staleness),
    }
    limits = {
        "--deadline-hours": f"{c.deadline_hours or 0:,g} h",
        "--budget-usd": f"${c.budget_usd or 0:,g}",
        "--max-staleness": f"{c.max_staleness}",
    }
    given = [
        name for name, v in zip(alone, (c.deadline_hours, c.budget_usd, c.max_staleness), strict=True) if v is not None
    ]
    binding = [name for name in given if not any(not e.violations(alone[name]) for e in evals)]
    closest = min(evals, key=lambda e: (sum(e.violations(c).values()), e.candidate.index))
    if binding:
        names = ", ".join(f"{n} {limits[n]}" for n in binding)
        what = f"no simulated configuration meets {names}"
    else:
        names = " and ".join(f"{n} {limits[n]}" for n in given)
        what = f"each constraint alone can be met, but no configuration meets {names} together"
        binding = given
    return (
        "/".join(binding),
        f"{what} for a {run_steps}-step run (of {len(evals)} simulated); closest: {_summary(closest)}",
    )


def _reason(
    best: Evaluation,
    second: Evaluation | None,
    ties: list[Evaluation],
    objective: str,
    c: Constraints,
    n: int,
    skipped: int = 0,
) -> str:
    limits = [
        f"deadline {c.deadline_hours:,g} h" if c.deadline_hours is not None else "",
        f"budget ${c.budget_usd:,g}" if c.budget_usd is not None else "",
        f"staleness <= {c.max_staleness}" if c.max_staleness is not None else "",
    ]
    meets = ", ".join(x for x in limits if x) or "no constraints"
    word = "cheapest" if objective == "cost" else "fastest"
    text = f"the {word} of {n} feasible configurations ({meets})"
    if skipped:
        text = (
            f"the {word} of {n} feasible simulated configurations ({meets}; {skipped} more not "
            "simulated: their lower bound is dominated)"
        )
    if ties:  # e.g. a buffer deeper than the simulated steps changes nothing
        text += f"; {len(ties)} other(s) give identical results, e.g. {ties[0].candidate.label} (lowest index kept)"
    if best.cost.stale:
        text += (
            f"; its price ({best.cost.provider} {best.cost.product}, observed "
            f"{best.cost.observed}) is over a year old or undated: check it"
        )
    if second is None:
        return text + "; no runner-up"
    dh = 100 * (second.run_hours / best.run_hours - 1)
    du = 100 * (second.run_usd / best.run_usd - 1)
    return (
        f"{text}; runner-up {second.candidate.label} takes {second.run_hours:,.2f} h ({dh:+.1f}%) "
        f"and costs ${second.run_usd:,.2f} ({du:+.1f}%)"
    )
