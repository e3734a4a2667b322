"""The one-line-error promise for hostile input: one test per class of issue 15's table.

Each class once escaped as a traceback, a hang, an unbounded read, silently wrong output or a
raw terminal escape; each now ends in exit 2 with one line naming the field (or, for outputs,
strict JSON). The signal classes (11, 12) are in test_signals.py; the fuzz test is test_fuzz.py.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import stat
import time
from pathlib import Path

import pytest
import simpy
import yaml
from cli_helpers import one_line_error, runner
from small_scenarios import SMALL

from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.outputs import json_text
from rlsim.scenario import Scenario
from rlsim.trainer.timeline import write_json as write_timeline

FAST = ["--mode", "sync", "--steps", "1"]


def scenario_file(tmp_path: Path, text: str | None = None, name: str = "s.yaml", **changes) -> str:
    """SMALL (or `text`) written to a file, with `a__b=value` changes applied."""
    data = copy.deepcopy(SMALL)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    path = tmp_path / name
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return str(path)


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and Infinity, as strict parsers do."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


# 1 ------------------------------------------------------------------ nesting depth


def test_deeply_nested_yaml_and_profile_are_refused(tmp_path: Path) -> None:
    deep = scenario_file(tmp_path, "name: " + "[" * 500 + "]" * 500 + "\n")
    assert "nested more than" in one_line_error(["simulate", deep])
    profile = tmp_path / "deep.json"
    profile.write_text("[" * 100_000 + "]" * 100_000)
    line = one_line_error(["simulate", scenario_file(tmp_path), "--profile", str(profile)])
    assert line.startswith("error: profile: ") and "nested more than" in line


def test_yaml_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    start = time.perf_counter()
    line = one_line_error(["simulate", scenario_file(tmp_path, "\n".join(rows) + "\n")])
    assert "more than 1,000,000 values" in line and time.perf_counter() - start < 10


# 2 ------------------------------------------------------------------ encodings


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"name: caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 9)"),
        ("name: x\n".encode("utf-16"), "is UTF-16 text"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "is a binary file"),
    ],
)
def test_undecodable_scenarios_are_named(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    line = one_line_error(["simulate", str(path)])
    assert line.startswith("error: scenario: ") and reason in line


# 3 ------------------------------------------------------------------ integer range


@pytest.mark.parametrize(
    ("override", "field", "reason"),
    [
        ("seed=" + "9" * 5000, "seed", "integer of 5,000 characters is too long"),
        ("algorithm.prompts_per_step=9223372036854775808", "algorithm.prompts_per_step", "64-bit range"),
        ("cluster.nodes=9223372036854775807", "cluster.nodes", "out of range (at most 2**53)"),
        ("algorithm.prompts_per_step=100000000", "algorithm.prompts_per_step", "at most 1,000,000 per step"),
    ],
)
def test_huge_integers_are_refused(tmp_path: Path, override: str, field: str, reason: str) -> None:
    line = one_line_error(["simulate", scenario_file(tmp_path), "--set", override])
    assert line.startswith(f"error: {field}: ") and reason in line and len(line) < 300


def test_huge_integer_in_a_scenario_file(tmp_path: Path) -> None:
    text = yaml.safe_dump({k: v for k, v in SMALL.items() if k != "seed"}) + "seed: " + "9" * 5000 + "\n"
    path = scenario_file(tmp_path, text)
    assert "too long" in one_line_error(["simulate", path])


# 4 ------------------------------------------------------------------ lengths files, errors inside SimPy


@pytest.mark.parametrize("content", ["", "-5", "0", "abc", "1.5", "nan", "99999999999999999999"])
@pytest.mark.parametrize("which", ["prompt_tokens", "response_tokens"])
def test_bad_lengths_file_is_one_line(tmp_path: Path, content: str, which: str) -> None:
    (tmp_path / "lengths.txt").write_text(content + "\n")
    path = scenario_file(tmp_path, **{f"workload__{which}": {"kind": "file", "path": "lengths.txt"}})
    line = one_line_error(["simulate", path, *FAST])
    assert line.startswith(f"error: workload.{which}.path: ") and "lengths.txt" in line


def test_scenario_error_survives_simpy_and_pickle() -> None:
    env = simpy.Environment()

    def process(env):
        yield env.timeout(1)
        raise ScenarioError("workload.prompt_tokens.path", "bad file")

    env.process(process(env))
    with pytest.raises(ScenarioError) as info:
        env.run()  # SimPy re-raises type(e)(*e.args)
    assert str(info.value) == "workload.prompt_tokens.path: bad file"
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.field, again.reason, str(again)) == (info.value.field, "bad file", str(info.value))


# 5 ------------------------------------------------------------------ endless files


def test_endless_files_are_refused_by_a_bounded_read(tmp_path: Path) -> None:
    small = scenario_file(tmp_path)
    config = scenario_file(tmp_path, name="c.yaml", model={"config_json": "/dev/zero"})
    lengths = scenario_file(tmp_path, name="l.yaml", workload__response_tokens={"kind": "file", "path": "/dev/zero"})
    cases = [
        (["simulate", "/dev/zero"], "scenario", "larger than 2 MiB"),
        (["simulate", small, "--profile", "/dev/zero"], "profile", "larger than 32 MiB"),
        (["cost", small, "--prices", "/dev/zero"], "price_file", "larger than 2 MiB"),
        (["simulate", config], "model.config_json", "larger than 32 MiB"),
        (["simulate", lengths, *FAST], "workload.response_tokens.path", "larger than 64 MiB"),
    ]
    for args, field, reason in cases:
        line = one_line_error(args)
        assert line.startswith(f"error: {field}: ") and reason in line, line


# 6 ------------------------------------------------------------------ directories


def test_directories_given_as_files(tmp_path: Path) -> None:
    assert "is a directory, not a file" in one_line_error(["simulate", str(tmp_path)])
    small = scenario_file(tmp_path)
    assert "is a directory" in one_line_error(["simulate", small, "--profile", f"{tmp_path}/"])
    assert "is a folder" in one_line_error(["simulate", small, "--json", str(tmp_path)])


# 7 ------------------------------------------------------------------ unwritable outputs


def test_output_in_a_missing_folder_is_refused_before_simulating(tmp_path: Path) -> None:
    line = one_line_error(["simulate", scenario_file(tmp_path), "--json", str(tmp_path / "nodir" / "x.json")])
    assert line.startswith("error: --json: ") and "does not exist" in line


def test_full_disk_is_one_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    line = one_line_error(["simulate", scenario_file(tmp_path), *FAST, "--json", "/dev/full", "--force"])
    assert "/dev/full" in line and "No space left on device" in line


def test_unwritable_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root writes through mode bits; /proc/self refuses even root
        folder = Path("/proc/self")
        if not folder.is_dir() or os.access(folder, os.W_OK):
            pytest.skip("no folder this user cannot write to")
    line = one_line_error(["simulate", scenario_file(tmp_path), *FAST, "--json", str(folder / "x.json")])
    assert line.startswith("error: --json: ") and "is not writable" in line


# 8 ------------------------------------------------------------------ infinities in durations


@pytest.mark.parametrize(
    "field",
    ["pipeline.training.step_overhead_s", "workload.reward.seconds_per_sample", "pipeline.colocation.reallocate_s"],
)
def test_infinite_durations_are_refused(tmp_path: Path, field: str) -> None:
    for value in (".inf", "-.inf", ".nan"):
        line = one_line_error(["simulate", scenario_file(tmp_path), "--set", f"{field}={value}"])
        assert line.startswith(f"error: {field}: ") and "not a finite number" in line
    *parents, last = field.split(".")
    data = copy.deepcopy(SMALL)
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = float("inf")
    text = yaml.safe_dump(data)  # PyYAML writes .inf
    assert ".inf" in text
    assert "not a finite number" in one_line_error(["simulate", scenario_file(tmp_path, text)])


def test_models_refuse_non_finite_floats_from_python() -> None:
    data = copy.deepcopy(SMALL)
    data["pipeline"]["training"]["step_overhead_s"] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        Scenario.model_validate(data)


# 9 ------------------------------------------------------------------ infinities in prices and options


def test_infinite_price_row_is_refused(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "- {provider: X, product: p, gpu: h100-sxm, pricing: on_demand, usd_per_gpu_hour: .inf,"
        " observed: '2025-01-01', source: me}\n"
    )
    line = one_line_error(["cost", scenario_file(tmp_path), "--prices", str(prices)])
    assert line.startswith("error: price_file: ") and "not a finite number" in line


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["cost", "--preemption-overhead", "nan"], "--preemption-overhead"),
        (["cost", "--preemption-overhead", "inf"], "--preemption-overhead"),
        (["plan", "--deadline-hours", "nan"], "--deadline-hours"),
        (["plan", "--budget-usd", "inf"], "--budget-usd"),
        (["plan", "--deadline-hours", "0"], "--deadline-hours"),
    ],
)
def test_non_finite_options_are_refused(tmp_path: Path, args: list[str], option: str) -> None:
    line = one_line_error([args[0], scenario_file(tmp_path), *args[1:]])
    assert line.startswith(f"error: {option}: ")


def test_json_outputs_never_hold_nan_or_infinity(tmp_path: Path) -> None:
    text = json_text({"a": float("nan"), "b": [float("inf"), 1.5], "c": (float("-inf"),)})
    assert strict_json(text) == {"a": None, "b": [None, 1.5], "c": [None]}
    res = runner.invoke(
        app,
        ["simulate", scenario_file(tmp_path), *FAST, "--json", "-", "--set", "pipeline.training.step_overhead_s=1e300"],
    )
    assert res.exit_code == 0, res.output
    strict_json(res.stdout)
    path = tmp_path / "timeline.json"
    write_timeline(str(path), {"x": float("nan")})
    assert strict_json(path.read_text()) == {"x": None}


# 10 ----------------------------------------------------------------- work bounded up front


def test_plan_search_space_is_bounded_up_front(tmp_path: Path) -> None:
    start = time.perf_counter()
    line = one_line_error(["plan", "small-budget", "--max-gpus", "100000"])
    assert line.startswith("error: --max-gpus: ") and "--max-candidates" in line and "10,000" in line
    assert time.perf_counter() - start < 20
    line = one_line_error(["plan", "small-budget", "--max-gpus", "64", "--max-candidates", "100"])
    assert "more than 100 configurations" in line


def test_sweep_grid_is_bounded_up_front(tmp_path: Path) -> None:
    vary = ["--vary", "seed=" + ",".join(map(str, range(101))), "--vary", "steps=" + ",".join(map(str, range(1, 101)))]
    line = one_line_error(["sweep", scenario_file(tmp_path), *vary])
    assert line.startswith("error: --vary: ") and "10,100 points" in line and "--max-points" in line
    assert "at most 5" in one_line_error(
        ["sweep", scenario_file(tmp_path), "--vary", "seed=1,2,3,4,5,6", "--max-points", "5"]
    )


# 13 ----------------------------------------------------------------- sweep arguments


def test_sweep_unknown_key_and_worker_counts(tmp_path: Path) -> None:
    line = one_line_error(["sweep", scenario_file(tmp_path), "--vary", "nosuch.key=1,2"])
    assert line.startswith("error: --vary: ") and "'nosuch' is not a scenario field" in line
    line = one_line_error(["sweep", scenario_file(tmp_path), "--vary", "pipeline.inference.nosuch=1,2"])
    assert "'pipeline.inference.nosuch' is not a scenario field" in line
    for workers in ("0", "-3"):
        line = one_line_error(["sweep", scenario_file(tmp_path), "--vary", "seed=1,2", "--workers", workers])
        assert line.startswith("error: --workers: must be between 1 and")


# 14 ----------------------------------------------------------------- output collisions


def test_two_outputs_on_one_file_or_on_stdout(tmp_path: Path) -> None:
    src = scenario_file(tmp_path)
    same = str(tmp_path / "same.json")
    line = one_line_error(["simulate", src, "--json", same, "--trace", same])
    assert line.startswith("error: --trace: ") and "also the --json file" in line
    line = one_line_error(["simulate", src, "--json", "-", "--trace", "-"])
    assert "--json and --trace both write to stdout" in line
    assert "both write to stdout" in one_line_error(["sweep", src, "--vary", "seed=1,2", "--json", "-", "--csv", "-"])
    assert not Path(same).exists()


# 15 ----------------------------------------------------------------- booleans are not numbers


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"pipeline__inference__tp": True}, "pipeline.inference.tp"),
        ({"pipeline__training__micro_batch_tokens": True}, "pipeline.training.micro_batch_tokens"),
        (
            {"workload__response_tokens": {"kind": "histogram", "bins": [[1, True, 1.0]]}},
            "workload.response_tokens.bins",
        ),
    ],
)
def test_booleans_are_not_numbers(tmp_path: Path, changes: dict, field: str) -> None:
    line = one_line_error(["simulate", scenario_file(tmp_path, **changes)])
    assert line.startswith(f"error: {field}: ") and "not the boolean true" in line


def test_set_boolean_for_a_number_and_a_number_for_a_boolean(tmp_path: Path) -> None:
    assert "error: steps: must be a number, not the boolean true" in one_line_error(
        ["simulate", scenario_file(tmp_path), "--set", "steps=true"]
    )
    line = one_line_error(["simulate", scenario_file(tmp_path), "--set", "algorithm.reference_model=1"])
    assert line.startswith("error: algorithm.reference_model: must be true or false")


# 16 ----------------------------------------------------------------- terminal escapes


def test_control_characters_are_escaped_in_error_lines(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", scenario_file(tmp_path), "--set", "cluster.gpu=\x1b[31mX\x1b]0;t\x07"])
    assert res.exit_code == 2 and "\x1b" not in res.output and "\x07" not in res.output
    assert res.output.strip().startswith("error: cluster.gpu: ") and "\\x1b[31mX" in res.output
    line = one_line_error(["simulate", str(tmp_path / "a\x1b[2Jb\nc.yaml")])  # echoed path, one line
    assert "\x1b" not in line and "\\x1b[2Jb\\x0ac.yaml" in line


# 17 ----------------------------------------------------------------- duplicate keys


def test_duplicate_keys_name_the_key_and_line(tmp_path: Path) -> None:
    text = yaml.safe_dump({k: v for k, v in SMALL.items() if k != "pipeline"}) + "pipeline: {mode: async, mode: sync}\n"
    line = one_line_error(["simulate", scenario_file(tmp_path, text)])
    row = text.count("\n")  # the last line holds the duplicate
    assert f"line {row}" in line and "duplicate key 'mode'" in line
    text = yaml.safe_dump(SMALL) + "steps: 4\n"
    assert "duplicate key 'steps'" in one_line_error(["simulate", scenario_file(tmp_path, text)])


# 18 ----------------------------------------------------------------- the field a fix belongs to


def test_small_kv_memory_fraction_names_that_field(tmp_path: Path) -> None:
    line = one_line_error(["simulate", scenario_file(tmp_path, pipeline__inference__kv_memory_fraction=0.01)])
    assert line.startswith("error: pipeline.inference.kv_memory_fraction: ") and "raise kv_memory_fraction" in line
    big = scenario_file(tmp_path, model="qwen2.5-72b", cluster__gpu="l4", pipeline__inference__kv_memory_fraction=0.5)
    assert one_line_error(["simulate", big]).startswith("error: pipeline.inference.tp: ")


# 19 ----------------------------------------------------------------- validate: interrupt and file modes


def test_validate_interrupt_prints_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlsim.validation.run as run

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "validate_repeated", interrupted)
    res = runner.invoke(app, ["validate", "--quick"])
    assert res.exit_code == 130
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted by SIGINT: validate stopped its calibration")
    res = runner.invoke(app, ["validate", "--quick", "--keep", "kept"])
    assert "kept" in res.stderr and res.exit_code == 130


def test_timeline_file_gets_the_same_mode_as_other_files(tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    write_timeline(str(path), {"x": 1})
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(other.stat().st_mode)


def test_modes_a_cluster_cannot_hold_are_left_out_of_the_comparison_with_a_warning(tmp_path) -> None:
    """One GPU runs colocated only: the other modes are named and left out, not a traceback."""
    from rlsim.scenario import load_scenario

    sc = load_scenario(
        "default",
        [
            "cluster.nodes=1",
            "cluster.gpus_per_node=1",
            "pipeline.mode=colocated",
            "model=qwen2.5-0.5b",
            "steps=2",
            "algorithm.prompts_per_step=4",
        ],
    )
    from rlsim.errors import ScenarioError
    from rlsim.runs import run_modes

    with pytest.warns(Warning, match="pipeline.mode: sync: .*left out of the comparison"):
        runs = run_modes(sc)
    assert [r.metrics.mode for r in runs] == ["colocated"]
    with pytest.raises(ScenarioError, match="pipeline.mode: sync"):
        run_modes(sc, ["sync"])  # asked for by name: an error
