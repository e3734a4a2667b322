"""Where simulations run: in this process, a local process pool, or a Ray cluster.

An executor maps a top-level (picklable) function over a list of items and returns the results
in the items' order, whatever order workers finish in, so the planner's output never depends on
the executor. Items travel in chunks (fewer round trips); `progress(done, total)` is called in
the caller's process as chunks finish. Ray is an optional extra (`pip install 'rlsim[ray]'`),
imported only when its executor runs.

Local workers die with their parent (`rlsim.interrupts.die_with_parent`) and ignore Ctrl-C; when
the parent's map is interrupted (Ctrl-C, SIGTERM turned into an exception by the command) or
fails, the workers are killed at once rather than waited for, so no simulation outlives it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol

from rlsim.errors import ScenarioError
from rlsim.interrupts import die_with_parent
from rlsim.metrics.summary import RunMetrics, summarize
from rlsim.notices import RlsimWarning
from rlsim.scenario import Scenario

Progress = Callable[[int, int], None]
EXECUTORS = ("local", "ray")
MAX_WORKERS = 1024


@dataclass(frozen=True)
class SimOutcome:
    """One simulation's metrics, or why it could not run."""

    metrics: RunMetrics | None
    error: str | None


def simulate_metrics(scenario: Scenario) -> SimOutcome:
    """Simulate and summarize; a scenario that cannot run gives an error line, not an exception.

    rlsim warnings are silenced here: a worker process has no one-line printer, and the caller
    checks the scenario (and warns) before handing its variants to workers.
    """
    from rlsim.simulator.run import simulate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsimWarning)
        try:
            return SimOutcome(summarize(simulate(scenario)), None)
        except (ScenarioError, RuntimeError, ArithmeticError) as exc:
            return SimOutcome(None, str(exc))


def _run_chunk(fn: Callable[[Any], Any], chunk: Sequence[Any]) -> list[Any]:
    return [fn(item) for item in chunk]


def _chunks(items: Sequence[Any], workers: int) -> list[Sequence[Any]]:
    """About 8 chunks per worker: small enough to balance uneven simulations, yet batched."""
    size = max(1, len(items) // (8 * workers))
    return [items[i : i + size] for i in range(0, len(items), size)]


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress | None = None) -> list[Any]: ...


@dataclass
class LocalExecutor:
    """A process pool on this machine (`workers` processes; 1 runs in this process)."""

    workers: int | None = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress | None = None) -> list[Any]:
        workers = max(1, min(self.workers or os.cpu_count() or 1, len(items)))
        if workers == 1:
            out = []
            for item in items:
                out.append(fn(item))
                if progress:
                    progress(len(out), len(items))
            return out
        chunks = _chunks(items, workers)
        results: list[list[Any] | None] = [None] * len(chunks)
        done = 0
        pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),))
        try:
            futures = {pool.submit(_run_chunk, fn, c): i for i, c in enumerate(chunks)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                done += len(chunks[futures[fut]])
                if progress:
                    progress(done, len(items))
        except BaseException:
            _kill_workers(pool)
            raise
        pool.shutdown()
        return [r for chunk in results for r in chunk]  # type: ignore[union-attr]


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: kill its workers (a running chunk could take minutes), then shut it down.

    With its workers dead the pool's manager thread ends at once, so waiting for it is quick;
    not waiting leaves it to an exit hook that then writes to a closed pipe.
    """
    # no public API for a pool's processes before Python 3.14 (kill_workers)
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        p.kill()
    for p in processes:
        p.join(timeout=5.0)
    pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class RayExecutor:
    """Ray tasks: on the cluster at `address`, or on a local instance started (and stopped) here.

    Workers must be able to import `rlsim` (installed on every node of a remote cluster).
    """

    address: str | None = None
    workers: int | None = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress | None = None) -> list[Any]:
        ray = _import_ray()
        started = not ray.is_initialized()
        if started:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=self.workers or os.cpu_count(),
                    include_dashboard=False,
                    log_to_driver=False,
                )
        try:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
            chunks = _chunks(items, workers)
            task = ray.remote(_run_chunk)
            refs = {task.remote(fn, c): i for i, c in enumerate(chunks)}
            results: list[list[Any] | None] = [None] * len(chunks)
            pending, done = list(refs), 0
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                i = refs[ready[0]]
                results[i] = ray.get(ready[0])
                done += len(chunks[i])
                if progress:
                    progress(done, len(items))
            return [r for chunk in results for r in chunk]  # type: ignore[union-attr]
        finally:
            if started:
                ray.shutdown()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ScenarioError("--executor", "ray is not installed; install the extra: pip install 'rlsim[ray]'") from None
    return ray


def make_executor(kind: str = "local", *, workers: int | None = None, address: str | None = None) -> Executor:
    """The executor named on the command line ('local' or 'ray')."""
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ScenarioError("--workers", f"must be between 1 and {MAX_WORKERS}, got {workers}")
    if kind == "local":
        if address:
            raise ScenarioError("--ray-address", "only used with --executor ray")
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise ScenarioError("--executor", f"unknown executor '{kind}'; choose from {', '.join(EXECUTORS)}")
