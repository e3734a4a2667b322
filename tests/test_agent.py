"""Multi-turn agent episodes (workload.agent) pinned by hand on one engine in sync mode.

A two-turn episode with constant lengths and a constant tool latency: its generation ends at
prefill(prompt) + decode(turn 1) + tool latency + prefill(observation, or the whole context when
evicted) + decode(turn 2), each term from the cost model. Many episodes overlap their tool calls
on the engine; a single environment serialises them; observations are context, not trained.
"""

from __future__ import annotations

import pytest
from small_scenarios import make

from rlsim.placement import resolve
from rlsim.scenario import Scenario
from rlsim.simulator.costs import Costs
from rlsim.simulator.run import simulate

PROMPT, RESPONSE, OBSERVATION, TOOL_S = 64, 100, 50, 3.0


def _agent(
    kv: str = "kept",
    turns: int = 2,
    tool_s: float = TOOL_S,
    environments: int | None = None,
    observation: int = OBSERVATION,
    **over,
) -> Scenario:
    base = {
        "cluster": {"gpus_per_node": 2},
        "algorithm": {"prompts_per_step": 1, "group_size": 1, "minibatches": 1},
        "workload": {
            "prompt_tokens": {"kind": "constant", "value": PROMPT},
            "response_tokens": {"kind": "constant", "value": RESPONSE},
            "agent": {
                "turns": {"kind": "constant", "value": turns},
                "tool_latency_s": {"mean_s": tool_s},
                "observation_tokens": {"kind": "constant", "value": observation},
                "kv_cache": kv,
                "environments": environments,
            },
        },
        "pipeline": {"mode": "sync", "inference": {"gpus": 1, "max_batch": 256}, "training": {"gpus": 1}},
        "steps": 1,
    }
    for key, value in over.items():
        base["algorithm"][key] = value
    return make(base)


def _generation_end_s(sc: Scenario) -> float:
    """When the trainer got its batch: the last episode's last token (no verifier time)."""
    return simulate(sc).recorder.steps[0].start_s


@pytest.mark.parametrize("kv", ["kept", "evicted"])
def test_a_two_turn_episode_by_hand(kv: str) -> None:
    sc = _agent(kv)
    costs = Costs(resolve(sc))
    turn1 = costs.prefill_s([PROMPT]) + costs.iteration(1).span_s(PROMPT + 1, RESPONSE - 1)
    context = PROMPT + RESPONSE + OBSERVATION  # what turn 2 holds in its cache once prefilled
    back = costs.prefill_s([OBSERVATION] if kv == "kept" else [context])
    turn2 = back + costs.iteration(1).span_s(context + 1, RESPONSE - 1)
    result = simulate(sc)
    assert result.recorder.steps[0].start_s == pytest.approx(turn1 + TOOL_S + turn2, rel=1e-12)
    step = result.recorder.steps[0]
    assert step.response_tokens == 2 * RESPONSE  # both turns' responses are trained ...
    assert step.tokens == context + RESPONSE  # ... on the whole context; the observation is not trained
    assert result.recorder.generated_tokens == 2 * RESPONSE
    tally = result.recorder.agent
    assert (tally.calls, tally.episodes, tally.turns) == (1, 1, 2)
    assert tally.call_s == TOOL_S and tally.queued_s == 0.0


def test_evicted_prefills_the_whole_context_again() -> None:
    """With a 2,000-token observation both prefills are compute-bound (a short one is a weight
    read either way, and costs the same kept or evicted)."""
    obs = 2000
    kept = _generation_end_s(_agent("kept", observation=obs))
    evicted = _generation_end_s(_agent("evicted", observation=obs))
    costs = Costs(resolve(_agent(observation=obs)))
    extra = costs.prefill_s([PROMPT + RESPONSE + obs]) - costs.prefill_s([obs])
    assert evicted - kept == pytest.approx(extra, rel=1e-9) and extra > 0


def test_the_engine_overlaps_tool_calls() -> None:
    """64 episodes of 4 turns with 5 s calls: the engine decodes the others while one waits, so
    generation takes about the calls of one episode, not of all of them one after another."""
    one = _generation_end_s(_agent(turns=4, tool_s=5.0))
    many = _generation_end_s(_agent(turns=4, tool_s=5.0, prompts_per_step=16, group_size=4))
    assert 3 * 5.0 < one < many < 0.1 * 64 * one


def test_one_environment_serialises_the_calls() -> None:
    """Eight episodes whose first turns end together, one environment: the calls run one after
    another, so the last episode's second turn starts 8 calls after the first turns end."""
    n = 8
    sc = _agent(environments=1, prompts_per_step=n)
    costs = Costs(resolve(sc))
    turn1 = costs.prefill_s([PROMPT] * n) + costs.iteration(n).span_s(n * (PROMPT + 1), RESPONSE - 1)
    context = PROMPT + RESPONSE + OBSERVATION
    last = costs.prefill_s([OBSERVATION]) + costs.iteration(1).span_s(context + 1, RESPONSE - 1)
    result = simulate(sc)
    assert result.recorder.steps[0].start_s == pytest.approx(turn1 + n * TOOL_S + last, rel=1e-12)
    assert result.recorder.agent.queued_s == pytest.approx(TOOL_S * sum(range(n)))
    unlimited = _generation_end_s(_agent(prompts_per_step=n))
    assert unlimited < turn1 + TOOL_S + 1.0 < result.recorder.steps[0].start_s - (n - 2) * TOOL_S


def _pressured(kv: str) -> Scenario:
    """64 episodes of 3 turns on two 7B engines whose caches hold about 40 contexts each."""
    return make(
        {
            "model": "qwen2.5-7b",
            "algorithm": {"prompts_per_step": 16, "group_size": 4, "minibatches": 1},
            "workload": {
                "prompt_tokens": {"kind": "constant", "value": 500},
                "response_tokens": {"kind": "lognormal", "mean": 800, "sigma": 0.5, "max": 3000},
                "agent": {
                    "turns": {"kind": "constant", "value": 3},
                    "tool_latency_s": {"mean_s": 1.0, "sigma": 0.8},
                    "observation_tokens": {"kind": "constant", "value": 300},
                    "kv_cache": kv,
                },
            },
            "pipeline": {
                "inference": {"gpus": 2, "max_batch": 64, "kv_memory_fraction": 0.23},
                "training": {"gpus": 2, "micro_batch_tokens": 16384},
            },
            "steps": 1,
        }
    )


def test_kept_caches_take_the_engines_room() -> None:
    """While its calls run, a kept episode's cache stays on its engine: under KV pressure the
    decoding sequences are preempted more often than when caches are freed at every call."""
    kept, evicted = simulate(_pressured("kept")), simulate(_pressured("evicted"))
    assert kept.recorder.agent.episodes == evicted.recorder.agent.episodes == 64
    assert kept.recorder.preemptions > 1.2 * evicted.recorder.preemptions
    assert kept.recorder.steps[0].start_s > evicted.recorder.steps[0].start_s


def test_without_pressure_kept_caches_only_save_prefill() -> None:
    """The same episodes on engines with room to spare: nothing is preempted, and keeping the
    caches saves the re-prefill of every returning context."""
    roomy = [
        sc.model_copy(
            update={
                "pipeline": sc.pipeline.model_copy(
                    update={"inference": sc.pipeline.inference.model_copy(update={"kv_memory_fraction": 0.9})}
                )
            }
        )
        for sc in (_pressured("kept"), _pressured("evicted"))
    ]
    kept, evicted = simulate(roomy[0]), simulate(roomy[1])
    assert kept.recorder.preemptions == evicted.recorder.preemptions == 0
    assert kept.recorder.steps[0].start_s < evicted.recorder.steps[0].start_s


def test_outputs_show_the_tool_calls() -> None:
    """JSON metrics, the table and the trace carry the episodes' turns and tool time; a
    single-turn scenario writes none of it."""
    from rlsim.report.trace import chrome_trace
    from rlsim.runs import run_mode
    from rlsim.tables import modes_table, runs_json

    run = run_mode(_agent(turns=3, prompts_per_step=4, environments=2))
    agent = runs_json([run])["modes"][0]["metrics"]["agent"]
    assert agent["turns_per_episode"] == 3.0 and agent["tool_calls"] == 8 and agent["tool_call_s"] == TOOL_S
    assert agent["environment_wait_s"] > 0 and 0 < agent["episode_tool_fraction"] < 1
    rows = [c.plain if hasattr(c, "plain") else str(c) for c in modes_table([run], "t").columns[0]._cells]
    assert "turns/episode" in rows and "  in tool calls" in rows
    counter = [e for e in chrome_trace([run])["traceEvents"] if e.get("name") == "tool_calls"]
    assert max(e["args"]["episodes"] for e in counter) == 4 and counter[-1]["args"]["episodes"] == 0
    plain = run_mode(make({"steps": 1}))
    assert "agent" not in runs_json([plain])["modes"][0]["metrics"]
    assert not [e for e in chrome_trace([plain])["traceEvents"] if e.get("name") == "tool_calls"]


def _steady_trainer_wait_s(result) -> float:
    """Seconds the trainer waited for data after its first step began (the warm-up excluded)."""
    first = result.recorder.steps[0].start_s
    return sum(
        iv.end_s - max(iv.start_s, first)
        for iv in result.recorder.actor_intervals["trainer"]
        if iv.state == "idle-waiting-for-data" and iv.end_s > first
    )


def test_the_agentic_example_keeps_its_trainer_fed() -> None:
    """published-validation.md §10 R5 (SkyRL fully async, Qwen3-Coder-30B-A3B, 2 x TP8 engines
    and 16 training GPUs): the trainer never waits once warm, and more engines would not shorten
    the step (the 64-GPU layouts were over-provisioned on inference). rlsim's agentic example on
    that layout, with illustrative lengths and latencies: the same, qualitatively."""
    from rlsim.scenario import load_scenario

    two = simulate(load_scenario("agentic-swe", ["steps=5"]))
    four = simulate(load_scenario("agentic-swe", ["steps=5", "cluster.nodes=6", "pipeline.inference.gpus=32"]))
    steps = [s.end_s - s.start_s for s in two.recorder.steps[1:]]
    assert _steady_trainer_wait_s(two) < 0.01 * sum(steps)
    gaps = [b.end_s - a.end_s for a, b in zip(two.recorder.steps[1:], two.recorder.steps[2:])]
    gaps4 = [b.end_s - a.end_s for a, b in zip(four.recorder.steps[1:], four.recorder.steps[2:])]
    assert sum(gaps4) / len(gaps4) == pytest.approx(sum(gaps) / len(gaps), rel=0.02)


def test_an_episode_keeps_the_version_of_its_first_token() -> None:
    """The route alone: turn 1 aborted with its tokens discarded and restarted on newer weights
    (version 3) still trains as an episode started on version 0, with both turns' tokens."""
    import simpy

    from rlsim.simulator.recorder import AgentTally, Recorder
    from rlsim.simulator.tools import ToolCalls, start_episodes
    from rlsim.simulator.work import Group, Sequence
    from rlsim.turns import EpisodeDraw

    class Queue:
        def __init__(self) -> None:
            self.items: list[Sequence] = []

        def put(self, seqs: list[Sequence]) -> None:
            self.items += seqs

    class Engine:
        queue = Queue()

    env, rec, scored = simpy.Environment(), Recorder(), []
    rec.agent = AgentTally()
    route = ToolCalls(env, scored.extend, rec, kept=False, environments=None)
    group = Group(0, 0, 0, PROMPT, size=1)
    group.sequences = [Sequence(group, 0, PROMPT, RESPONSE, PROMPT + RESPONSE)]
    start_episodes(group, [EpisodeDraw((RESPONSE, 30), (OBSERVATION,), (TOOL_S,))], kept=False, now=0.0)
    seq = group.sequences[0]
    seq.engine, seq.version_start, seq.generated, seq.finish_s = Engine(), 0, RESPONSE, 1.0
    route.finished([seq])
    env.run()
    assert env.now == 1.0 + TOOL_S and Engine.queue.items == [seq]
    assert (seq.turn, seq.prompt_tokens, seq.response_tokens) == (1, PROMPT + RESPONSE + OBSERVATION, 30)
    seq.version_start = -1  # abort_discard of turn 1, then readmitted on version 3
    seq.version_start, seq.generated, seq.finish_s = 3, 30, env.now + 1.0
    route.finished([seq])
    assert scored == [seq] and seq.version_start == 0
    assert seq.response_tokens == seq.generated == RESPONSE + 30 and seq.length == PROMPT + RESPONSE + OBSERVATION + 30
    assert (rec.agent.episodes, rec.agent.turns, rec.agent.calls) == (1, 2, 1)
