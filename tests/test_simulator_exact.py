"""Hand-computed timelines for tiny deterministic scenarios (constant lengths).

Each expected time is composed from the performance models' pieces (prefill, the k-iteration
decode span, training phases, one weight sync), so these tests pin how the simulator
composes them: what runs in sequence, what overlaps, what waits for what.
"""

from __future__ import annotations

import dataclasses

import pytest
from small_scenarios import make

from rlsim.placement import resolve
from rlsim.simulator.costs import Costs
from rlsim.simulator.pipeline import build
from rlsim.simulator.run import simulate

P, R = 64, 100  # prompt and response tokens


def _exact(mode: str, max_batch: int = 16, response: int = R, reward: dict | None = None, **pipe):
    over = {
        "workload": {
            "prompt_tokens": {"kind": "constant", "value": P},
            "response_tokens": {"kind": "constant", "value": response},
            "reward": reward or {"kind": "none"},
        },
        "pipeline": {"mode": mode, "inference": {"max_batch": max_batch}, **pipe},
        "steps": 6,
    }
    return resolve(make(over))


def _pieces(res):
    """(generation of one engine's 8 sequences, training phases, sync) in seconds."""
    costs = Costs(res)
    # the prefill yields each sequence's first token: R - 1 decode iterations follow
    gen = costs.prefill_s([P, P]) + costs.iteration(8).span_s(
        8 * (P + 1), res.scenario.workload.response_tokens.value - 1
    )
    lengths = [P + res.scenario.workload.response_tokens.value] * 16
    ph = costs.train_phases(lengths)
    return gen, ph.logprob_s + ph.train_s + ph.optimizer_s, costs.sync_s


def _step_ends(res) -> list[float]:
    return [s.end_s for s in simulate(res).recorder.steps]


def test_sync_step_is_generation_plus_train_plus_sync() -> None:
    res = _exact("sync")
    gen, train, sync = _pieces(res)
    ends = _step_ends(res)
    for i, end in enumerate(ends):
        assert end == pytest.approx((i + 1) * (gen + train + sync), rel=1e-12)


@pytest.mark.parametrize("response", [60, 400])  # train-bound, then generation-bound
def test_one_step_off_steady_state(response: int) -> None:
    """Depth 1: generation of batch s+1 overlaps training of batch s; each side pays one sync.

    The sync is kept short against generation (no per-tensor host work: 290 tensors of a 0.5B
    would take 0.3 s, longer than either side), the regime this identity describes."""
    res = _exact("one_step_off", max_batch=8, response=response, weight_sync={"tensor_host_s": 0.0})
    gen, train, sync = _pieces(res)
    ends = _step_ends(res)
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    assert gaps[-1] == pytest.approx(max(gen, train) + sync, rel=1e-9)
    assert gaps[-2] == pytest.approx(max(gen, train) + sync, rel=1e-9)
    # and it beats the synchronous loop
    sync_ends = _step_ends(_exact("sync", response=response))
    assert ends[-1] < sync_ends[-1]


def test_group_barrier_waits_for_the_last_score() -> None:
    """One verifier worker scores 16 completions in turn: training waits for the 16th."""
    res = _exact("sync", reward={"kind": "cpu_verifier", "seconds_per_sample": 0.25, "workers": 1})
    gen, train, sync = _pieces(res)
    steps = simulate(res).recorder.steps
    assert steps[0].start_s == pytest.approx(gen + 16 * 0.25, rel=1e-12)
    assert steps[1].start_s - steps[0].end_s == pytest.approx(gen + 16 * 0.25, rel=1e-12)


def test_training_starts_at_the_groups_last_finish() -> None:
    """With long-tailed lengths a step starts exactly when its slowest group's last member ends."""
    res = resolve(
        make({"workload": {"response_tokens": {"kind": "lognormal", "mean": 300, "sigma": 1.0, "max": 2000}}})
    )
    w = build(res)
    w.env.process(w.dispatcher.run())
    for e in w.engines:
        e.start()
    done = w.env.process(w.trainer.run())
    w.env.run(until=done)
    for rec in w.recorder.steps:
        groups = [g for g in w.dispatcher.groups if g.batch == rec.step]
        assert rec.start_s == max(s.finish_s for g in groups for s in g.sequences)


def test_colocated_step_adds_two_switches_and_shares_gpus() -> None:
    res = _exact("colocated")
    costs = Costs(res)
    # colocated: 4 engines (one per GPU), each gets one group of 4 sequences
    gen = costs.prefill_s([P]) + costs.iteration(4).span_s(4 * (P + 1), R - 1)
    ph = costs.train_phases([P + R] * 16)
    train = ph.logprob_s + ph.train_s + ph.optimizer_s
    ends = _step_ends(res)
    assert ends[0] == pytest.approx(gen + train + costs.sync_s + 2 * costs.switch_s, rel=1e-12)
    assert costs.switch_s > 0


def test_sync_every_n_steps_reduces_syncs() -> None:
    res = _exact("async", buffer_depth=2, weight_sync={"every_steps": 2})
    rec = simulate(res).recorder
    assert [v for _, _, v in rec.syncs] == [2, 4, 6]


def test_zero_overhead_profile_changes_only_the_overhead() -> None:
    """Swapping the profile (a measured one, say) flows through without touching the simulator."""
    res = _exact("sync")
    fast = dataclasses.replace(res, profile=res.profile.model_copy(update={"iteration_overhead_s": 0.0}))
    assert _step_ends(fast)[-1] < _step_ends(res)[-1]


def test_one_token_responses_need_no_decode() -> None:
    """The prefill produces the first token, so 1-token responses end with their prefill."""
    res = _exact("sync", response=1)
    costs = Costs(res)
    ph = costs.train_phases([P + 1] * 16)
    ends = _step_ends(res)
    expect = costs.prefill_s([P, P]) + ph.logprob_s + ph.train_s + ph.optimizer_s + costs.sync_s
    assert ends[0] == pytest.approx(expect, rel=1e-12)
