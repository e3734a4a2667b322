"""How fast `rlsim plan` searches: >= 1,000 candidate configurations on this machine.

With --compare, the plan runs twice: exhaustively (every runnable candidate simulated) and with
the lower-bound search (`rlsim.planner.bounds`: most promising first, candidates a bound rules
out skipped); it prints both wall times, the ratio, the counts, and whether the frontier,
recommendation and runner-up are the same (they must be).

The plan is the long-CoT example (32B model, 64 prompts x 8 completions, responses up to 32K
tokens) on up to 16 GPUs of three types (H100 SXM, H200, B200): every mode, split, inference
TP, buffer depth and sync interval of the default search space. Prints the candidates
generated, pruned (placement cannot run: no simulation) and simulated, the wall and CPU time
of each phase, and configurations per second. CPU seconds include the worker processes, so
they stay meaningful on a machine shared with other jobs.

    python benchmarks/bench_plan.py [--workers N] [--steps 4] [--executor local|ray]
    python benchmarks/bench_plan.py --scenario long-cot --gpu-types h100-sxm --max-gpus 128 --compare \
        --keep /tmp/plan128.pkl  # the exhaustive side once (~800 CPU-s), then only the bounded one
    python benchmarks/bench_plan.py --scenario long-cot --gpu-types h100-sxm --max-gpus 128 --replay \
        --keep /tmp/plan128.pkl  # no simulation: the bounded search replayed on the kept results

With --replay, the kept exhaustive plan is searched again with this checkout's bounds and order,
each simulation answered from the kept results: it prints how many candidates the search would
simulate and skip (deterministic, unlike wall time on a shared machine), whether every bound is
at most its simulation, and how tight the bounds are by mode, depth, TP and split.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import resource
import statistics
import time
from dataclasses import asdict

from rlsim.planner import search
from rlsim.planner.bounds import BatchDraws
from rlsim.planner.candidates import SearchSpace, generate, prune
from rlsim.planner.executors import SimOutcome, make_executor
from rlsim.planner.search import Bound, candidate_bound, plan, price_key, skip_reason
from rlsim.scenario import load_scenario

GPU_TYPES = ("h100-sxm", "h200", "b200")


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the local pool's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="long-cot")
    ap.add_argument("--max-gpus", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="RL steps simulated per candidate.")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--executor", default="local")
    ap.add_argument("--gpu-types", default=",".join(GPU_TYPES))
    ap.add_argument("--exhaustive", action="store_true", help="Simulate every candidate (no bound).")
    ap.add_argument("--compare", action="store_true", help="Run exhaustive, then bounded; compare.")
    ap.add_argument("--keep", help="With --compare: a file the exhaustive plan is read from, or written to.")
    ap.add_argument("--replay", action="store_true", help="With --keep: replay the bounded search on it.")
    args = ap.parse_args()
    gpu_types = tuple(args.gpu_types.split(","))

    base = load_scenario(args.scenario)
    pool = make_executor(args.executor, workers=args.workers)
    space = SearchSpace(args.max_gpus, gpu_types)
    if args.replay:
        _replay(base, space, args.steps, args.keep)
        return
    if args.compare:
        _compare(base, space, args.steps, pool, args.keep)
        return
    cpu0, t0 = _cpu_s(), time.perf_counter()
    result = plan(base, space, sim_steps=args.steps, executor=pool, exhaustive=args.exhaustive)
    wall_s, cpu_s = time.perf_counter() - t0, _cpu_s() - cpu0
    t = result.timings_s
    n, pruned = result.candidates, len(result.pruned)
    simulated = len(result.evaluations) + len(result.failed)

    load = os.getloadavg()[0]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}; "
        f"executor {args.executor}, {args.workers} workers"
    )
    print(
        f"scenario {base.name}: <= {args.max_gpus} GPUs of {', '.join(gpu_types)}; "
        f"{args.steps} steps simulated per candidate"
    )
    print(f"candidates: {n} generated")
    print(
        f"  pruned before simulation: {pruned} ({t['prune']:.2f} s to generate and check all "
        f"{n}: {n / t['prune']:,.0f} configurations/s)"
    )
    stopped = sum(p.reason.startswith("stopped at") for p in result.skipped)
    print(
        f"  skipped by the lower bound: {len(result.skipped)} ({len(result.skipped) - stopped} not simulated, "
        f"{stopped} simulations stopped under way by their watched bound)"
    )
    print(
        f"  simulated: {simulated} in {t['simulate']:.1f} s "
        f"({simulated / t['simulate']:.1f} simulations/s; {len(result.failed)} failed)"
    )
    print(
        f"plan: {wall_s:.1f} s wall, {cpu_s:.1f} CPU-s, for {n} configurations "
        f"({n / wall_s:.1f} configurations/s; {simulated / cpu_s:.1f} simulations per CPU-s)"
    )
    print(f"frontier: {len(result.frontier)}; recommended: {result.recommended.candidate.label}")


def _compare(base, space: SearchSpace, steps: int, pool, keep: str | None = None) -> None:
    """Exhaustive and bounded plans of the same space: wall times, counts, identical results.

    With `keep`, the exhaustive plan (and its wall and CPU time) is read from that file when it
    holds this scenario, space and step count, else run and written there: it is the slow side,
    and it does not change when only the bounds do."""
    runs = {}
    key = (base.model_dump_json(), space, steps)
    if keep and os.path.exists(keep):
        with open(keep, "rb") as f:
            saved_key, saved = pickle.load(f)
        if saved_key == key:
            runs["exhaustive"] = saved
            print(f"exhaustive plan read from {keep} (its times are those of the run that wrote it)")
    for name, exhaustive in (("exhaustive", True), ("bounded", False)):
        if name in runs:
            continue
        cpu0, t0 = _cpu_s(), time.perf_counter()
        runs[name] = plan(base, space, sim_steps=steps, executor=pool, exhaustive=exhaustive)
        runs[name].timings_s["wall"] = time.perf_counter() - t0
        runs[name].timings_s["cpu"] = _cpu_s() - cpu0
        if exhaustive and keep:
            with open(keep, "wb") as f:
                pickle.dump((key, runs[name]), f)
    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}")
    print(f"scenario {base.name}: <= {space.max_gpus} GPUs of {', '.join(space.gpu_types)}; {steps} steps")
    for name, r in runs.items():
        simulated = len(r.evaluations) + len(r.failed)
        stopped = sum(p.reason.startswith("stopped at") for p in r.skipped)
        print(
            f"  {name:10s}: {r.timings_s['wall']:6.1f} s wall, {r.timings_s['cpu']:6.1f} CPU-s "
            f"({r.timings_s['simulate']:.1f} s simulating); "
            f"{r.candidates} candidates, {len(r.pruned)} pruned, {simulated} simulated to the end, "
            f"{len(r.skipped)} skipped ({stopped} of them stopped under way)"
        )
    ex, bd = runs["exhaustive"], runs["bounded"]
    print(
        f"  speed-up: {ex.timings_s['wall'] / bd.timings_s['wall']:.2f}x wall, "
        f"{ex.timings_s['cpu'] / bd.timings_s['cpu']:.2f}x CPU"
    )

    def ids(r):
        return (
            [e.candidate.index for e in r.frontier],
            r.recommended.candidate.index,
            r.runner_up.candidate.index if r.runner_up else None,
        )

    same = ids(ex) == ids(bd) and [asdict(e) for e in ex.frontier] == [asdict(e) for e in bd.frontier]
    print(f"  same frontier ({len(ex.frontier)}), recommendation and runner-up: {same}")
    _bound_report(base, space, steps, ex)


def _kept(base, space: SearchSpace, steps: int, keep: str | None):
    """The exhaustive plan `_compare` kept in `keep` for this scenario, space and steps."""
    if not keep or not os.path.exists(keep):
        raise SystemExit("--replay needs --keep FILE written by --compare on the same scenario and space")
    with open(keep, "rb") as f:
        saved_key, saved = pickle.load(f)
    if saved_key != (base.model_dump_json(), space, steps):
        raise SystemExit(f"--keep {keep}: written for another scenario, space or step count")
    return saved


class _Answered:
    """An executor that simulates nothing: each candidate's points come back empty, and the
    search's evaluation is the kept exhaustive one (`search._evaluate` is swapped for a lookup)."""

    def map(self, fn, items, progress=None):
        return [[SimOutcome(None, None) for _ in points] for points in items]


def _replayed(base, space: SearchSpace, steps: int, ex, lookahead: int | None = None, oracle: bool = False):
    """The bounded plan with every simulation answered from `ex`; optionally another look-ahead,
    or candidates taken in the order of their simulated objective (an oracle: the best any order
    on these bounds can do)."""
    by_index = {e.candidate.index: e for e in ex.evaluations}
    key = search.objective_key(ex.objective)
    saved = search._evaluate, search.LOOKAHEAD, search.search_order, search.WATCH
    search._evaluate = lambda cand, sc, points, rows, run_steps: by_index[cand.index]
    search.WATCH = False  # nothing is simulated: no simulation to stop under way
    if lookahead is not None:
        search.LOOKAHEAD = lookahead
    if oracle:

        def by_outcome(runnable, bounds, objective):
            return sorted(runnable, key=lambda cs: key(by_index[cs[0].index]))

        search.search_order = by_outcome
    try:
        return plan(base, space, sim_steps=steps, executor=_Answered(), objective=ex.objective,
                    constraints=ex.constraints, run_steps=ex.run_steps)  # fmt: skip
    finally:
        search._evaluate, search.LOOKAHEAD, search.search_order, search.WATCH = saved


def _replay(base, space: SearchSpace, steps: int, keep: str | None) -> None:
    """The bounded search on the kept exhaustive plan: this checkout's bounds and order, every
    simulation answered from the kept results; the counts, the result check, the bounds' slack."""
    ex = _kept(base, space, steps, keep)
    t0 = time.perf_counter()
    bd = _replayed(base, space, steps, ex)
    wall_s = time.perf_counter() - t0
    simulated = len(bd.evaluations) + len(bd.failed)
    print(f"scenario {base.name}: <= {space.max_gpus} GPUs of {', '.join(space.gpu_types)}; {steps} steps")
    print(
        f"  replayed on {keep}: {bd.candidates} candidates, {len(bd.pruned)} pruned, {simulated} simulated, "
        f"{len(bd.skipped)} skipped ({wall_s:.1f} s to screen, bound and search; no simulation)"
    )
    same = [asdict(e) for e in ex.frontier] == [asdict(e) for e in bd.frontier] and (
        ex.recommended.candidate,
        ex.runner_up and ex.runner_up.candidate,
    ) == (bd.recommended.candidate, bd.runner_up and bd.runner_up.candidate)
    print(f"  same frontier ({len(ex.frontier)}), recommendation and runner-up as the exhaustive plan: {same}")
    print(f"  recommended: {bd.recommended.candidate.label}")
    for name, kw in (("look-ahead 0", {"lookahead": 0}), ("oracle order", {"oracle": True})):
        r = _replayed(base, space, steps, ex, **kw)
        print(f"  with {name}: {len(r.evaluations) + len(r.failed)} simulated, {len(r.skipped)} skipped")
    _slack_report(base, space, steps, ex, {e.candidate.index for e in bd.evaluations})


def _slack_report(base, space: SearchSpace, steps: int, ex, simulated: set[int]) -> None:
    """bound / simulated hours and staleness by mode and depth, TP and split; every bound at most
    its simulation; and the simulated candidates off the frontier (the waste), by mode."""
    runnable = dict((c.index, (c, sc)) for c, sc in prune(base, generate(base, space), steps)[0])
    draws = BatchDraws()
    frontier = {e.candidate.index for e in ex.frontier}
    groups: dict[str, dict[str, list[tuple[float, float, bool, bool]]]] = {"mode, depth": {}, "tp": {}, "split": {}}
    over = []
    for e in ex.evaluations:
        cand, sc = runnable[e.candidate.index]
        b = candidate_bound(cand, sc, ex.prices[price_key(cand)], ex.run_steps, draws, ex.prices)
        if b.hours > e.run_hours or b.usd > e.run_usd or b.staleness_mean > e.staleness_mean:
            over.append(cand.label)
        stale = b.staleness_mean / e.staleness_mean if e.staleness_mean > 0 else 1.0
        row = (b.hours / e.run_hours, stale, cand.index in simulated, cand.index in frontier)
        split = "shared" if cand.mode == "colocated" else f"{8 * cand.inference_gpus // cand.gpus}/8 inference"
        for name, key in (("mode, depth", f"{cand.mode} d{cand.buffer_depth or '-'}"), ("tp", f"tp{cand.inference_tp}"),
                          ("split", split)):  # fmt: skip
            groups[name].setdefault(key, []).append(row)
    print(f"  bounds above their simulation: {len(over)}{' e.g. ' + over[0] if over else ''}")
    print("  bound / simulated (median, min) of run hours and mean staleness; simulated; of them on the frontier:")
    for name, rows_by in groups.items():
        print(f"    by {name}:")
        for key, rows in sorted(rows_by.items()):
            hours = sorted(r[0] for r in rows)
            stale = sorted(r[1] for r in rows)
            print(
                f"      {key:16s} {len(rows):5d}: hours {statistics.median(hours):.2f}, {hours[0]:.2f}; staleness "
                f"{statistics.median(stale):.2f}, {stale[0]:.2f}; {sum(r[2] for r in rows):5d} simulated, "
                f"{sum(r[2] and r[3] for r in rows):3d} on the frontier"
            )


def _bound_report(base, space: SearchSpace, steps: int, ex) -> None:
    """How tight the lower bounds are, per mode, against the exhaustive plan's simulations; how
    many candidates the exhaustive frontier itself rules out on them (no order can skip more);
    and how many it would rule out were the staleness bound, or the hours and dollar bounds,
    exact (the headroom of each); and, for the rest, why not."""
    runnable = dict((c.index, (c, sc)) for c, sc in prune(base, generate(base, space), steps)[0])
    draws = BatchDraws()
    by_mode: dict[str, list[tuple[float, bool, bool, bool]]] = {}

    def ruled_out(b: Bound) -> bool:
        return skip_reason(b, ex.frontier, ex.runner_up, ex.constraints, ex.objective) is not None

    frontier = {e.candidate.index for e in ex.frontier}

    def why_kept(e, b: Bound) -> str:
        """Why the exhaustive frontier does not rule a candidate out on its bound."""
        second = ex.runner_up
        if e.candidate.index in frontier:
            return "on the frontier"
        if second is not None and not (b.usd if ex.objective == "cost" else b.hours) > (
            second.run_usd if ex.objective == "cost" else second.run_hours
        ):
            return "bound ranks before the runner-up"
        over = [
            f
            for f in ex.frontier
            if f.run_hours <= b.hours and f.run_usd <= b.usd and (f.run_hours < b.hours or f.run_usd < b.usd)
        ]
        if not over:
            return "hours and dollar bounds not dominated"
        if not any(f.staleness_mean <= b.staleness_mean for f in over):
            return "dominated on hours and dollars, staleness bound too low"
        return "ruled out"

    kept: dict[str, dict[str, int]] = {}

    for e in ex.evaluations:
        cand, sc = runnable[e.candidate.index]
        b = candidate_bound(cand, sc, ex.prices[price_key(cand)], ex.run_steps, draws, ex.prices)
        exact_staleness = Bound(b.hours, b.usd, e.staleness_mean)
        exact_hours = Bound(e.run_hours, e.run_usd, b.staleness_mean)
        row = (b.hours / e.run_hours, ruled_out(b), ruled_out(exact_staleness), ruled_out(exact_hours))
        by_mode.setdefault(cand.mode, []).append(row)
        reasons = kept.setdefault(cand.mode, {})
        reason = why_kept(e, b)
        reasons[reason] = reasons.get(reason, 0) + 1
    print(
        "  bound / simulated run hours, by mode (median, min); candidates the exhaustive frontier rules out "
        "on the bounds, and were the staleness bound or the hours and dollar bounds exact:"
    )
    totals = [0, 0, 0]
    for mode, rows in by_mode.items():
        ratios = sorted(r[0] for r in rows)
        ruled = [sum(r[k] for r in rows) for k in (1, 2, 3)]
        totals = [t + r for t, r in zip(totals, ruled, strict=True)]
        print(
            f"    {mode:12s} {len(rows):5d}: {statistics.median(ratios):.2f}, {ratios[0]:.2f}; "
            f"{ruled[0]} ruled out ({ruled[1]} exact staleness, {ruled[2]} exact hours and dollars)"
        )
    print(
        f"  at best {totals[0]} of {len(ex.evaluations)} skipped on these bounds ({totals[1]} with exact "
        f"staleness, {totals[2]} with exact hours and dollars)"
    )
    print("  why the others must be simulated, by mode:")
    for mode, reasons in kept.items():
        text = "; ".join(f"{n} {r}" for r, n in sorted(reasons.items()) if r != "ruled out")
        print(f"    {mode:12s} {text or 'none'}")


if __name__ == "__main__":
    main()
