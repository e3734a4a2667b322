"""Decode iterations of one inference engine (a TP group), and their closed-form sums.

One iteration of an engine decoding `b` sequences that together hold `K` cached tokens costs

    t(b, K) = overhead + tp_comm(b) + t_sampler(b) + max(t_host, t_linear(b) + t_attention(K))
    t_linear    = max(weight bytes(b) / (tp * memory_gbps), 2 * P_matmul * b / (tp * gemm_rate(b)))
                  (+ a MoE model's routed experts at gemm_rate(b x k / E) instead: `moe_layer.engine_extra_s`)
    t_attention = K * max(kv_bytes / (tp * attention_gbps), attention FLOPs per token / (tp * matmul_tflops))
                  (+ a hybrid model's Gated DeltaNet layers: b x max(state read + write / (tp * attention_gbps),
                  recurrence FLOPs / (tp * matmul_tflops)), no K term: their state is one per sequence)

The roofline applies kernel by kernel: an iteration's GEMMs and its attention are different
kernels that run one after the other on the GPU's stream, so each is bounded by its own bytes or
FLOPs and their times add (the per-layer roofline that LLM-Viewer sums over a network:
hahnyuan/LLM-Viewer@7078ad4e480dcbcceca42020b92588657fa7b847 README.md, Yuan et al., "LLM
Inference Unveiled: Survey and Roofline Model Insights", arXiv 2402.16363). A GEMM that is
compute-bound at a large batch (a 7B model's from 28 sequences on an H20, 140 on an H200 and 201
on an H100 SXM, with the datasheet profiles) does not hide the attention's KV reads. While both
are memory-bound the sum is one roofline over all the bytes, as rlsim had it until 2026-12-01,
when it took one maximum over the whole iteration.

t_sampler is the sampler's extra memory traffic, b x vocabulary x bytes per logit over one GPU's
bandwidth (`sampler_s`): 0 unless the scenario sets the bytes (vLLM 0.6's V0 sampler; vLLM V1's
random sampling at temperature 1, as RL rollouts run it).

P_matmul is the active parameters less an untied input embedding, which a lookup reads one row
of per token (`footprint.matmul_params`); the weight bytes leave it out for the same reason.

t_host is the host's time to launch the iteration's kernels one by one, which bounds the GPU
time from below when the engine runs without CUDA graphs (vLLM `enforce_eager`, the default in
many RL recipes): the GPU idles whenever its kernels are shorter than their launches, so at a
small batch an eager iteration costs layers x the per-layer launch time, and at a large batch
the GPU work hides it. With CUDA graphs one graph launch replaces them (t_host = 0; the graph
launch and scheduling are in `overhead`), up to the largest batch the engine captured a graph
for: a larger decode batch runs without one and pays t_host again (`runs_eager`).

For a fixed batch the iteration is linear in K above the host floor (`IterationCost` keeps the
form c + max(floor, mem line, compute line); the compute line is the GEMMs' and attention's FLOPs
alone, never above the kernel-by-kernel line), and K grows by b every iteration, so the time
of the next k iterations is a sum of the maximum of two linear functions of the iteration index:
a closed form (`span_s`). That is what lets an engine jump from one event (a finish, an
admission, a weight sync) to the next without simulating tokens. `iterations_within` inverts it.

When the profile holds the simulated model's own operators (`Profile.ops_for`, timed by
calibration at the model's shapes) and the engine is one device, the iteration is the fitted
t(b, K) = decode_fixed + decode_per_sequence * b + decode_per_kv_token * K instead: still one
line in K at fixed b, so the same closed form applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from rlsim.calibration.profile import LinkFit, ModelOps, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint, moe_layer


def gemm_rate_flops(profile: Profile, tokens: float, layer_params: float | None = None) -> float:
    """Achieved GEMM FLOP/s for `tokens` rows: saturating in tokens (fitted by calibration).

    `layer_params`: the per-GPU GEMM parameters of one decoder layer (`gemm_layer_params`), which
    set the tokens at half rate (`tokens_half`); None: the profile's matmul_tokens_half.
    """
    t = max(tokens, 1.0)
    return profile.matmul_tflops * 1e12 * t / (t + tokens_half(profile, layer_params))


def tokens_half(profile: Profile, layer_params: float | None) -> float:
    """GEMM rows at half the saturated rate for a decoder layer of `layer_params` GEMM parameters per GPU.

    A smaller GEMM needs more rows to keep a GPU's SMs busy: its output tiles are fewer per row
    (N) and each holds a shorter reduction (K). Measured fp16 GEMM kernels on an H100 (Vidur's
    operator profiles of Llama-2-7B, InternLM-20B, CodeLlama-34B, Llama-2-70B and Qwen-72B at TP
    1-8 and phi-2, one decoder layer's four linear layers at 1-4096 rows:
    microsoft/vidur@7d47513363ec447a741ac5e47241580b47724fbf data/profiling/compute/h100/*/mlp.csv,
    2024-05-14; benchmarks/bench_gemm_rows.py) half-saturate, in this model's max(weight reads,
    GEMMs) form at 128-4096 rows, at 82-596 rows, falling as the layer's per-GPU parameters P
    rise (25M-872M) as P^-0.53 (21 configurations); with the exponent -1/2, 96 rows at 697M
    (CodeLlama-34B at TP1: 692M, best fit 101) and within 2-12% rms of every configuration's
    time, against 7-60% with 96 rows at every size. So the profile's matmul_tokens_half holds
    at matmul_tokens_half_params and scales as sqrt(matmul_tokens_half_params / layer_params).
    Vidur's A100 profiles of the same layers keep the law within 3-13% rms; an A100 reference of
    its own gains under a point and follows the saturated rate assumed, so every datasheet profile
    keeps the H100's (`bench_gemm_rows.py --laws`). A `rlsim calibrate` profile fits its own from
    the calibrated layer's GEMMs at TP 1-8 (`calibration.fit.fit_gemm_size`). A profile without
    that field (a measured one whose sizes showed no such law, or an older one) or a call
    without a size uses matmul_tokens_half as it is.
    """
    reference = profile.matmul_tokens_half_params
    if reference is None or layer_params is None or layer_params <= 0:
        return profile.matmul_tokens_half
    return profile.matmul_tokens_half * math.sqrt(reference / layer_params)


def gemm_layer_params(llm: LlmSpec, tp: int) -> float | None:
    """Per-GPU GEMM parameters of one decoder layer of a dense model (the LM head left out).

    The linear layers that a token multiplies with, over the layers, shared by the TP ranks
    (column and row parallel). None for a MoE model: its routed experts run grouped GEMMs whose
    rows per expert `moe_layer` prices on its own, and the measurements behind `tokens_half` are
    of dense layers only.
    """
    if llm.moe is not None:
        return None
    return (footprint.matmul_params(llm) - footprint.logit_params(llm)) / llm.num_layers / tp


def allreduce_s(link_busbw_gbps: float, latency_s: float, nbytes: float, ranks: int) -> float:
    """Ring all-reduce: latency + 2(n-1)/n x bytes / busbw (nccl-tests busbw convention)."""
    if ranks <= 1:
        return 0.0
    return latency_s + 2.0 * (ranks - 1) / ranks * nbytes / (link_busbw_gbps * 1e9)


@dataclass(frozen=True)
class IterationCost:
    """Iteration time at fixed batch b as c + max(floor, mem0 + mem_k*K, comp0 + comp_k*K), seconds.

    `floor_s` is the host's kernel-launch time of an eager iteration (0 with CUDA graphs).
    """

    batch: int
    fixed_s: float
    mem0_s: float
    mem_per_token_s: float
    comp0_s: float
    comp_per_token_s: float
    floor_s: float = 0.0

    def slowed(self, factor: float) -> IterationCost:
        """The same iteration taking `factor` times as long (an engine's measured speed).

        The eager launch floor is the host's, not the engine's kernels': it stays.
        """
        return IterationCost(
            self.batch,
            self.fixed_s * factor,
            self.mem0_s * factor,
            self.mem_per_token_s * factor,
            self.comp0_s * factor,
            self.comp_per_token_s * factor,
            self.floor_s,
        )

    def at(self, kv_tokens: float) -> float:
        """Seconds of one iteration with `kv_tokens` cached tokens in the batch."""
        return self.fixed_s + max(
            self.floor_s,
            self.mem0_s + self.mem_per_token_s * kv_tokens,
            self.comp0_s + self.comp_per_token_s * kv_tokens,
        )

    def span_s(self, kv0: float, k: int) -> float:
        """Seconds of the next k iterations starting with kv0 cached tokens (K grows by batch each)."""
        if k <= 0:
            return 0.0
        b = self.batch
        # branch i of iteration j: a_i + s_i * (kv0 + j*b) = base_i + slope_i * j
        base_m, slope_m = self.mem0_s + self.mem_per_token_s * kv0, self.mem_per_token_s * b
        base_c, slope_c = self.comp0_s + self.comp_per_token_s * kv0, self.comp_per_token_s * b
        if self.floor_s > 0:  # the floor holds until the first iteration a line reaches it
            below = _floor_iterations(self.floor_s, base_m, slope_m, base_c, slope_c, k)
            a, c = _two_lines_parts(base_m, slope_m, base_c, slope_c, k)
            a0, c0 = _two_lines_parts(base_m, slope_m, base_c, slope_c, below)
            return self.fixed_s * k + self.floor_s * below + ((a + c) - (a0 + c0))
        a, c = _two_lines_parts(base_m, slope_m, base_c, slope_c, k)
        return self.fixed_s * k + a + c

    def iterations_within(self, kv0: float, elapsed_s: float, limit: int) -> int:
        """Most whole iterations (<= limit) that finish within elapsed_s (binary search on span_s).

        Every iteration of the span costs between the first's and the last's time, which
        brackets the answer to a few iterations; the bracket is checked against `span_s`
        itself (else the whole range is searched), so the answer is the plain search's.
        """
        target = elapsed_s * (1 + 1e-12)
        lo, hi = 0, limit
        first, last = self.at(kv0), self.at(kv0 + (limit - 1) * self.batch)
        if first > 0 and last > 0 and limit > 8:
            a = max(0, min(limit, int(elapsed_s / last) - 2))
            z = min(limit, int(target / first) + 2)
            if a <= z and self.span_s(kv0, a) <= target and (z == limit or self.span_s(kv0, z + 1) > target):
                lo, hi = a, z
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.span_s(kv0, mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


def spans_s(coefficients: np.ndarray, batch: np.ndarray, kv0: np.ndarray, k: np.ndarray) -> np.ndarray:
    """`IterationCost.span_s` of many spans at once, bit for bit (an engine plans a whole drain).

    `coefficients` holds one row (fixed, mem0, mem_per_token, comp0, comp_per_token, floor) per
    span, for that span's batch; `kv0` and `k` (>= 1) are each span's starting cached tokens and
    iterations. Every operation mirrors the scalar form in the same order, so the two agree
    exactly. The common case, one line winning the whole span everywhere (decode is memory-bound
    until the batch is large), skips the crossing.
    """
    fixed, mem0, mem_k, comp0, comp_k, floor = coefficients.T  # integer kv0 and k convert exactly on use
    base_m, slope_m = mem0 + mem_k * kv0, mem_k * batch
    base_c, slope_c = comp0 + comp_k * kv0, comp_k * batch
    total = fixed * k
    a, c = _two_lines_parts_v(base_m, slope_m, base_c, slope_c, k)
    if not (floor > 0).any():
        return total + a + c
    below = np.minimum(_reach_v(floor, base_m, slope_m, k), _reach_v(floor, base_c, slope_c, k))
    a0, c0 = _two_lines_parts_v(base_m, slope_m, base_c, slope_c, below)
    return np.where(floor > 0, total + floor * below + ((a + c) - (a0 + c0)), total + a + c)


def _two_lines_parts_v(
    base_m: np.ndarray, slope_m: np.ndarray, base_c: np.ndarray, slope_c: np.ndarray, k: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`_two_lines_parts` elementwise."""
    if (slope_m >= slope_c).all() and (base_m >= base_c).all():  # memory first, never overtaken
        return base_m * k + slope_m * (k - 1) * k / 2.0, np.zeros_like(base_m)
    m_first = (base_m > base_c) | ((base_m == base_c) & (slope_m >= slope_c))
    first_b, first_s = np.where(m_first, base_m, base_c), np.where(m_first, slope_m, slope_c)
    other_b, other_s = np.where(m_first, base_c, base_m), np.where(m_first, slope_c, slope_m)
    overtakes = first_s < other_s
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = (first_b - other_b) / (other_s - first_s)
    split = np.where(overtakes, np.minimum(k, np.trunc(np.where(overtakes, cross, 0.0)) + 1), k)
    zero = np.zeros_like(k)
    return _line_sums(first_b, first_s, zero, split), _line_sums(other_b, other_s, split, k)


def _reach_v(floor: np.ndarray, base: np.ndarray, slope: np.ndarray, k: np.ndarray) -> np.ndarray:
    """`_reach` elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.minimum(k, np.ceil((floor - base) / np.where(slope > 0, slope, 1.0)))
    return np.where(base >= floor, 0, np.where(slope > 0, steps, k))


def _two_lines_parts(base_m: float, slope_m: float, base_c: float, slope_c: float, k: int) -> tuple[float, float]:
    """sum_{j=0}^{k-1} max(base_m + slope_m*j, base_c + slope_c*j) in closed form, as the two
    lines' shares (the caller adds them in `spans_s`'s order, so both forms agree bit for bit).

    The line that wins at j = 0 (ties: the steeper) wins until the crossing, the other after.
    """
    if k <= 0:
        return 0.0, 0.0
    m_first = base_m > base_c or (base_m == base_c and slope_m >= slope_c)
    first = (base_m, slope_m) if m_first else (base_c, slope_c)
    other = (base_c, slope_c) if m_first else (base_m, slope_m)
    split = k
    if first[1] < other[1]:  # the other line overtakes at j = cross
        cross = (first[0] - other[0]) / (other[1] - first[1])
        split = min(k, int(cross) + 1)
    return _line_sum(*first, 0, split), _line_sum(*other, split, k)


def _reach(floor: float, base: float, slope: float, k: int) -> int:
    """First iteration j (<= k) at which base + slope*j >= floor."""
    if base >= floor:
        return 0
    if slope <= 0:
        return k
    return min(k, math.ceil((floor - base) / slope))


def _floor_iterations(floor: float, base_m: float, slope_m: float, base_c: float, slope_c: float, k: int) -> int:
    """Iterations (from j = 0) during which the floor is above both lines (the lines only grow)."""
    return min(_reach(floor, base_m, slope_m, k), _reach(floor, base_c, slope_c, k))


def _line_sums(base: np.ndarray, slope: np.ndarray, j0: np.ndarray, j1: np.ndarray) -> np.ndarray:
    """`_line_sum` elementwise."""
    n = j1 - j0
    return np.where(n > 0, base * n + slope * (j0 + j1 - 1) * n / 2.0, 0.0)


def _line_sum(base: float, slope: float, j0: int, j1: int) -> float:
    """sum_{j=j0}^{j1-1} (base + slope*j)."""
    n = j1 - j0
    if n <= 0:
        return 0.0
    return base * n + slope * (j0 + j1 - 1) * n / 2.0


def measured_iteration_cost(ops: ModelOps, batch: int) -> IterationCost:
    """The model's timed decode iteration at `batch`: the per-sequence term folds into fixed_s.

    One line in K: the memory branch carries it and the compute branch is zero, so `at` and
    `span_s` give fixed + per_sequence * b + per_kv_token * K exactly.
    """
    return IterationCost(
        batch=batch,
        fixed_s=ops.decode_fixed_s + ops.decode_per_sequence_s * batch,
        mem0_s=0.0,
        mem_per_token_s=ops.decode_per_kv_token_s,
        comp0_s=0.0,
        comp_per_token_s=0.0,
    )


def iteration_cost(
    llm: LlmSpec,
    profile: Profile,
    tp: int,
    batch: int,
    *,
    eager: bool = False,
    tp_link: LinkFit | None = None,
    host_per_sequence_s: float = 0.0,
    sampler_bytes_per_logit: float = 0.0,
    graph_max_tokens: int | None = None,
) -> IterationCost:
    """The linear-in-K coefficients of one decode iteration of a TP-`tp` engine at `batch`.

    `eager`: the engine runs without CUDA graphs, so the host launches every layer's kernels and
    the iteration takes at least `eager_launch_floor_s`. `graph_max_tokens`: the largest step the
    engine captured a CUDA graph for (None: every size); a larger batch runs eager (`runs_eager`).
    `tp_link`: the link the TP group's all-reduces use (default NVLink; an engine spanning nodes,
    e.g. TP16, uses the network).
    `host_per_sequence_s`: the engine's serial host work per running sequence (scheduling and
    output processing an engine without async scheduling does between two GPU steps).
    `sampler_bytes_per_logit`: the sampler's extra memory traffic per logit (`sampler_s`).
    """
    sampler = sampler_s(llm, profile, batch, sampler_bytes_per_logit)
    ops = profile.ops_for(llm) if tp == 1 else None
    if ops is not None:
        cost = measured_iteration_cost(ops, batch)
        return replace(cost, fixed_s=cost.fixed_s + sampler) if sampler else cost
    mem_bw = profile.memory_gbps * 1e9 * tp
    attn_bw = profile.attention_gbps * 1e9 * tp
    gemm = gemm_rate_flops(profile, batch, gemm_layer_params(llm, tp)) * tp
    hidden_bytes = batch * llm.hidden_size * footprint.BF16_BYTES
    link = tp_link or profile.intra_node
    comm = 2 * llm.num_layers * allreduce_s(link.busbw_gbps, link.latency_s, hidden_bytes, tp)
    weights_s = _weight_read_s(llm, profile, batch, mem_bw)
    gemm_s = 2.0 * footprint.matmul_params(llm) * batch / gemm + moe_layer.engine_extra_s(llm, profile, batch, tp)
    kv_read_s = footprint.engine_kv_bytes_per_token(llm, tp) / attn_bw  # every copy is read
    attn_flops_s = footprint.attention_flops_per_cached_token(llm) / (profile.matmul_tflops * 1e12 * tp)
    # a hybrid model's Gated DeltaNet layers: each sequence's state read and written, whatever its length
    state_flops_s = batch * footprint.linear_attention_flops_per_token(llm) / (profile.matmul_tflops * 1e12 * tp)
    state_s = max(batch * footprint.linear_state_rw_bytes_per_sequence(llm) / attn_bw, state_flops_s)
    # kernel by kernel: the GEMMs at their own roofline, then the attention at its own
    return IterationCost(
        batch=batch,
        fixed_s=profile.iteration_overhead_s + comm + host_per_sequence_s * batch + sampler,
        mem0_s=max(weights_s, gemm_s) + state_s,
        mem_per_token_s=max(kv_read_s, attn_flops_s),
        comp0_s=gemm_s + state_flops_s,
        comp_per_token_s=attn_flops_s,
        floor_s=eager_launch_floor_s(llm, profile) if runs_eager(batch, eager, graph_max_tokens) else 0.0,
    )


def _weight_read_s(llm: LlmSpec, profile: Profile, batch: int, mem_bw: float) -> float:
    """Seconds of an iteration's weight reads: the dense weights, then each MoE layer's experts.

    A MoE layer's grouped GEMMs over the experts its tokens touched take at least
    `moe_layer_floor_s` (the fused-MoE kernel is latency-bound when each expert gets a few tokens
    and the engine's shard of an expert is small), whatever the bytes.
    """
    total = footprint.decode_weight_bytes(llm, batch) / mem_bw
    if llm.moe is None:
        return total
    routed = footprint.routed_bytes_per_layer(llm, batch) / mem_bw
    return total + footprint.moe_layers(llm) * max(0.0, profile.moe_layer_floor_s - routed)


def sampler_s(llm: LlmSpec, profile: Profile, batch: int, bytes_per_logit: float) -> float:
    """Seconds of a decode iteration's sampler traffic beyond a greedy argmax over fp32 logits.

    The sampler reads and writes whole rows of logits, one row of `vocab_size` per sequence, so
    its memory-bound kernels move batch x vocab x bytes_per_logit bytes. It runs on one GPU of a
    TP engine: vLLM gathers the logits to rank 0 and samples there (vllm 0.6.0
    `LogitsProcessor._get_logits` `tensor_model_parallel_gather`; `ModelRunner.execute_model`
    returns before the sampler on the other ranks), and every rank waits for the sampled tokens;
    V1 all-gathers the logits and every rank samples the whole batch at once (vllm 0.8.5
    `LogitsProcessor._gather_logits`, `use_all_gather` under V1): one GPU's bandwidth either way.
    A greedy argmax over fp32 logits (vLLM V1, vllm 0.8.5 `vllm/v1/sample/sampler.py`: `to(float32)`
    then `argmax`) is what the fixed iteration cost was calibrated with; the bytes are the excess.
    That calibration ran one sequence (10 bytes x 151,936 logits, ~0.6 us), so at a large batch
    greedy's own 10 bytes a logit go uncharged too (0.15 ms at 256 x 151,936 on an H100).
    """
    if bytes_per_logit <= 0:
        return 0.0
    return batch * llm.vocab_size * bytes_per_logit / (profile.memory_gbps * 1e9)


def eager_launch_floor_s(llm: LlmSpec, profile: Profile) -> float:
    """Host seconds to launch one eager decode iteration: every layer's kernels, one by one."""
    return llm.num_layers * profile.eager_layer_launch_s


VLLM_GRAPH_MAX_TOKENS = 512  # vLLM's default max_cudagraph_capture_size (0.8.5 to 0.27)
VLLM_BLACKWELL_GRAPH_MAX_TOKENS = 1024  # on compute capability 10.x since vLLM PR 49390 (0.28.0)


def vllm_graph_max_tokens(compute_capability_major: int | None) -> int:
    """vLLM's default largest CUDA-graph capture size on a GPU of this compute capability family.

    1,024 on data-center Blackwell (compute capability 10.x: B200, GB200, B300, GB300), 512 on
    every other GPU: `default_max_graph_size = 1024 if
    current_platform.is_device_capability_family(100) else 512` in `VllmConfig._set_cudagraph_sizes`
    (vllm-project/vllm PR 49390, "[Perf] Raise Blackwell CUDA graph capture default to 1024", merged
    as 021b7d98 and first released in 0.28.0; read at vllm@000fc94b vllm/config/vllm.py).
    `is_device_capability_family(100)` is `capability.to_int() // 10 == 10` (vllm/platforms/interface.py),
    so RTX Blackwell (12.x) and Hopper (9.0) keep 512. None (an AMD GPU, a CPU, a GPU without a
    cited capability): 512. vLLM still caps it at 2 x max_num_seqs and max_num_batched_tokens,
    which the RL engines' budgets (max_num_seqs 1,024, 8,192 batched tokens) leave above 1,024.
    """
    if compute_capability_major == 10:
        return VLLM_BLACKWELL_GRAPH_MAX_TOKENS
    return VLLM_GRAPH_MAX_TOKENS


def runs_eager(tokens: int, enforce_eager: bool, graph_max_tokens: int | None) -> bool:
    """Whether an engine step of `tokens` scheduled tokens runs without a CUDA graph.

    vLLM captures graphs for steps up to its largest capture size and pads a smaller step up to
    the next captured size; a larger step runs the model without a graph (V1: vllm 0.8.5
    v1/worker/gpu_model_runner.py `execute_model`, "Eager mode" past `cudagraph_batch_sizes[-1]`;
    vllm 0.30.0 v1/cudagraph_dispatcher.py `dispatch`, `num_tokens > max_size` -> NONE). Under
    torch.compile that step launches the compiled model's kernels one by one, no faster than an
    eager engine: Qwen3-30B-A3B TP4 decodes at 35.2 ms TPOT compiled without graphs, 33.9 ms
    eager, 10.0 ms with graphs (vllm-project/vllm issue 45709, 2026-06-15; 34.4 against 11.8 ms
    piecewise on 4x L20, 2026-08-28). A decode iteration schedules one token per sequence.
    """
    return enforce_eager or (graph_max_tokens is not None and tokens > graph_max_tokens)
