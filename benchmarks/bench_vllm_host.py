"""vLLM V1's serial host work per running sequence per decode step, timed on vLLM's own code.

Without async scheduling (vLLM before 0.10), a V1 engine step runs on the host, in series with
the GPU: the scheduler's `schedule()`, the model runner's `_update_states` and `_prepare_inputs`,
the forward and sampler launches, the per-request loop after sampling, the scheduler's
`update_from_output`, and (in-process, as verl's `LLM` with `external_launcher` runs it) the
output processor. The GPU waits for all of it. rlsim charges the part that grows with the batch
as `pipeline.inference.host_per_sequence_s` (seconds per running sequence per step; the forward's
kernel launches are the eager floor, a separate term).

This drives those functions of an installed vLLM with decode steps of B sequences and a fake
model output (no GPU, no model: the forward itself is not run), and fits time = fixed + per_seq
x B over several batch sizes. Device copies are excluded by construction: the runner's "device"
is the CPU here, so its `non_blocking` host-to-device copies, asynchronous DMA on a GPU, are
synchronous copies; a short `max_model_len` keeps them to a few hundred bytes per sequence.

Install vLLM 0.8.5 (the version verl v0.4.0 pinned) in its own virtual environment; without a
GPU its wheel imports once its Python dependencies are there (its CUDA kernels fail to load,
with a warning, and are not used):

    python -m venv /tmp/vv && /tmp/vv/bin/pip install torch==2.13.0 triton numba==0.61.2 \
        cachetools psutil numpy requests tqdm blake3 py-cpuinfo "transformers>=4.51.1,<4.53" \
        protobuf pydantic pyzmq msgspec cloudpickle pyyaml einops scipy prometheus_client \
        sentencepiece pillow "huggingface-hub<1" openai fastapi aiohttp tiktoken \
        partial-json-parser gguf importlib_metadata filelock llguidance
    /tmp/vv/bin/pip install --no-deps vllm==0.8.5
    /tmp/vv/bin/python benchmarks/bench_vllm_host.py

Prints the time per step of each part at each batch size, and the fitted per-sequence cost.
`--logprobs 0` asks every request for its sampled token's log-prob, as verl's rollout does
(`logprobs=0` in verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py): the runner's `tolists`,
the scheduler's per-request slice and the output processor's per-token Logprob then add to
`post_sampling`, `update_from_output` and `process_outputs`: a median 3.1 us a sequence, 1.3-5.7
over three paired runs at 256-1024 sequences (2026-12-01). `--logprobs 1` (verl's fully-async
server) costs no more: 11.0-13.9 us a sequence in those parts against 12.5-15.1 with 0 and 3.8-5.9
without, interleaved runs on the loaded VM (2026-12-01). Compare those three parts: `schedule` and
`update_states`, which log-probs do not touch, vary with the machine's load.
Measured on a 2-core AMD EPYC VM (rlsim's CI machine), vLLM 0.8.5: see docs/knobs.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import types
from pathlib import Path

# A tiny Qwen2 config: the scheduler and runner read only shapes from it (no weights are loaded).
_TINY_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
}
PROMPT_TOKENS = 300
# CPU time of this (single-threaded) process: the work itself, not the waits of a shared machine.
_clock = time.process_time
BLOCKS = 200_000


def _patch_platform_for_cpu():
    """Let vLLM's GPU runner be built on a machine without CUDA (its host code only is timed)."""
    import torch
    from vllm.platforms import current_platform

    current_platform.is_async_output_supported = lambda *a, **k: False
    current_platform.device_name = "cpu"
    current_platform.device_type = "cpu"
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
    import vllm.utils
    import vllm.v1.worker.gpu_model_runner as gmr
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    gmr.is_pin_memory_available = lambda: False
    vllm.utils.is_pin_memory_available = lambda: False
    gmr.get_attn_backend = lambda *a, **k: FlashAttentionBackend
    return gmr


def measure(
    batch: int, steps: int, max_model_len: int, model_dir: str, logprobs: int | None = None
) -> dict[str, float]:
    """Median seconds per decode step of each host part, for `batch` running sequences.

    `logprobs`: the requests' SamplingParams.logprobs (verl's rollout asks for 0: the sampled
    token's own log-prob); the runner then turns the sampler's logprob tensors into lists every
    step, the scheduler slices them per request and the output processor keeps one per token.
    """
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadataBuilder
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import LogprobsTensors, ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    torch.set_num_threads(1)  # process time then counts this thread only, not idle intra-op workers
    gmr = _patch_platform_for_cpu()
    mc = ModelConfig(
        model=model_dir,
        task="generate",
        tokenizer=model_dir,
        tokenizer_mode="auto",
        trust_remote_code=False,
        dtype="bfloat16",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
    )
    sc = SchedulerConfig(max_num_seqs=batch, max_num_batched_tokens=max(16384, batch), max_model_len=max_model_len)
    cc = CacheConfig(block_size=16, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto")
    cc.num_gpu_blocks = BLOCKS
    vc = VllmConfig(scheduler_config=sc, model_config=mc, cache_config=cc, device_config=DeviceConfig("cpu"))
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, use_mla=False)
    kvc = KVCacheConfig(num_blocks=BLOCKS, tensors={}, kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    sched = Scheduler(vc, kvc, StructuredOutputManager(vc), log_stats=True)
    runner = gmr.GPUModelRunner(vc, torch.device("cpu"))
    runner.attn_metadata_builder = FlashAttentionMetadataBuilder(runner)
    runner.kv_cache_config = kvc
    out_proc = OutputProcessor(tokenizer=types.SimpleNamespace(get_lora_tokenizer=lambda lr: None), log_stats=True)
    for i in range(batch):
        # verl's rollout: no detokenisation, outputs only at the end (LLM.generate)
        sp = SamplingParams(
            max_tokens=10**6,
            ignore_eos=True,
            temperature=1.0,
            detokenize=False,
            logprobs=logprobs,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        ids = list(range(PROMPT_TOKENS))
        sched.add_request(Request(str(i), ids, None, None, None, sp, 151643, 0.0))
        out_proc.add_request(EngineCoreRequest(str(i), ids, None, None, None, sp, 151643, 0.0, None), prompt=None)

    def runner_output() -> ModelRunnerOutput:
        ids = list(runner.input_batch.req_ids)
        lists = None
        if logprobs is not None:  # the sampler's [batch, logprobs + 1] tensors, to lists (execute_model)
            width = logprobs + 1
            lists = LogprobsTensors(
                torch.full((len(ids), width), 7, dtype=torch.int32),
                torch.full((len(ids), width), -0.5),
                torch.zeros(len(ids), dtype=torch.int32),
            ).tolists()
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index=dict(runner.input_batch.req_id_to_index),
            sampled_token_ids=[[7] for _ in ids],
            spec_token_ids=None,
            logprobs=lists,
            prompt_logprobs_dict={},
        )

    def step(times: dict[str, list[float]] | None) -> int:
        t0 = _clock()
        so = sched.schedule()
        t1 = _clock()
        runner._update_states(so)
        t2 = _clock()
        runner._prepare_inputs(so)
        t3 = _clock()
        for req_id in runner.input_batch.req_ids:  # execute_model's loop over requests after sampling
            state = runner.requests[req_id]
            _ = state.num_computed_tokens + so.num_scheduled_tokens[req_id] < state.num_tokens
        torch.full((len(runner.input_batch.req_ids), 1), 7).tolist()  # sampled ids to Python lists
        out = runner_output()
        t4 = _clock()
        core_out = sched.update_from_output(so, out)
        t5 = _clock()
        out_proc.process_outputs(core_out.outputs, engine_core_timestamp=0.0, iteration_stats=None)
        t6 = _clock()
        if times is not None:
            for key, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5), strict=True):
                times[key].append(dt)
        return len(so.num_scheduled_tokens)

    # prefill every prompt first (chunks of max_num_batched_tokens), then time decode steps only
    while sched.waiting or any(r.num_computed_tokens < r.num_prompt_tokens for r in sched.running):
        step(None)
    step(None)
    parts = ("schedule", "update_states", "prepare_inputs", "post_sampling", "update_from_output", "process_outputs")
    times: dict[str, list[float]] = {k: [] for k in parts}
    running = 0
    for _ in range(steps):
        running = step(times)
    assert running == batch, f"{running} of {batch} sequences decoding"
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="16,64,128,256", help="Running sequences per step, comma-separated.")
    ap.add_argument("--steps", type=int, default=300, help="Decode steps timed per batch size (median).")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--json", help="Write the figures as JSON to this path.")
    ap.add_argument(
        "--logprobs",
        type=int,
        default=None,
        help="SamplingParams.logprobs of every request (verl's rollout: 0, the sampled token's log-prob).",
    )
    args = ap.parse_args()
    import vllm

    batches = [int(b) for b in args.batches.split(",")]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(_TINY_QWEN2))
        for b in batches:
            rows[b] = measure(b, args.steps, args.max_model_len, tmp, args.logprobs)
    totals = [sum(rows[b].values()) for b in batches]
    n = len(batches)
    mean_b, mean_t = sum(batches) / n, sum(totals) / n
    slope = sum((b - mean_b) * (t - mean_t) for b, t in zip(batches, totals, strict=True)) / sum(
        (b - mean_b) ** 2 for b in batches
    )
    fixed = mean_t - slope * mean_b
    lp = "" if args.logprobs is None else f", logprobs={args.logprobs}"
    print(f"vLLM {vllm.__version__} V1 host work per decode step (median of {args.steps} steps{lp}), ms:")
    print("batch  " + "  ".join(f"{k:>18s}" for k in rows[batches[0]]) + "       total")
    for b, t in zip(batches, totals, strict=True):
        print(f"{b:5d}  " + "  ".join(f"{v * 1e3:18.3f}" for v in rows[b].values()) + f"  {t * 1e3:10.3f}")
    print(f"fit: {fixed * 1e3:.3f} ms + {slope * 1e6:.2f} us x running sequences")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "vllm": vllm.__version__,
                    "logprobs": args.logprobs,
                    "fixed_s": fixed,
                    "per_sequence_s": slope,
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
