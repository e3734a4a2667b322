"""The scenario and its assumptions in plain words, for readers who will not open the YAML.

An architecture review is read by people deciding on money and GPUs; they need the batch, the
lengths, the cluster and the calibration (where every efficiency number came from) in
sentences, not field paths.
"""

from __future__ import annotations

from rlsim.catalog import get_gpu
from rlsim.placement import Resolved
from rlsim.report.document import Block, Bullets, Paragraph, Table
from rlsim.scenario import Mode, Refill, Scenario, all_or_none_share


def lengths(dist) -> str:
    """A length distribution in words."""
    if dist.kind == "lognormal":
        return f"lognormal, mean {dist.mean:,.0f} tokens (sigma {dist.sigma:g}, truncated to {dist.min:,}-{dist.max:,})"
    if dist.kind == "constant":
        return f"always {dist.value:,} tokens"
    if dist.kind == "histogram":
        lo, hi = min(b[0] for b in dist.bins), max(b[1] for b in dist.bins)
        return f"a histogram of {len(dist.bins)} bins between {lo:,} and {hi:,} tokens"
    return f"resampled from the observed lengths in {dist.path}"


def gpu_name(key: str) -> str:
    return "CPU" if key == "cpu" else get_gpu(key).name


def _placement(sc: Scenario) -> str:
    inf, tr, rm = sc.pipeline.inference, sc.pipeline.training, sc.pipeline.reward_model
    split = sc.with_mode(Mode.sync)
    on_inf = f" {gpu_name(inf.gpu)}" if inf.gpu not in (None, sc.cluster.gpu) else ""
    on_tr = f" {gpu_name(tr.gpu)}" if tr.gpu not in (None, sc.cluster.gpu) else ""
    text = (
        f"The disaggregated modes give {split.inference_gpus}{on_inf} GPUs to inference "
        f"({split.engines} engines at tensor parallel {inf.tp}, at most {inf.max_batch} "
        f"sequences each) and {split.training_gpus}{on_tr} to training (TP {tr.tp}, PP {tr.pp}, "
        f"{tr.micro_batch_tokens:,} tokens per micro-batch); the colocated mode runs both on all "
        f"{sc.cluster.total_gpus - sc.reward_pool_gpus} GPUs and switches between them every step."
    )
    if inf.gpu not in (None, sc.cluster.gpu) or tr.gpu not in (None, sc.cluster.gpu):
        text = text.split("; the colocated mode")[0] + "; the colocated mode needs one GPU type and is left out."
    if rm is not None:
        where = {
            "own_pool": f"its own {rm.gpus} {gpu_name(rm.gpu or sc.cluster.gpu)} GPUs",
            "with_training": "the training GPUs, between the trainer's steps",
            "with_inference": "the inference engines' GPUs, when they have nothing to generate",
        }[rm.placement]
        tp = inf.tp if rm.placement == "with_inference" else rm.tp
        text += (
            f" A {rm.kind.replace('_', ' ')} ({rm.model if isinstance(rm.model, str) else 'config.json'}, "
            f"TP {tp}, up to {rm.max_batch_sequences} completions per forward) scores on {where}."
        )
    return text


def _headline(sc: Scenario, res: Resolved) -> str:
    alg, llm, cl = sc.algorithm, res.llm, sc.cluster
    params = f"{llm.total_params / 1e9:,.1f} B parameters"
    if llm.moe:
        params += f", {llm.active_params / 1e9:,.1f} B active"
    passes = (
        ("a reference-model pass", alg.reference_model),
        ("a critic", alg.has_critic),
        ("recomputed old log-probs", alg.recompute_old_logprobs),
    )
    extra = [name for name, on in passes if on]
    return (
        f"{alg.kind.upper()} training of {llm.name} ({params}) on {cl.nodes} node(s) of "
        f"{cl.gpus_per_node}x {gpu_name(cl.gpu)} ({cl.total_gpus} GPUs). Each RL step samples "
        f"{alg.prompts_per_step} prompts x {alg.group_size} completions = "
        f"{alg.samples_per_step:,} samples and takes {alg.minibatches} optimizer step(s)"
        + (f", with {', '.join(extra)}." if extra else ".")
    )


def _workload(sc: Scenario) -> list[str]:
    wl, ws, stale = sc.workload, sc.pipeline.weight_sync, sc.pipeline.staleness
    reward = (
        "no reward model"
        if wl.reward.kind == "none"
        else f"a CPU verifier taking {wl.reward.seconds_per_sample:g} s per completion on {wl.reward.workers} workers"
    )
    if sc.pipeline.reward_model is not None:
        rm = sc.pipeline.reward_model
        verdict = f", then decodes a {rm.verdict_tokens}-token verdict" if rm.verdict_tokens else ""
        reward = f"a GPU {rm.kind.replace('_', ' ')} that prefills each prompt and response{verdict}"
    return [
        f"Prompts: {lengths(wl.prompt_tokens)}.",
        f"Responses: {lengths(wl.response_tokens)}; correlation of lengths within a group {wl.group_correlation:g}.",
        f"Reward: {reward}.",
        *_filtering(sc),
        f"Weights are pushed to the engines every {ws.every_steps} step(s); staleness policy "
        f"'{stale.policy.value}' with max_lag {stale.max_lag}.",
        f"Simulated: {sc.steps} RL steps, seed {sc.seed}.",
    ]


def _filtering(sc: Scenario) -> list[str]:
    """DAPO dynamic sampling in a sentence, when the scenario filters groups."""
    fg, alg = sc.algorithm.filter_groups, sc.algorithm
    if fg is None:
        return []
    share = all_or_none_share(fg, alg.group_size)
    source = (
        f"{share:.0%} of groups"
        if fg.pass_rate is None
        else (f"pass rates ~ Beta({fg.pass_rate.alpha:g}, {fg.pass_rate.beta:g}): {share:.0%} of groups")
    )
    cap = f"at most {fg.max_num_gen_batches} rounds" if fg.max_num_gen_batches else "no cap on rounds"
    how = {
        Refill.rounds: "rounds of {gen} prompts (verl's DAPO trainer)",
        Refill.continuous: "a fresh prompt per filtered group, at once (first {gen} prompts)",
    }[fg.refill_for(sc.pipeline.mode)].format(gen=fg.prompts_per_gen_batch or alg.prompts_per_step)
    return [
        f"Dynamic sampling (DAPO): {source} get all-equal rewards and are filtered; {how} until "
        f"{alg.prompts_per_step} useful groups, {cap}."
    ]


def scenario_blocks(sc: Scenario, res: Resolved) -> list[Block]:
    """What is trained, on what, with which batch: the run in a few sentences."""
    return [Paragraph(_headline(sc, res)), Bullets(_workload(sc)), Paragraph(_placement(sc))]


def _profile_table(res: Resolved) -> Table:
    p = res.profile
    rows = [
        [
            "training MFU",
            f"{(res.scenario.pipeline.training.mfu or p.train_mfu):.0%}",
            "scenario override" if res.scenario.pipeline.training.mfu else "profile",
        ],
        [
            "GEMM rate",
            f"{p.matmul_tflops:,.0f} TFLOP/s",
            f"{p.matmul_tflops / p.peak_tflops:.0%} of {p.peak_tflops:,.0f} peak",
        ],
        [
            "decode weight reads",
            f"{p.memory_gbps:,.0f} GB/s",
            f"{p.memory_gbps / p.peak_memory_gbps:.0%} of HBM peak",
        ],
        [
            "decode KV reads",
            f"{p.attention_gbps:,.0f} GB/s",
            f"{p.attention_gbps / p.peak_memory_gbps:.0%} of HBM peak",
        ],
        [
            "decode iteration overhead",
            f"{p.iteration_overhead_s * 1e3:g} ms",
            "launches, sampling, scheduling",
        ],
        ["intra-node collectives", f"{p.intra_node.busbw_gbps:,.0f} GB/s", "bus bandwidth"],
        ["inter-node collectives", f"{p.inter_node.busbw_gbps:,.0f} GB/s", "bus bandwidth per GPU"],
        ["host link", f"{p.host_link_gbps:,.0f} GB/s", "offload and reload"],
    ]
    return Table(
        ["quantity", "value", "basis"],
        rows,
        caption="Fitted efficiencies the performance models use.",
        align="lrl",
    )


def assumption_blocks(res: Resolved) -> list[Block]:
    """The calibration profile with its provenance, and what the simulation assumes."""
    p = res.profile
    kind = (
        "derived from the datasheet and published efficiency figures"
        if p.source == "datasheet"
        else "fitted from kernels measured on the device"
    )
    software = ", ".join(f"{k} {v}" for k, v in sorted(p.software.items())) or "not applicable"
    return [
        Paragraph(
            f"Calibration profile: {p.device_name}, {kind} (source '{p.source}', dated {p.date}; "
            f"software: {software}). {p.notes}"
        ),
        _profile_table(res),
        Paragraph("Citations of the profile:"),
        Bullets(list(p.citations) or ["none recorded"]),
        *_calibrated_blocks(res.scenario),
        Paragraph(
            "Modelling assumptions: every rented GPU is paid for the whole wall time; idle "
            "time is what a GPU spends waiting for data (training) or for new weights "
            "(inference); staleness of a sample is the trainer's step minus the policy version "
            "that generated it; costs of the simulated steps include the start-up of each "
            "pipeline, so short simulations favour the modes that fill up fastest."
        ),
    ]


def _calibrated_blocks(sc: Scenario) -> list[Block]:
    """Which numbers `rlsim fit` set from which log, and how closely the fit reproduces it."""
    cal = sc.calibrated_from
    if cal is None:
        return []
    fitted = Table(
        ["field", "fitted value", "from"],
        [[v.field, f"{v.value:g}", v.phase] for v in cal.fitted],
        caption=f"Fitted by rlsim fit from {cal.source} ({cal.format}, sha256 {cal.sha256[:12]}..., "
        f"steps {cal.steps[0]}-{cal.steps[1]}).",
        align="lrl",
    )
    residuals = Table(
        ["phase", "measured s/step", "fitted s/step", "residual"],
        [[r.phase, f"{r.measured_s:.3f}", f"{r.simulated_s:.3f}", _percent(r.residual)] for r in cal.residuals],
        caption="The fitted scenario's simulation against the log, per phase.",
    )
    kept = [Paragraph("Not identified by the log, kept from the base scenario: " + ", ".join(cal.kept) + ".")]
    return [fitted, residuals, *(kept if cal.kept else [])]


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"
