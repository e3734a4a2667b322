"""Each log reader parses a small hand-written sample of its format and rejects a broken one.

Samples are written from the keys each reader documents (the library's own key names); the
tensorboard sample is written by torch's SummaryWriter, which verl's tensorboard backend uses.
A malformed or truncated file must give exit code 2 and one line naming the file and the line
or key (the CLI contract of every bad input).
"""

from __future__ import annotations

import json

import pytest
import yaml
from cli_helpers import one_line_error

from rlsim.logs import FORMATS, detect_format, read_log

VERL_CONSOLE = """\
(TaskRunner pid=2231) Checkpoint tracker file does not exist
(TaskRunner pid=2231) step:1 - actor/pg_loss:0.012 - timing_s/gen:321.000 - timing_s/old_log_prob:88.000 - \
timing_s/update_actor:286.000 - timing_s/step:749.000 - response_length/mean:2048.500 - response_length/max:20480.000 \
- response_length/min:12.000 - response_length/clip_ratio:0.031
(TaskRunner pid=2231) step:2 - timing_s/gen:300.000 - timing_s/old_log_prob:80.000 - timing_s/update_actor:280.000 \
- timing_s/update_weights:0.250 - timing_s/step:700.000 - response_length/mean:2000.000 \
- timing_s/wait_prev_gen:45.000 - fully_async/trainer/idle_ratio:0.100
"""
VERL_JSONL = (
    '{"step": 1, "timing_s/gen": 10.5, "timing_s/ref": 1.5, "timing_s/step": 20.0, "response_length/mean": 512}\n'
    '{"step": 2, "timing_s/gen": 11.0, "timing_s/update_weights": 0.3, "timing_s/step": 21.0}\n'
)
WANDB_CSV = (
    '"Step","run-7 - timing_s/gen","run-7 - timing_s/gen__MIN","run-7 - timing_s/step","run-7 - response_length/mean"\n'
    '"1","321","320","749","2048.5"\n'
    '"2","300","299","700",""\n'
)
NEMO = {
    "timing/train/generation": {"1": 84.0, "2": 83.0},
    "timing/train/policy_and_reference_logprobs": {"1": 18.0, "2": 18.5},
    "timing/train/policy_training": {"1": 28.0, "2": 27.0},
    "timing/train/prepare_for_generation/total": {"1": 14.0, "2": 14.5},
    "timing/train/total_step_time": {"1": 147.0, "2": 146.0},
    "train/mean_gen_tokens_per_sample": {"1": 900.0, "2": 910.0},
}
SLIME = """\
[2026-12-01 10:00:00] rollout.py:88 - perf 0: {'perf/rollout_time': 40.5, 'rollout/response_len/mean': 700.0, \
'rollout/response_len/max': 4096, 'rollout/response_len/min': 3, 'rollout/truncated_ratio': 0.02}
[2026-12-01 10:00:09] train_metric_utils.py:40 - perf 0: {'perf/train_wait_time': 41.0, 'perf/train_time': 20.0, \
'perf/log_probs_time': 4.0, 'perf/actor_train_time': 15.0, 'perf/update_weights_time': 0.4, 'perf/step_time': 61.0}
"""
TRL = {
    "global_step": 4,
    "log_history": [
        {
            "step": 2,
            "timestamp": 1000.0,
            "completions/mean_length": 300.0,
            "completions/max_length": 1024.0,
            "completions/min_length": 20.0,
            "completions/clipped_ratio": 0.05,
            "loss": 0.1,
        },
        {"step": 4, "timestamp": 1100.0, "completions/mean_length": 320.0, "completions/clipped_ratio": 0.04},
        {"step": 4, "train_runtime": 120.0},
    ],
}
PLAIN = "step,generation_s,update_actor_s,step_s,response_mean\n1,50,20,80,1000\n2,52,21,,1010\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text if isinstance(text, str) else json.dumps(text, indent=1))
    return path


def test_verl_console(tmp_path):
    log = read_log(str(_write(tmp_path, "out.log", VERL_CONSOLE)))
    assert log.format == "verl-console" and [s.step for s in log.steps] == [1, 2]
    s1, s2 = log.steps
    assert (s1.generation_s, s1.old_log_prob_s, s1.update_actor_s, s1.step_s) == (321, 88, 286, 749)
    assert (s1.response_mean, s1.response_max, s1.response_clip_ratio) == (2048.5, 20480, 0.031)
    assert s2.weight_sync_s == 0.25 and s1.weight_sync_s is None
    assert (s2.generation_wait_s, s2.trainer_idle_ratio, s2.rollouter_idle_ratio) == (45, 0.1, None)


def test_verl_jsonl(tmp_path):
    log = read_log(str(_write(tmp_path, "m.jsonl", VERL_JSONL)))
    assert log.format == "verl-jsonl" and log.steps[0].ref_s == 1.5 and log.steps[1].weight_sync_s == 0.3


def test_verl_wandb_csv(tmp_path):
    log = read_log(str(_write(tmp_path, "export.csv", WANDB_CSV)))
    assert log.format == "verl-wandb-csv"
    assert [(s.generation_s, s.step_s, s.response_mean) for s in log.steps] == [(321, 749, 2048.5), (300, 700, None)]


def test_verl_tensorboard(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))  # what verl's _TensorboardAdapter writes with
    for step, gen in ((1, 321.0), (2, 300.0)):
        writer.add_scalar("timing_s/gen", gen, step)
        writer.add_scalar("timing_s/step", gen * 2, step)
        writer.add_scalar("actor/pg_loss", 0.1, step)
    writer.close()
    log = read_log(str(tmp_path / "tb"))
    assert log.format == "verl-tensorboard"
    assert [(s.step, s.generation_s, s.step_s) for s in log.steps] == [(1, 321, 642), (2, 300, 600)]


def test_nemo_rl(tmp_path):
    log = read_log(str(_write(tmp_path, "metrics.json", NEMO)))
    s = log.steps[0]
    assert log.format == "nemo-rl-json"
    assert (s.generation_s, s.old_log_prob_s, s.update_actor_s, s.weight_sync_s, s.step_s) == (84, 18, 28, 14, 147)
    assert s.response_mean == 900


def test_slime_with_per_sample_lengths(tmp_path):
    path = _write(tmp_path, "train.log", SLIME)
    (tmp_path / "rollout_0.jsonl").write_text('{"response_length": 5}\n{"total_length": 30, "prompt_length": 10}\n')
    log = read_log(str(path))
    s = log.steps[0]
    assert log.format == "slime" and len(log.steps) == 1  # the two perf lines of rollout 0 merge
    assert (s.generation_s, s.old_log_prob_s, s.update_actor_s, s.weight_sync_s, s.step_s) == (40.5, 4, 15, 0.4, 61)
    assert (s.response_mean, s.response_clip_ratio, s.response_lengths) == (700, 0.02, (5, 20))


def test_trl_state_step_time_from_timestamps(tmp_path):
    log = read_log(str(_write(tmp_path, "trainer_state.json", TRL)))
    a, b = log.steps
    assert log.format == "trl-state" and (a.step, b.step) == (2, 4)
    assert (a.response_mean, a.response_max, a.response_min, a.response_clip_ratio) == (300, 1024, 20, 0.05)
    assert a.step_s is None and b.step_s == 50.0  # 100 s over two steps


def test_plain_csv(tmp_path):
    log = read_log(str(_write(tmp_path, "phases.csv", PLAIN)))
    assert log.format == "csv" and log.steps[1].step_s is None and log.steps[1].update_actor_s == 21


def test_every_format_has_a_sample():
    tested = {"verl-console", "verl-jsonl", "verl-wandb-csv", "verl-tensorboard", "nemo-rl-json", "slime"}
    assert tested | {"trl-state", "csv"} == set(FORMATS)


# ------------------------------------------------------------- broken files: exit 2, one line


@pytest.fixture
def base(tmp_path):
    from rlsim.scenario import builtin_scenarios, read_yaml

    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(read_yaml(builtin_scenarios()["default"])))
    return str(path)


def _fit_error(tmp_path, base, path, *extra) -> str:
    return one_line_error(["fit", str(path), "--scenario", base, "-o", str(tmp_path / "fitted.yaml"), *extra])


BROKEN = [
    ("out.log", VERL_CONSOLE[: VERL_CONSOLE.rindex("timing_s/step") + 9], "out.log:3", "not key:value"),
    ("m.jsonl", VERL_JSONL[:-20], "m.jsonl:2", "truncated"),
    ("export.csv", WANDB_CSV[:-8], "export.csv:3", "truncated"),
    ("metrics.json", json.dumps(NEMO, indent=1)[:-30], "metrics.json:", "truncated"),
    ("train.log", SLIME[:-40], "train.log:2", "cut-off"),
    ("trainer_state.json", json.dumps(TRL, indent=1)[:-20], "trainer_state.json:", "truncated"),
    ("phases.csv", PLAIN + "3,50", "phases.csv:4", "truncated"),
]


@pytest.mark.parametrize(("name", "text", "where", "why"), BROKEN, ids=[b[0] for b in BROKEN])
def test_truncated_file_is_one_line_naming_file_and_line(tmp_path, base, name, text, where, why):
    line = _fit_error(tmp_path, base, _write(tmp_path, name, text))
    assert where in line and why in line and line.startswith("error: ")


def test_pipelined_figures_are_shown_not_fitted(tmp_path, base):
    from cli_helpers import runner

    from rlsim.cli import app

    res = runner.invoke(app, ["fit", str(_write(tmp_path, "c.log", VERL_CONSOLE)), "-s", base, "-o",
                              str(tmp_path / "f.yaml"), "--steps", "1:2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "logged, not fitted: trainer_idle_ratio = 0.1" in res.output


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("m.jsonl", '{"step": 1, "timing_s/gen": "fast"}\n', "timing_s/gen"),
        ("metrics.json", json.dumps({"timing/train/generation": [1, 2]}), "timing/train/generation"),
        ("trainer_state.json", json.dumps({"log_history": [{"loss": 1}]}), "step"),
        ("phases.csv", "step,step_s\n1,abc\n", "step_s"),
        ("export.csv", "Step,x - timing_s/gen\n1,nan\n", "timing_s/gen"),
    ],
)
def test_bad_value_is_one_line_naming_the_key(tmp_path, base, name, text, key):
    line = _fit_error(tmp_path, base, _write(tmp_path, name, text))
    assert f"'{key}'" in line and name in line


def test_truncated_tensorboard_file(tmp_path, base):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    writer.add_scalar("timing_s/gen", 1.0, 1)
    writer.close()
    (event,) = (tmp_path / "tb").glob("*tfevents*")
    event.write_bytes(event.read_bytes()[:-7])
    line = _fit_error(tmp_path, base, tmp_path / "tb")
    assert event.name in line and "truncated" in line


def test_unknown_or_unrecognised_format(tmp_path, base):
    path = _write(tmp_path, "notes.txt", "hello\n")
    assert "--format" in _fit_error(tmp_path, base, path)
    assert "unknown --format 'wandb'" in _fit_error(tmp_path, base, path, "--format", "wandb")
    assert "no such file" in _fit_error(tmp_path, base, tmp_path / "missing.log")
    empty = _write(tmp_path, "empty.jsonl", '{"step": 1, "actor/loss": 0.1}\n')
    assert "no step carries" in _fit_error(tmp_path, base, empty)


def test_detect_format(tmp_path):
    assert detect_format(str(_write(tmp_path, "a.csv", WANDB_CSV))) == "verl-wandb-csv"
    assert detect_format(str(_write(tmp_path, "b.csv", PLAIN))) == "csv"
    assert detect_format(str(_write(tmp_path, "c.txt", SLIME))) == "slime"
    assert detect_format(str(_write(tmp_path, "d.txt", VERL_CONSOLE))) == "verl-console"
