"""Fuzzing the CLI: Hypothesis strategies for small scenarios and hostile mutations of them.

Shared by tests/test_fuzz.py (a few hundred cases in CI) and benchmarks/bench_fuzz.py (a long
run that prints counts). A case is a scenario file's bytes and extra `--set` arguments, run as
`rlsim compare FILE --json -` (each scenario under its own mode) in this process. Its outcome is
"ok" (exit 0, strict JSON whose invariants hold), "refused" (exit 2, exactly one line
`error: field: reason`, nothing else; a truncated file or a mapping put in place of a value can
break several fields, and then gets one such line per field) or a failure: anything else, a
traceback, or running past the time limit.

Valid scenarios are small (2-4 GPUs, a few prompts, 1-3 steps) so a case takes milliseconds.
A mutation changes one thing: a field set to a hostile YAML value (booleans, huge or negative
integers, `.inf`, `.nan`, a 5,000-digit number, text with terminal escapes, deep nesting, tags,
aliases), a field deleted or added, a duplicate key, the bytes corrupted (truncated, invalid
UTF-8, NUL, UTF-16), or a hostile `--set`.
"""

from __future__ import annotations

import json
import math
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlsim.cli import app

MODES = ["colocated", "sync", "one_step_off", "async", "streaming"]
INTERRUPTS = [None, "blocking", "soft_pause", "abort_resubmit", "abort_discard", "in_flight"]
TRANSPORTS = [None, "nccl_broadcast", "nccl_bucketed", "filesystem", "cuda_ipc"]
HOSTILE = [  # raw YAML snippets
    "true",
    "false",
    "null",
    "~",
    "0",
    "-1",
    "-0.0",
    "0.5",
    "1.5",
    "1e308",
    "1e-308",
    "-1e308",
    "9223372036854775808",
    "1" + "0" * 30,
    "9" * 5000,
    ".inf",
    "-.inf",
    ".nan",
    '""',
    "x",
    '"\\e[31mX\\e]0;t\\a"',
    '"a\\nb"',
    "[]",
    "{}",
    "[1, 2]",
    "{a: 1}",
    "[" * 40 + "1" + "]" * 40,
    "*nope",
    "!!binary aGVsbG8=",
    "!!python/object/apply:os.system [echo hi]",
    "2026-01-01",
    "0x10",
    "1_000",
    "'12'",
]
PLACEHOLDER = "__FUZZ_VALUE__"
TIME_LIMIT_S = 20.0

runner = CliRunner()


@st.composite
def length_dist(draw: st.DrawFn, longest: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["constant", "lognormal", "histogram"]))
    if kind == "constant":
        return {"kind": "constant", "value": draw(st.integers(1, longest))}
    if kind == "lognormal":
        mean = draw(st.floats(8, longest / 2, allow_nan=False))
        return {"kind": "lognormal", "mean": mean, "sigma": draw(st.floats(0, 1.5)), "max": longest}
    low = draw(st.integers(1, longest // 2))
    return {"kind": "histogram", "bins": [[low, longest, 1.0], [1, low + 1, draw(st.floats(0, 2))]], "max": longest}


@st.composite
def valid_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A small scenario over every mode, interrupt, staleness policy, transport and dispatch."""
    mode = draw(st.sampled_from(MODES))
    gpus = draw(st.sampled_from([2, 4]))
    group = draw(st.sampled_from([1, 2, 4]))
    prompts = draw(st.integers(1, 4))
    every = draw(st.sampled_from([1, 2]))
    policy = draw(st.sampled_from(["bound", "reject", "importance_sampling"]))
    pipeline: dict[str, Any] = {
        "mode": mode,
        "inference": {"tp": 1, "max_batch": draw(st.sampled_from([2, 8, 64]))},
        "training": {"micro_batch_tokens": 2048, "padding": draw(st.sampled_from(["packed", "batch_longest"]))},
        "buffer_depth": draw(st.integers(1, 3)),
        "staleness": {"policy": policy, "max_lag": draw(st.integers(every - 1 if policy == "reject" else 0, 3))},
        "weight_sync": {
            "every_steps": every,
            "interrupt": draw(st.sampled_from(INTERRUPTS)),
            "transport": draw(st.sampled_from(TRANSPORTS)),
        },
    }
    if mode != "colocated":
        pipeline["inference"]["gpus"] = gpus // 2
        pipeline["training"]["gpus"] = gpus // 2
    dispatch = draw(st.sampled_from([None, "round_robin", "least_loaded", "pull"]))
    if dispatch:
        pipeline["inference"]["dispatch"] = dispatch
    if draw(st.booleans()):
        pipeline["lora"] = {"rank": draw(st.sampled_from([4, 16]))}
    if mode == "colocated" and draw(st.booleans()):
        pipeline["colocation"] = {"offload_engine_weights": True, "reallocate_s": draw(st.floats(0, 1))}
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["length_schedule"] = {"start_mean": draw(st.floats(16, 256)), "end_mean": draw(st.floats(16, 512))}
    per_node = gpus
    if draw(st.booleans()):  # a GPU reward model (issue 16): its own pool (one more GPU), the trainer's or the engines'
        kind = draw(st.sampled_from(["reward_model", "generative_judge", "teacher"]))
        rm: dict[str, Any] = {
            "kind": kind,
            "model": draw(st.sampled_from(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
            "max_batch_sequences": draw(st.sampled_from([1, 4, 64])),
            "verdict_tokens": draw(st.integers(1, 16)) if kind == "generative_judge" else 0,
        }
        shared = ["with_inference"] if mode == "colocated" else ["with_training", "with_inference"]
        placement = draw(st.sampled_from(["own_pool", *shared]))
        if placement == "own_pool":
            rm["gpus"], per_node = 1, gpus + 1
        else:
            rm["placement"] = placement
        pipeline["reward_model"] = rm
        extra["reward"] = {"kind": "none"}
    if mode != "colocated" and draw(st.booleans()):  # a GPU type per pool
        pipeline["inference"]["gpu"] = draw(st.sampled_from(["h100-sxm", "a100-80gb", "h200"]))
    if (
        policy != "reject" and "reward_model" not in pipeline and draw(st.booleans())
    ):  # refused with reject, a GPU scorer
        pipeline["partial_rollout"] = {
            "over_provision": draw(st.sampled_from([1.5, 2.0])),
            "extra_prompts": draw(st.integers(0, 2)),
        }
    return {
        "name": "fuzz",
        "model": draw(st.sampled_from(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
        "cluster": {"gpu": draw(st.sampled_from(["h100-sxm", "a100-80gb", "h200"])), "gpus_per_node": per_node},
        "algorithm": {
            "kind": draw(st.sampled_from(["grpo", "ppo", "rloo"])),
            "prompts_per_step": prompts,
            "group_size": group,
            "minibatches": 1,
            "reference_model": draw(st.booleans()),
        },
        "workload": {
            "prompt_tokens": draw(length_dist(256)),
            "response_tokens": draw(length_dist(512)),
            "group_correlation": draw(st.floats(0, 1)),
            "reward": {"kind": "cpu_verifier", "seconds_per_sample": draw(st.sampled_from([0.0, 0.01])), "workers": 4},
            **extra,  # a reward model replaces the verifier
        },
        "pipeline": pipeline,
        "steps": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 2**32)),
    }


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every key path of a nested mapping (mappings and leaves both)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


def _at(data: dict, path: tuple) -> tuple[dict, Any]:
    node = data
    for k in path[:-1]:
        node = node[k]
    return node, path[-1]


@dataclass(frozen=True)
class Case:
    """A scenario file's bytes and extra CLI arguments; `what` describes the mutation."""

    what: str
    data: bytes
    args: tuple[str, ...] = ()
    valid: dict | None = None  # the unmutated scenario, when nothing was changed
    several: bool = False  # the mutation may break several fields (truncation): a line for each
    files: tuple[tuple[str, bytes], ...] = ()  # companion files beside the scenario
    command: str = "compare"  # or "cost" (price files)


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


@st.composite
def mutated_cases(draw: st.DrawFn, scenarios: st.SearchStrategy | None = None) -> Case:
    base = draw(valid_scenarios() if scenarios is None else scenarios)
    paths = list(_paths(base))
    kind = draw(st.sampled_from(["set_value", "delete", "add_key", "duplicate", "corrupt", "override", "override_new"]))
    data = json.loads(json.dumps(base))
    if kind == "set_value":
        path, value = draw(st.sampled_from(paths)), draw(st.sampled_from(HOSTILE))
        node, key = _at(data, path)
        node[key] = PLACEHOLDER
        text = _dump(data).replace(PLACEHOLDER, value)
        return Case(f"{'.'.join(path)}: {value[:40]}", text.encode(), several=value.startswith("{"))
    if kind == "delete":
        path = draw(st.sampled_from(paths))
        node, key = _at(data, path)
        del node[key]
        return Case(f"delete {'.'.join(path)}", _dump(data).encode())
    if kind == "add_key":
        mappings = [()] + [p for p in paths if isinstance(_at(base, p)[0][p[-1]], dict)]
        path = draw(st.sampled_from(mappings))
        node = data
        for k in path:
            node = node[k]
        node[draw(st.sampled_from(["warp_speed", "Name", "1", "kind"]))] = 1
        return Case(f"add a key under {'.'.join(path) or 'the top'}", _dump(data).encode())
    if kind == "duplicate":
        key = draw(st.sampled_from(list(base)))
        return Case(f"duplicate {key}", (_dump(data) + _dump({key: base[key]})).encode())
    if kind == "corrupt":
        raw = _dump(data).encode()
        how = draw(st.sampled_from(["truncate", "latin1", "nul", "utf16", "bom_utf8", "tab_indent"]))
        at = draw(st.integers(0, len(raw)))
        corrupt = {
            "truncate": raw[:at],
            "latin1": raw[:at] + b"\xe9" + raw[at:],
            "nul": raw[:at] + b"\x00" + raw[at:],
            "utf16": raw.decode().encode("utf-16"),
            "bom_utf8": b"\xef\xbb\xbf" + raw,
            "tab_indent": raw.replace(b"  ", b"\t", 1),
        }[how]
        return Case(f"corrupt: {how} at {at}", corrupt, several=how in ("truncate", "tab_indent"))
    value = draw(st.sampled_from(HOSTILE))
    if kind == "override":
        key = ".".join(draw(st.sampled_from(paths)))
    else:
        key = draw(st.sampled_from(["nosuch", "pipeline.nosuch", "model.config_json", "steps.x", "", "a..b"]))
    return Case(
        f"--set {key}={value[:40]}", _dump(data).encode(), ("--set", f"{key}={value}"), several=value.startswith("{")
    )


@st.composite
def valid_cases(draw: st.DrawFn) -> Case:
    base = draw(valid_scenarios())
    return Case("valid", _dump(base).encode(), valid=base)


@st.composite
def filtering_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A valid scenario with DAPO dynamic sampling: a share or a Beta pass rate, any gen batch,
    with or without a cap, either refill rule (a strategy of its own, so the draws of the
    others stay as they were)."""
    base = draw(valid_scenarios())
    algorithm = base["algorithm"]
    algorithm["group_size"] = max(2, algorithm["group_size"])  # group_size 1 is refused with a filter
    source = st.one_of(
        st.fixed_dictionaries({"all_or_none_share": st.sampled_from([0.0, 0.3, 0.6])}),
        st.fixed_dictionaries(
            {"pass_rate": st.fixed_dictionaries({"alpha": st.floats(0.3, 3), "beta": st.floats(0.3, 3)})}
        ),
    )
    algorithm["filter_groups"] = {
        **draw(source),
        "prompts_per_gen_batch": draw(st.integers(1, 2 * algorithm["prompts_per_step"])),
        "max_num_gen_batches": draw(st.sampled_from([0, 50])),
        "refill": draw(st.sampled_from([None, "rounds", "continuous"])),
    }
    return base


@st.composite
def filtering_cases(draw: st.DrawFn) -> Case:
    base = draw(filtering_scenarios())
    return Case("valid with filter_groups", _dump(base).encode(), valid=base)


QWEN_05B_CONFIG = {  # Qwen/Qwen2.5-0.5B config.json, the keys rlsim reads
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}
HOSTILE_JSON = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1",
    "0",
    "0.5",
    "true",
    "null",
    '"x"',
    '"\u001b[31m"',
    "[1]",
    "{}",
    "1" + "0" * 30,
    "9" * 5000,
    "[" * 50 + "]" * 50,
]
LENGTH_WORDS = ["1", "64", "300", "0", "-5", "abc", "1.5", "nan", "99999999999999999999", "1e3", "0x10", "+5", "\u0663"]


def _replace_json(doc: dict, path: tuple, raw: str) -> bytes:
    data = json.loads(json.dumps(doc))
    node, key = _at(data, path)
    node[key] = PLACEHOLDER
    return json.dumps(data, indent=1).replace(f'"{PLACEHOLDER}"', raw).encode()


def _profile(gpu: str) -> dict:
    from rlsim.calibration.profile import resolve_profile

    return resolve_profile(None, gpu).model_dump(mode="json")


@st.composite
def companion_cases(draw: st.DrawFn) -> Case:
    """A lengths file, config.json, profile JSON or price file beside the scenario, mutated."""
    base = draw(valid_scenarios())
    which = draw(st.sampled_from(["lengths", "config", "profile", "prices"]))
    if which == "lengths":
        words = st.lists(st.sampled_from(LENGTH_WORDS), max_size=12).map(lambda w: "\n".join(w).encode())
        clean = st.lists(st.integers(1, 300), min_size=1, max_size=12).map(lambda n: "\n".join(map(str, n)).encode())
        content = draw(st.one_of(clean, words, st.binary(max_size=64)))
        field = draw(st.sampled_from(["prompt_tokens", "response_tokens"]))
        base["workload"][field] = {"kind": "file", "path": "lengths.txt", "max": 256}
        return Case(f"lengths {content[:40]!r}", _dump(base).encode(), files=(("lengths.txt", content),))
    if which == "config":
        base["model"] = {"config_json": "config.json"}
        key = draw(st.sampled_from([None, *QWEN_05B_CONFIG]))
        raw = draw(st.sampled_from(HOSTILE_JSON))
        text = json.dumps(QWEN_05B_CONFIG).encode() if key is None else _replace_json(QWEN_05B_CONFIG, (key,), raw)
        return Case(f"config.json {key}: {raw[:30]}", _dump(base).encode(), files=(("config.json", text),))
    if which == "profile":
        doc = _profile(base["cluster"]["gpu"])
        base["profile"] = "profile.json"
        paths = [p for p in _paths(doc) if not isinstance(_at(doc, p)[0][p[-1]], dict | list)]
        path = draw(st.sampled_from([None, *paths]))
        raw = draw(st.sampled_from(HOSTILE_JSON))
        text = json.dumps(doc).encode() if path is None else _replace_json(doc, path, raw)
        what = f"profile {'.'.join(path) if path else 'unchanged'}: {raw[:30]}"
        return Case(what, _dump(base).encode(), files=(("profile.json", text),), several=raw in ("{}", "[1]"))
    row = {
        "provider": "Fuzz",
        "product": "p",
        "gpu": base["cluster"]["gpu"],
        "pricing": "on_demand",
        "usd_per_gpu_hour": 2.5,
        "observed": "2026-01-01",
        "source": "https://example.com",
    }
    key = draw(st.sampled_from([None, *row]))
    raw = draw(st.sampled_from(HOSTILE))
    if key is not None:
        row[key] = PLACEHOLDER
    text = _dump({"rows": [row]}).split("\n", 1)[1].replace(PLACEHOLDER, raw)  # a YAML list of rows
    return Case(
        f"prices {key}: {raw[:30]}",
        _dump(base).encode(),
        ("--prices", "{dir}/prices.yaml"),
        files=(("prices.yaml", text.encode()),),
        command="cost",
        several=raw.startswith("{"),
    )


def cases() -> st.SearchStrategy[Case]:
    """One case in four unmutated, two mutated, one with a mutated companion file."""
    return st.one_of(valid_cases(), mutated_cases(), mutated_cases(), companion_cases())


class TimeLimit(Exception):
    """A case ran past its time limit (a hang)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(_signum: int, _frame: object) -> None:
        raise TimeLimit(f"ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _strict_json(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def check_invariants(doc: dict, valid: dict | None) -> None:
    """What every simulated mode's JSON must satisfy (AssertionError naming the first miss)."""
    assert doc["modes"], "no mode in the output"
    for entry in doc["modes"]:
        m = entry["metrics"]
        assert m["wall_time_s"] > 0 and math.isfinite(m["wall_time_s"])
        assert m["steps"] >= 1 and m["step_time_s"] > 0
        filtered = m.get("dynamic_sampling", {}).get("filtered_tokens", 0)  # DAPO's filter, when on
        assert m["generated_tokens"] == m["trained_tokens"] + m["dropped_tokens"] + filtered + m["in_flight_tokens"]
        assert m["buffer_max_groups"] <= m["buffer_capacity_groups"]
        assert 0 <= m["idle_fraction"] <= 1 + 1e-9 and 0 <= m["dropped_token_fraction"] <= 1
        total = sum(m["gpu_seconds_by_state"].values())
        assert total <= m["gpus"] * m["wall_time_s"] * (1 + 1e-9), (total, m["gpus"], m["wall_time_s"])
        for pool in m["pools"]:  # every GPU of a pool is in one state at every moment
            seconds = sum(pool["gpu_seconds_by_state"].values())
            assert math.isclose(seconds, pool["gpus"] * m["wall_time_s"], rel_tol=1e-6), (pool, m["wall_time_s"])
            assert 0 <= pool["busy_fraction"] <= 1 + 1e-9 and 0 <= pool["idle_fraction"] <= 1 + 1e-9
        partial = m.get("partial_rollout")
        if partial is not None:  # carried work is kept: nothing of it counts as dropped
            assert partial["carried_tokens_per_step"] >= 0 and 0 <= partial["trained_carried_fraction"] <= 1
            assert 0 <= partial["token_lag_mean"] <= partial["token_lag_max"] + 1e-9
        if valid is not None:
            assert m["steps"] == valid["steps"]
            stale = valid["pipeline"]["staleness"]
            if stale["policy"] == "reject":
                assert m["staleness_max"] <= stale["max_lag"]
        cost = entry["cost"]
        if cost is not None:
            assert cost["usd_per_step"] is not None and cost["usd_per_step"] >= 0


def check_cost(doc: dict) -> None:
    """A priced run: every line's dollars and days are finite and non-negative."""
    assert doc["lines"], "no price line"
    for line in doc["lines"]:
        for key in ("usd_per_gpu_hour", "usd_per_step", "usd_per_run", "wall_days_per_run"):
            assert line[key] is not None and line[key] >= 0, (key, line[key])
    assert doc["projection"]["wall_time_s"] > 0


def run_case(case: Case, time_limit_s: float = TIME_LIMIT_S) -> tuple[str, str]:
    """(outcome, detail): outcome is 'ok', 'refused' or 'failure'."""
    with tempfile.TemporaryDirectory(prefix="rlsim-fuzz-") as folder:
        path = Path(folder) / "scenario.yaml"
        path.write_bytes(case.data)
        for name, data in case.files:
            (Path(folder) / name).write_bytes(data)
        args = [a.replace("{dir}", folder) for a in case.args]
        try:
            with time_limit(time_limit_s):
                res = runner.invoke(app, [case.command, str(path), "--json", "-", *args])
        except TimeLimit as exc:
            return "failure", f"{case.what}: {exc}"
    if isinstance(res.exception, TimeLimit):
        return "failure", f"{case.what}: {res.exception}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return "failure", f"{case.what}: {type(res.exception).__name__}: {res.exception}"
    if "Traceback" in res.output:
        return "failure", f"{case.what}: traceback in the output"
    if res.exit_code == 0:
        try:
            doc = _strict_json(res.stdout)
            check_cost(doc) if case.command == "cost" else check_invariants(doc, case.valid)
        except (AssertionError, ValueError, KeyError, TypeError) as exc:
            return "failure", f"{case.what}: output {type(exc).__name__}: {exc}"
        return "ok", case.what
    if res.exit_code == 2:
        lines = [ln for ln in res.output.strip().splitlines() if not ln.startswith("warning: ")]  # their own lines
        well_formed = lines and all(ln.startswith("error: ") and ": " in ln[7:] for ln in lines)
        if not well_formed or (len(lines) > 1 and not case.several):
            return "failure", f"{case.what}: exit 2 without one error line: {res.output[:300]!r}"
        if case.valid is not None and "ran past" in lines[0]:
            return "failure", f"{case.what}: {lines[0]}"
        return "refused", lines[0]
    return "failure", f"{case.what}: exit {res.exit_code}: {res.output[:300]!r}"
