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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
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
    stopped: str | None = None  # why a watch stopped the simulation (`simulate`'s watch)


def simulate_metrics(scenario: Scenario, watch: Any = None) -> SimOutcome:
    """Simulate and summarize; a scenario that cannot run gives an error line, not an exception.

    rlsim warnings are silenced here: a worker process has no one-line printer, and the caller
    checks the scenario (and warns) before handing its variants to workers. With `watch`
    (`rlsim.simulator.run.simulate`'s), a run it stops gives its reason and no metrics.
    """
    from rlsim.simulator.run import Stopped, simulate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsimWarning)
        try:
            result = simulate(scenario, watch=watch)
            if isinstance(result, Stopped):
                return SimOutcome(None, None, result.reason)
            return SimOutcome(summarize(result), None)
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


class Pending(Protocol):
    def result(self) -> Any: ...


class Submitter(Protocol):
    """Items submitted one at a time, results asked for later (the planner's bounded search)."""

    def submit(self, fn: Callable[[Any], Any], item: Any) -> Pending: ...


@dataclass
class _Done:
    value: Any

    def result(self) -> Any:
        return self.value


class _Deferred:
    """A result of `Batched`: asking for it runs every item submitted so far in one map."""

    def __init__(self, owner: Batched) -> None:
        self.owner, self.value, self.ready = owner, None, False

    def result(self) -> Any:
        if not self.ready:
            self.owner.flush()
        return self.value


class Batched:
    """Any executor as a `Submitter`: submissions wait, then run together through its `map`."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.waiting: list[tuple[Callable[[Any], Any], Any, _Deferred]] = []

    def submit(self, fn: Callable[[Any], Any], item: Any) -> Pending:
        handle = _Deferred(self)
        self.waiting.append((fn, item, handle))
        return handle

    def flush(self) -> None:
        """Run what waits: one `map` per function (a plan submits whole and watched simulations)."""
        batch, self.waiting = self.waiting, []
        for fn in dict.fromkeys(f for f, _, _ in batch):  # in first-submission order
            part = [(item, handle) for f, item, handle in batch if f is fn]
            values = self.executor.map(fn, [item for item, _ in part])
            for (_, handle), value in zip(part, values, strict=True):
                handle.value, handle.ready = value, True


@contextmanager
def submitter(executor: Executor) -> Iterator[Submitter]:
    """A `Submitter` over the executor: the local pool's own, else `Batched`."""
    if isinstance(executor, LocalExecutor):
        with executor.stream() as sub:
            yield sub
    else:
        yield Batched(executor)


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

    @contextmanager
    def stream(self) -> Iterator[Submitter]:
        """One pool for items submitted one by one (killed, not waited for, on an error)."""
        workers = max(1, self.workers or os.cpu_count() or 1)
        if workers == 1:
            yield _Inline()
            return
        pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),))
        try:
            yield _Pooled(pool)
        except BaseException:
            _kill_workers(pool)
            raise
        pool.shutdown()


class _Inline:
    def submit(self, fn: Callable[[Any], Any], item: Any) -> Pending:
        return _Done(fn(item))


class _Pooled:
    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool

    def submit(self, fn: Callable[[Any], Any], item: Any) -> Pending:
        return self.pool.submit(fn, item)


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

    Without an address, `ray.init()` would join the latest cluster this machine started (its
    /tmp/ray/ray_current_cluster), whose workers may run another process's code; so the local
    instance is asked for by name. Workers must be able to import `rlsim` (installed on every node
    of a remote cluster).
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
                ray.init(  # "local": a new instance, not the latest cluster this machine started
                    address="local",
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
