"""Bulk commits settle the engine's batch lazily (planned.py `_commit_bulk`, `settle_refill`).

A flush at a group's completion stamps the plan's finishers and hands them on; the batch, the
queue and the logs wait until something reads them, and a sequence admitted and finished in
between never joins the batch's dict. Settling every flush (what the commits did before) must
leave everything as it is: the recorder's logs (the running batch's too) and token counts, and
every finished sequence as the route receives it (finish time, versions, tokens, engine).
"""

from __future__ import annotations

import pytest
from random_scenarios import agent_scenario, partial_scenario, queued_scenario, record

from rlsim.scenario import load_scenario
from rlsim.simulator import planned
from rlsim.simulator.engine import Engine
from rlsim.simulator.finishes import FinishLedger
from rlsim.simulator.reward import RewardPool
from rlsim.simulator.run import simulate

CASES = (
    [("queued", i) for i in range(8)]
    + [("default", m) for m in ("colocated", "sync", "one_step_off", "async")]
    + [("agent", i) for i in (0, 1, 2, 5)]  # 2 and 5: turns come back to a plan's unsettled batch
    + [("partial", i) for i in range(3)]
)


def _scenario(kind: str, arg):
    if kind == "queued":
        return queued_scenario(arg)
    if kind == "agent":
        return agent_scenario(arg)
    if kind == "partial":
        return partial_scenario(arg)
    over = ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=2"]
    return load_scenario("default", over).with_mode(arg)


def _run(sc, monkeypatch, eager: bool) -> tuple[dict, list[tuple]]:
    """(record, each finished sequence as the reward pool receives it) of a run; `eager`: every
    flush settles the engines' batches (as every commit did before they were settled lazily)."""
    seen: list[tuple] = []
    submit = RewardPool.submit

    def watching(self, seqs):
        for s in seqs:
            engine = s.engine.name if s.engine is not None else None
            seen.append((s.group.gid, s.index, s.finish_s, s.version_start, s.version_end, s.generated, engine))
        return submit(self, seqs)

    with monkeypatch.context() as m:
        m.setattr(RewardPool, "submit", watching)
        m.setattr(Engine, "plans_with_tool_calls", True)  # agent turns: plans around their tool calls too
        if eager:
            flush = FinishLedger.flush
            m.setattr(FinishLedger, "flush", lambda self, t, settle=True: flush(self, t, True))
        result = simulate(sc)
    running = {a: (list(t), list(b)) for a, (t, b) in result.recorder.running_samples.items()}
    return {**record(result), "running": running}, seen


@pytest.mark.parametrize("case", CASES)
def test_settling_lazily_leaves_what_settling_every_flush_leaves(case, monkeypatch) -> None:
    sc = _scenario(*case)
    lazy, lazy_seen = _run(sc, monkeypatch, eager=False)
    eager, eager_seen = _run(sc, monkeypatch, eager=True)
    assert lazy == eager
    assert lazy_seen == eager_seen
    assert lazy_seen  # something finished


def test_a_plans_commits_are_settled_a_few_times_not_at_each(monkeypatch) -> None:
    """The default at 256 x 16 in sync mode: hundreds of bulk commits (a group's completion
    each), their batch settled where the engine goes on after its plan or a reader looks."""
    sc = load_scenario("default", ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=1"])
    commits, settles = [0], [0]
    bulk, settle = planned._commit_bulk, planned.settle_refill

    def counting_commits(*args):
        commits[0] += 1
        return bulk(*args)

    def counting_settles(engine, r):
        settles[0] += r.applied < r.pos  # (one with nothing to apply does nothing)
        return settle(engine, r)

    monkeypatch.setattr(planned, "_commit_bulk", counting_commits)
    monkeypatch.setattr(planned, "settle_refill", counting_settles)
    simulate(sc.with_mode("sync"))
    assert settles[0] > 0
    assert commits[0] > 20 * settles[0]


def test_a_settled_batch_holds_what_runs_and_no_finished_sequence(monkeypatch) -> None:
    """At every settle, the engine's batch is exactly its plan's running sequences: those
    admitted by the step starting at the last commit's end, less those finished by then (none
    of which holds a finish time yet when it is still running)."""
    sc = load_scenario("default", ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=1"])
    settle = planned.settle_refill
    checked = [0]

    def checking(engine, r):
        settle(engine, r)
        running = engine.batch.running
        assert all(s.finish_s < 0 and s.engine is engine for s in running.values())
        assert len(running) == (r.logs.batch_at[r.pos] if r.pos <= r.last else len(running))
        assert list(running) == sorted(running)  # admission order
        checked[0] += 1

    monkeypatch.setattr(planned, "settle_refill", checking)
    simulate(sc.with_mode("sync"))
    assert checked[0] > 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_watch_sees_the_engines_as_settled_every_flush(mode, monkeypatch) -> None:
    """The planner's watch (run.py `_advance`) looks at the world mid-run: the engines' batches,
    queues and the sequences they admitted must be as every flush settling them leaves them."""
    sc = load_scenario("default", ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=2"])
    sc = sc.with_mode(mode)

    def looks(eager: bool) -> list:
        seen = []

        def look(w):
            seqs = [s.version_start for g in w.dispatcher.groups for s in g.sequences if s.engine is not None]
            engines = [(len(e.batch.running), e.batch.kv, e.batch.iters, len(e.queue.items)) for e in w.engines]
            seen.append((w.env.now, len(seqs), sum(seqs), engines))
            return w.env.now + 1.7

        with monkeypatch.context() as m:
            if eager:
                flush = FinishLedger.flush
                m.setattr(FinishLedger, "flush", lambda self, t, settle=True: flush(self, t, True))
            simulate(sc, watch=look)
        return seen

    lazy = looks(False)
    assert len(lazy) > 20
    assert lazy == looks(True)


def test_a_drains_commits_are_settled_a_few_times_not_at_each(monkeypatch) -> None:
    """Colocated at 256 x 16: each step's batches drain at its end, a commit (a group's
    completion) every few finishes, the batch settled where the drain ends or a reader looks;
    the settled batch log holds every commit's entry (its finishes, and the load at its time)."""
    sc = load_scenario("default", ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=1"])
    commits, settles = [0], [0]
    commit, settle = planned.commit_drain, planned.settle_drain

    def counting_commits(engine, d, t):
        out = commit(engine, d, t)
        commits[0] += bool(out)
        return out

    def counting_settles(engine, d):
        times, n = engine._batch_times, len(engine._batch_times)
        pending = [(end, now) for end, now in d.commits]
        lo = d.bounds[d.applied]
        settles[0] += d.applied < d.pos
        settle(engine, d)
        if pending:  # each commit: its finishers' times, then the commit's own
            expected = []
            for end, now in pending:
                expected += d.finish_s[lo:end] + [now]
                lo = end
            assert times[n:] == expected

    monkeypatch.setattr(Engine, "commit_until", lambda self, t: (
        planned.commit_refill(self, self.drain, t) if self.drain.is_refill else counting_commits(self, self.drain, t)
    ))  # fmt: skip
    monkeypatch.setattr(planned, "settle_drain", counting_settles)
    simulate(sc.with_mode("colocated"))
    assert settles[0] > 0
    assert commits[0] > 5 * settles[0]
