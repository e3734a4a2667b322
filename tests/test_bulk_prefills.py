"""The vectorised prefill (a refill times all its prefills at once) is the scalar `prefill_s` bit for
bit: every catalog model (dense and MoE) on every catalog GPU, TP 1 to 8, a link across nodes, and a
profile with the model's own timed operators; prefills of one context and of several."""

from __future__ import annotations

import numpy as np
import pytest

from rlsim.calibration.profile import ModelOps, datasheet_profile, model_key
from rlsim.catalog.gpus import load_gpus
from rlsim.catalog.llms import load_llms
from rlsim.models.prefill import prefill_s, prefills_s

# one context each (a recompute's readmission), then groups of several (fresh prompts, a few readmissions)
PREFILLS = [[c] for c in (1, 2, 7, 600, 4097, 9000, 32768, 65537, 131072, 9000, 3)] + [
    [600, 600, 600],
    [1, 2],
    [9001, 377, 32768, 5],
    [4096] * 16,
    [131072, 131071],
]


def _same(llm, profile, tp, link=None) -> None:
    tokens = np.array([sum(p) for p in PREFILLS], dtype=np.int64)
    sum_sq = np.array([sum(n * n for n in p) for p in PREFILLS], dtype=np.int64)
    counts = np.array([len(p) for p in PREFILLS], dtype=np.int64)
    got = prefills_s(llm, profile, tp, tokens, sum_sq, counts, link)
    assert got.tolist() == [prefill_s(llm, profile, tp, p, link) for p in PREFILLS]  # exact, not approximate


@pytest.mark.parametrize("gpu", sorted(load_gpus()))
def test_every_model_and_tp_on_each_gpu(gpu: str) -> None:
    profile = datasheet_profile(gpu)
    llms = load_llms().values()
    assert any(llm.moe is not None for llm in llms) and any(llm.moe is None for llm in llms)
    for llm in llms:
        for tp in (1, 2, 4, 8):
            _same(llm, profile, tp)
        _same(llm, profile, 8, profile.inter_node)


def test_a_models_own_timed_operators() -> None:
    llm = load_llms()["qwen2.5-7b"]
    ops = ModelOps(
        model="m", model_type="m", dtype="bfloat16", decode_fixed_s=1e-3, decode_per_sequence_s=1e-6,
        decode_per_kv_token_s=1e-7, prefill_fixed_s=0.8e-3, prefill_per_sequence_s=3e-6, prefill_per_token_s=6e-6,
        train_fixed_s=1e-3, train_per_token_s=1e-6, forward_fixed_s=1e-3, forward_per_token_s=1e-6,
        optimizer_s=1e-3, weight_bytes=1e9, weight_sync_latency_s=1e-4, weight_copy_gbps=20.0,
    )  # fmt: skip
    profile = datasheet_profile("h100-sxm").model_copy(update={"model_ops": {model_key(llm): ops}})
    _same(llm, profile, 1)  # the fitted line
    _same(llm, profile, 2)  # TP: the generic terms


def test_prefill_computes_the_lm_head_only_where_it_samples() -> None:
    """An engine's prefill takes logits at each prompt's last position only (vLLM's logits
    processor prunes to the sampling positions), so against a training forward of the same tokens
    it saves the LM head's 2 x vocab x hidden FLOPs on every other position: for Qwen2.5-7B
    (152,064 x 3,584) and two prompts of 1,000 tokens, 2 x 0.545 B x 1,998 = 2.18 TFLOPs."""
    from rlsim.models import footprint
    from rlsim.models.decode import gemm_layer_params, tokens_half

    llm = load_llms()["qwen2.5-7b"]
    lm_head = 152_064 * 3_584
    assert footprint.logit_params(llm) == lm_head
    tokens, sum_sq = 2000.0, 2 * 1000.0**2
    saved = footprint.forward_flops(llm, tokens, sum_sq) - footprint.prefill_flops(llm, tokens, 2.0, sum_sq)
    assert saved == pytest.approx(2 * lm_head * (2000 - 2), rel=1e-12)
    assert saved == pytest.approx(2.178e12, rel=1e-3)
    # one prompt of one token: the LM head runs on its only position, as in a forward
    assert footprint.prefill_flops(llm, 1.0, 1.0, 1.0) == pytest.approx(footprint.forward_flops(llm, 1.0, 1.0))
    # compute-bound on an H100 (2,000 tokens): the prefill is faster by exactly the saved FLOPs' time
    profile = datasheet_profile("h100-sxm")
    half = tokens_half(profile, gemm_layer_params(llm, 1))  # the rows at half rate for this layer size
    rate = profile.matmul_tflops * 1e12 * tokens / (tokens + half)
    full = profile.iteration_overhead_s + footprint.forward_flops(llm, tokens, sum_sq) / rate
    assert prefill_s(llm, profile, 1, [1000, 1000]) == pytest.approx(full - saved / rate, rel=1e-12)
