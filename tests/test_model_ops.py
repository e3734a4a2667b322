"""A model's own operators (Vidur-style): the fits, the profile section, the models that use it.

Pure parts run on synthetic rows with known parameters. The performance models must use a
profile's `model_ops` for the model they describe (one device) and keep the generic terms,
unchanged, otherwise. How well the fitted decode line predicts a real iteration the sweep never
ran is measured by benchmarks/bench_calibration_holdout.py (a figure of this shared host's speed,
not a test).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error
from typer.testing import CliRunner

from rlsim.calibration import fit
from rlsim.calibration.model_ops_fit import fit_model_ops, ops_model
from rlsim.calibration.profile import ModelOps, datasheet_profile, load_profile, model_key, save_profile
from rlsim.catalog import get_llm, llm_from_hf_config
from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.models.decode import iteration_cost
from rlsim.models.prefill import prefill_s
from rlsim.models.train_step import TrainShape, train_phases
from rlsim.models.weight_sync import SyncPath, sync_s
from rlsim.scenario import Transport

runner = CliRunner()
TINY = {  # the validation policy's config.json (rlsim.trainer.model.to_hf_config, defaults)
    "_name_or_path": "rlsim-tiny-gpt", "model_type": "rlsim-tiny-gpt", "num_hidden_layers": 2,
    "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 2,
    "head_dim": 32, "vocab_size": 13, "max_position_embeddings": 12, "tie_word_embeddings": True,
    "hidden_act": "gelu", "attention_bias": False, "torch_dtype": "float32",
}  # fmt: skip
OPS = ModelOps(
    model="rlsim-tiny-gpt", model_type="rlsim-tiny-gpt", dtype="float32",
    decode_fixed_s=1.1e-3, decode_per_sequence_s=9e-6, decode_per_kv_token_s=1.3e-6,
    prefill_fixed_s=0.8e-3, prefill_per_sequence_s=3e-6, prefill_per_token_s=6e-6,
    train_fixed_s=3.5e-3, train_per_token_s=15e-6, forward_fixed_s=1e-3, forward_per_token_s=5e-6,
    optimizer_s=2.5e-3, weight_bytes=400_896.0, weight_sync_latency_s=0.2e-3, weight_copy_gbps=20.0,
)  # fmt: skip


@pytest.fixture
def tiny(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return llm_from_hf_config(path)


def _with_ops(llm) -> object:
    return datasheet_profile("h100-sxm").model_copy(update={"model_ops": {model_key(llm): OPS}})


# ---- fits --------------------------------------------------------------------------------------------


def test_linear_fit_recovers_a_decode_iteration() -> None:
    b = np.repeat([1, 8, 32, 96, 192], 3).astype(float)
    k = b * np.tile([3, 6, 12], 5)
    seconds = (1.1e-3 + 9e-6 * b + 1.3e-6 * k) * (1 + 0.01 * np.random.default_rng(0).uniform(-1, 1, b.size))
    f = fit.fit_linear(np.column_stack([np.ones_like(b), b, k]), seconds)
    for got, want in zip(f.coefs, (1.1e-3, 9e-6, 1.3e-6), strict=True):
        assert abs(got / want - 1) < 0.05, f.coefs
    assert f.quality.r2 > 0.99 and f.quality.max_rel_residual < 0.02
    assert f(1.0, 10.0, 50.0) == pytest.approx(f.coefs[0] + 10 * f.coefs[1] + 50 * f.coefs[2])


def test_linear_fit_rejects_unusable_input() -> None:
    with pytest.raises(ValueError, match="as many measurements"):
        fit.fit_linear([[1.0, 2.0, 3.0]], [1.0])
    with pytest.raises(ValueError, match="positive"):
        fit.fit_linear([[1.0, 1.0], [1.0, 2.0]], [1.0, 0.0])


def _synthetic_rows(key: str) -> list[dict]:
    """Operator rows generated from OPS (exact), tagged as one model's."""
    tag = {"model_key": key, "model": "rlsim-tiny-gpt", "model_type": "rlsim-tiny-gpt", "dtype": "float32"}
    o = OPS
    rows = [
        tag | {"kernel": "op_decode", "batch": b, "kv_tokens": b * c,
               "seconds": o.decode_fixed_s + o.decode_per_sequence_s * b + o.decode_per_kv_token_s * b * c}
        for b in (1, 8, 32, 96, 192) for c in (3, 6, 12)
    ]  # fmt: skip
    rows += [
        tag | {"kernel": "op_prefill", "prompts": n, "tokens": n * p,
               "seconds": o.prefill_fixed_s + o.prefill_per_sequence_s * n + o.prefill_per_token_s * n * p}
        for n in (1, 32, 128, 256) for p in (2, 5, 11)
    ]  # fmt: skip
    for t in (96, 384, 768, 1536):
        rows.append(tag | {"kernel": "op_train", "tokens": t, "seconds": o.train_fixed_s + o.train_per_token_s * t})
        forward_s = o.forward_fixed_s + o.forward_per_token_s * t
        rows.append(tag | {"kernel": "op_forward", "tokens": t, "seconds": forward_s})
    rows.append(tag | {"kernel": "op_optimizer", "seconds": o.optimizer_s})
    copy_s = o.weight_bytes / (o.weight_copy_gbps * 1e9)
    rows += [tag | {"kernel": "op_copy", "bytes": k * o.weight_bytes, "seconds": k * copy_s} for k in (1, 4, 16)]
    rows += [
        tag | {"kernel": "op_weight_sync", "direction": d, "bytes": o.weight_bytes,
               "seconds": o.weight_sync_latency_s + copy_s}
        for d in ("publish", "load")
    ]  # fmt: skip
    return rows


def test_model_ops_fit_recovers_every_term(tiny) -> None:
    key = model_key(tiny)
    ops, fits = fit_model_ops([{"kernel": "gemm"}, *_synthetic_rows(key)])  # other kernels are ignored
    assert list(ops) == [key]
    got, want = ops[key].model_dump(exclude={"measured_range"}), OPS.model_dump(exclude={"measured_range"})
    for name, value in want.items():
        if isinstance(value, float):
            assert got[name] == pytest.approx(value, rel=0.02, abs=1e-12), name
        else:
            assert got[name] == value, name
    assert ops[key].measured_range["decode_batch"] == [1.0, 192.0]
    assert {f["quantity"].split()[0] for f in fits} == {"ops_decode", "ops_prefill", "ops_train", "ops_forward",
                                                        "ops_copy"}  # fmt: skip
    assert fit_model_ops([{"kernel": "gemm"}]) == ({}, [])


# ---- which models can be timed -----------------------------------------------------------------------


def test_the_policy_config_names_its_module_and_key(tmp_path: Path, tiny) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    model = ops_model(path)
    assert model is not None and model.key == model_key(tiny) == "L2-H64-I256-A2-KV2-D32-V13-T12-P100224"
    assert (model.n_layer, model.n_head, model.n_embd, model.vocab_size, model.block_size) == (2, 2, 64, 13, 12)
    other = tmp_path / "llama.json"
    other.write_text(json.dumps(TINY | {"model_type": "llama", "intermediate_size": 172}))
    assert ops_model(other) is None  # no module here: the generic terms apply
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(TINY | {"intermediate_size": 100}))
    with pytest.raises(ScenarioError, match="intermediate_size must be 4 x 64"):
        ops_model(bad)


def test_calibrate_refuses_a_bad_model_config_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(TINY | {"num_key_value_heads": 1}))
    line = one_line_error(["calibrate", "--device", "cpu", "--model", str(bad), "--out", str(tmp_path / "p.json")])
    assert line.startswith("error: model: ") and "num_key_value_heads" in line
    line = one_line_error(["calibrate", "--model", str(tmp_path / "none.json"), "--out", str(tmp_path / "p.json")])
    assert line.startswith("error: model: ") and not (tmp_path / "p.json").exists()


def test_calibrate_writes_and_prints_a_models_ops(tmp_path: Path, monkeypatch, tiny) -> None:
    profile = _with_ops(tiny)  # calibrate patched: the sweep itself is covered elsewhere
    seen = {}
    monkeypatch.setattr("rlsim.calibration.run.calibrate", lambda **kw: seen.update(kw) or profile)
    out = tmp_path / "p.json"
    res = runner.invoke(app, ["calibrate", "--model", "some/config.json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert seen["model"] == "some/config.json" and load_profile(out) == profile
    assert "model ops" in res.output and "µs/KV token" in res.output


# ---- the models use the fit for its model, the generic terms otherwise --------------------------------


def test_decode_uses_the_models_own_iteration(tiny) -> None:
    profile = _with_ops(tiny)
    cost = iteration_cost(tiny, profile, 1, 48)
    assert cost.at(48 * 9) == pytest.approx(1.1e-3 + 9e-6 * 48 + 1.3e-6 * 48 * 9)
    # the closed form still sums the iterations, K growing by the batch each one
    assert cost.span_s(480.0, 5) == pytest.approx(sum(cost.at(480.0 + 48 * j) for j in range(5)))
    assert cost.iterations_within(480.0, cost.span_s(480.0, 3), 10) == 3
    generic = datasheet_profile("h100-sxm")
    assert iteration_cost(tiny, profile, 2, 48) == iteration_cost(tiny, generic, 2, 48)  # TP: not what was timed


def test_prefill_train_and_sync_use_the_models_own_passes(tiny) -> None:
    profile = _with_ops(tiny)
    assert prefill_s(tiny, profile, 1, [4] * 128) == pytest.approx(0.8e-3 + 3e-6 * 128 + 6e-6 * 512)
    shape = TrainShape(gpus=1, tp=1, pp=1, micro_batch_tokens=512, activation_recompute=False, minibatches=2,
                       trainable_params=tiny.total_params)  # fmt: skip
    lengths = [7] * 128  # 896 tokens: 448 per minibatch, one micro-batch each; two for a forward over all
    phases = train_phases(tiny, profile, shape, lengths, reference_model=True, recompute_old_logprobs=True,
                          critic=False)  # fmt: skip
    assert phases.logprob_s == pytest.approx(2 * (2 * 1e-3 + 5e-6 * 896))
    assert phases.train_s == pytest.approx(2 * 3.5e-3 + 15e-6 * 896)
    assert phases.optimizer_s == pytest.approx(2 * 2.5e-3)
    path = SyncPath(link=profile.intra_node, engines=1, engine_tp=1, filesystem_gbps=1.0, bucket_bytes=1e8)
    assert sync_s(tiny, profile, Transport.cuda_ipc, path, 1.0) == pytest.approx(0.2e-3 + 400_896 / 20e9)


def test_other_models_and_layouts_keep_the_generic_terms(tiny) -> None:
    """A profile with ops for the tiny model gives exactly the datasheet figures to everything else."""
    profile, generic = _with_ops(tiny), datasheet_profile("h100-sxm")
    qwen = get_llm("qwen2.5-7b")
    assert iteration_cost(qwen, profile, 1, 64) == iteration_cost(qwen, generic, 1, 64)
    assert prefill_s(qwen, profile, 1, [512] * 8) == prefill_s(qwen, generic, 1, [512] * 8)
    for llm, gpus, trainable in ((qwen, 1, qwen.total_params), (tiny, 2, tiny.total_params), (tiny, 1, 1e3)):
        shape = TrainShape(gpus=gpus, tp=1, pp=1, micro_batch_tokens=4096, activation_recompute=True,
                           minibatches=4, trainable_params=trainable)  # fmt: skip
        args = (shape, [900] * 32)
        kw = {"reference_model": True, "recompute_old_logprobs": True, "critic": False}
        assert train_phases(llm, profile, *args, **kw) == train_phases(llm, generic, *args, **kw)
    path = SyncPath(link=generic.intra_node, engines=1, engine_tp=1, filesystem_gbps=1.0, bucket_bytes=1e8)
    assert sync_s(qwen, profile, Transport.cuda_ipc, path, 1e9) == sync_s(qwen, generic, Transport.cuda_ipc, path, 1e9)


# ---- the profile section -----------------------------------------------------------------------------


def test_profiles_round_trip_with_and_without_model_ops(tmp_path: Path, tiny) -> None:
    for profile in (datasheet_profile("h100-sxm"), _with_ops(tiny)):
        save_profile(profile, tmp_path / "p.json")
        assert load_profile(tmp_path / "p.json") == profile
    # a version-1 file written before the section existed still loads, with no ops
    raw = datasheet_profile("h100-sxm").model_dump(mode="json")
    raw.pop("model_ops")
    (tmp_path / "old.json").write_text(json.dumps(raw))
    old = load_profile(tmp_path / "old.json")
    assert old.model_ops == {} and old.ops_for(tiny) is None
    broken = _with_ops(tiny).model_dump(mode="json")
    broken["model_ops"][model_key(tiny)]["decode_fixed_s"] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    with pytest.raises(ScenarioError, match="decode_fixed_s"):
        load_profile(tmp_path / "bad.json")
