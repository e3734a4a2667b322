"""The run's cost oracle: performance models bound to one resolved scenario, with caches.

Processes ask it "how long" and yield the answer; it holds no SimPy state. Iteration costs
depend only on the batch size, so they are cached per batch. A fitted scenario's `efficiency`
block (rlsim.calibrated) scales the models' answers here, in one place, so every process sees it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlsim.calibration.profile import LinkFit
from rlsim.models import (
    footprint,
    graph_build,
    memory,
    old_policy,
    periodic,
    prefill,
    switch,
    train_step,
    weight_sync,
)
from rlsim.models.decode import IterationCost, iteration_cost
from rlsim.models.rank_balance import RankAssignment
from rlsim.placement import Resolved
from rlsim.pools import INFERENCE, TRAINING
from rlsim.scenario import AttentionShape, CheckpointContents, DataParallel, Mode, Transport
from rlsim.workload import GroupSampler, sample_length_pmf

EVAL_STREAM = 0x5EA1  # the validation batch's own random stream beside the run's seed


class Costs:
    """Durations of every kind of GPU work in this run, seconds."""

    def __init__(self, res: Resolved) -> None:
        self.res = res
        sc = res.scenario
        self.llm = res.llm
        self.profile = res.profile_of(INFERENCE)  # the engines' GPU (the cluster's unless typed per pool)
        self.train_profile = res.profile_of(TRAINING)
        self.tp = sc.pipeline.inference.tp
        self.tp_link = self.link_for(self.tp)  # an engine spanning nodes all-reduces over the network
        self.speed = sc.efficiency.generation_speed  # measured engine speed / the profile's (rlsim fit)
        self._iter: dict[int, IterationCost] = {}
        self._rows = np.zeros((sc.pipeline.inference.max_batch + 1, 6))  # iteration(b) as a row
        self._have_row = np.zeros(sc.pipeline.inference.max_batch + 1, dtype=bool)
        tr = sc.pipeline.training
        self.train_shape = train_step.TrainShape(
            gpus=sc.training_gpus,
            tp=tr.tp,
            pp=tr.pp,
            micro_batch_tokens=tr.micro_batch_tokens,
            activation_recompute=tr.activation_recompute,
            minibatches=sc.algorithm.minibatches,
            trainable_params=res.trainable_params,
            mfu_override=tr.mfu,
            fsdp_size=tr.fsdp_size,
            cp=tr.cp,
            ep=tr.ep,
            etp=tr.etp,
            first_stage_layers=tr.first_stage_layers,
            last_stage_layers=tr.last_stage_layers,
            megatron_ddp=tr.data_parallel is DataParallel.megatron,
            rank_assignment=RankAssignment.balanced if tr.balance_batch else RankAssignment.contiguous,
        )
        group = self.shard_group_gpus()
        # ranks of a CP or EP group sit next to each other, a TP (CP) or expert-TP (EP) group apart
        # (Megatron-Core's tp-cp-ep-dp-pp order): the widest group sets the all-to-all link
        a2a = max(tr.cp * tr.tp, tr.ep * tr.expert_tp) if (tr.cp > 1 or tr.ep > 1) else 0
        self.train_shape = replace(
            self.train_shape,
            shard_link=self.link_for(group, self.train_profile),
            replica_link=self.link_for(sc.training_gpus, self.train_profile),
            a2a_link=self.link_for(a2a, self.train_profile) if a2a else None,
            tp_link=self.link_for(tr.tp, self.train_profile) if tr.tp > 1 else None,
        )
        self.sync_s = self._sync_s()
        self.switch_s = self._switch_s() if sc.pipeline.mode is Mode.colocated else 0.0
        self.graph_build_s = self._graph_build_s()  # (log-prob, update) seconds per step, the run's mean

    def iteration(self, batch: int) -> IterationCost:
        cost = self._iter.get(batch)
        if cost is None:
            cost = iteration_cost(
                self.llm,
                self.profile,
                self.tp,
                batch,
                eager=self.res.scenario.pipeline.inference.enforce_eager,
                tp_link=self.tp_link,
                host_per_sequence_s=self.res.scenario.pipeline.inference.host_per_sequence_s,
                sampler_bytes_per_logit=self.res.scenario.pipeline.inference.sampler_bytes_per_logit,
                graph_max_tokens=self.res.graph_max_tokens,
            )
            # the engine profile's speed (vLLM keeps the model's) and a fitted speed (rlsim fit)
            speed = self.res.decode_speed_vs_vllm * self.speed
            if speed != 1.0:
                cost = cost.slowed(1.0 / speed)
            self._iter[batch] = cost
        return cost

    def coefficients(self, batches: np.ndarray) -> np.ndarray:
        """`iteration(b)`'s six coefficients for each batch size, one row each (for `spans_s`)."""
        rows, have = self._rows, self._have_row
        if not have[batches].all():
            for b in np.unique(batches[~have[batches]]).tolist():
                c = self.iteration(b)
                rows[b] = (c.fixed_s, c.mem0_s, c.mem_per_token_s, c.comp0_s, c.comp_per_token_s, c.floor_s)
                have[b] = True
        return rows[batches]

    def prefill_s(self, lengths: list[int]) -> float:
        return prefill.prefill_s(self.llm, self.profile, self.tp, lengths, self.tp_link) / self.speed

    def prefills_s(self, tokens: np.ndarray, sum_sq: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """`prefill_s` of many prefills at once, bit for bit (`models.prefill.prefills_s`: a refill's)."""
        return prefill.prefills_s(self.llm, self.profile, self.tp, tokens, sum_sq, counts, self.tp_link) / self.speed

    def score_s(self, lengths: list[int]) -> float:
        """Seconds for one scoring engine to score completions of these full lengths (prompt + response).

        Forwards of at most max_batch_sequences completions run back to back: each a prefill of
        its completions, then, for a generative judge, verdict_tokens decode iterations at that
        batch over the prefilled context. A distillation teacher needs the log-prob of every
        token, so its forward computes logits on every position; the other kinds score from each
        completion's last position (charged there as the LM head; a scalar head costs less).
        """
        scoring = self.res.scoring
        rm, profile = scoring.spec, self.res.profile_of(scoring.pool)
        link = self.link_for(rm.tp, profile)
        every = rm.kind == "teacher"  # log-probs of every token: the LM head on every position
        seconds = 0.0
        for i in range(0, len(lengths), rm.max_batch_sequences):
            chunk = lengths[i : i + rm.max_batch_sequences]
            seconds += prefill.prefill_s(scoring.llm, profile, rm.tp, chunk, link, logits_everywhere=every)
            if rm.verdict_tokens:
                it = iteration_cost(scoring.llm, profile, rm.tp, len(chunk), tp_link=link)
                seconds += it.span_s(float(sum(chunk)), rm.verdict_tokens)
        return seconds

    def eval_pass_s(self) -> float:
        """Seconds of one pass over the scenario's validation set (`scenario.evaluation`; 0 without one).

        The batch is drawn with its own seeded stream (the run's draws stay put): the workload's
        prompts, `samples_per_prompt` responses each from the evaluation's length distribution.
        Colocated engines sleep between steps: the pass wakes them (switch and weight load) and
        puts them back (`models.periodic`).
        """
        sc = self.res.scenario
        ev = sc.evaluation
        if ev is None:
            return 0.0
        workload = sc.workload.model_copy(
            update={"response_tokens": ev.response_tokens or sc.workload.response_tokens, "agent": None}
        )
        algorithm = sc.algorithm.model_copy(update={"group_size": ev.samples_per_prompt})
        val = sc.model_copy(update={"workload": workload, "algorithm": algorithm})
        draws = GroupSampler(val, np.random.default_rng((sc.seed, EVAL_STREAM))).draw_many(ev.prompts)
        wake = 2.0 * self.switch_s + self.sync_s if sc.pipeline.mode is Mode.colocated else 0.0
        return periodic.eval_pass_s(
            [(d.prompt_tokens, d.response_tokens) for d in draws],
            sc.engines,
            sc.pipeline.inference.max_batch,
            self.coefficients,
            self.prefill_s,
            wake,
        )

    def checkpoint_s(self) -> float:
        """Seconds of one checkpoint (`scenario.checkpointing`; 0 without one), from every training node."""
        sc = self.res.scenario
        ck = sc.checkpointing
        if ck is None:
            return 0.0
        nbytes = periodic.checkpoint_bytes(
            self.llm.total_params,
            self.res.trainable_params,
            sc.pipeline.training.stored_param_bytes,
            ck.contents is CheckpointContents.weights_and_optimizer,
        )
        nodes = -(-sc.training_gpus // sc.cluster.gpus_per_node)
        return periodic.checkpoint_s(nbytes, nodes, ck.write_gbps_per_node)

    def train_phases(self, lengths: list[int]) -> train_step.TrainPhases:
        """The phases of one RL step over samples of `lengths` (prompt + response tokens each)."""
        phases = self._phases(self.train_shape, lengths)
        tr, alg = self.res.scenario.pipeline.training, self.res.scenario.algorithm
        if tr.old_policy_snapshots and alg.recompute_old_logprobs:  # inside verl's old_log_prob timer
            swaps = old_policy.snapshot_swaps_s(
                self.train_profile, self.snapshot_shard_bytes(), alg.minibatches, tr.snapshot_save_gbps
            )
            phases = replace(phases, logprob_s=phases.logprob_s + swaps)
        return self._with_graph_builds(phases, 1)

    def minibatch_phases(self, lengths: list[int], first: bool) -> train_step.TrainPhases:
        """The phases of one minibatch trained on its own (training.stream_minibatches): its old-log-prob
        pass and one optimizer step; with old-policy snapshots, one save and, after the first, two restores."""
        phases = self._phases(replace(self.train_shape, minibatches=1), lengths)
        tr, alg = self.res.scenario.pipeline.training, self.res.scenario.algorithm
        if tr.old_policy_snapshots and alg.recompute_old_logprobs:
            swaps = old_policy.minibatch_swaps_s(
                self.train_profile, self.snapshot_shard_bytes(), first, tr.snapshot_save_gbps
            )
            phases = replace(phases, logprob_s=phases.logprob_s + swaps)
        return self._with_graph_builds(phases, alg.minibatches)

    def _with_graph_builds(self, phases: train_step.TrainPhases, parts: int) -> train_step.TrainPhases:
        """`phases` with their share (a step's over `parts`) of the host time building attention graphs."""
        logprob_s, train_s = self.graph_build_s
        if logprob_s == 0 and train_s == 0:
            return phases
        return replace(phases, logprob_s=phases.logprob_s + logprob_s / parts, train_s=phases.train_s + train_s / parts)

    def _graph_build_s(self) -> tuple[float, float]:
        """Mean host seconds per step a training rank builds cuDNN attention graphs: (log-prob pass, update).

        Each rank meets its share of the step's samples: per forward call one padded shape (the call's
        longest), or one per sample (`training.attention_shape_from`); models/graph_build.py counts the
        new ones over the run.
        """
        sc = self.res.scenario
        tr, alg = sc.pipeline.training, sc.algorithm
        if tr.attention_graph_build_s <= 0:
            return 0.0, 0.0
        assert sc.run_steps is not None  # the scenario requires it with the field
        per_rank = alg.samples_per_step / self.train_shape.dp
        if tr.attention_shape_from is AttentionShape.sample:
            update_calls, update_samples = per_rank, 1
            logprob_calls, logprob_samples = per_rank, 1
        else:
            update_calls, update_samples = alg.minibatches, max(1, round(per_rank / alg.minibatches))
            if tr.stream_minibatches:  # each minibatch has its own log-prob call
                logprob_calls, logprob_samples = update_calls, update_samples
            else:
                logprob_calls, logprob_samples = 1, max(1, round(per_rank))
        logprob_pass = alg.recompute_old_logprobs or alg.reference_model  # a reference forward shares its graphs
        pmf = sample_length_pmf(sc)
        align = graph_build.bshd_alignment(tr.tp, tr.cp)
        passes = (
            graph_build.ShapePass(
                logprob_calls if logprob_pass else 0, logprob_samples, graph_build.forward_graphs(tr.cp)
            ),
            graph_build.ShapePass(
                update_calls, update_samples, graph_build.training_graphs(tr.cp, tr.activation_recompute)
            ),
        )
        logprob_s, train_s = (
            graph_build.build_s_per_step(pmf, align, p, sc.run_steps, tr.attention_graph_build_s) for p in passes
        )
        return logprob_s, train_s

    def _phases(self, shape: train_step.TrainShape, lengths: list[int]) -> train_step.TrainPhases:
        alg = self.res.scenario.algorithm
        phases = train_step.train_phases(
            self.llm,
            self.train_profile,
            shape,
            lengths,
            reference_model=alg.reference_model,
            recompute_old_logprobs=alg.recompute_old_logprobs,
            critic=alg.has_critic,
        )
        logprob_speed = self.res.scenario.efficiency.logprob_speed
        if logprob_speed != 1.0:
            phases = replace(phases, logprob_s=phases.logprob_s / logprob_speed)
        tr = self.res.scenario.pipeline.training
        if tr.param_offload:  # the shard comes back for each phase that needs it and goes again after
            shard = self.llm.total_params * tr.stored_param_bytes / self.shard_group_gpus()
            trip = switch.param_round_trip_s(self.train_profile, shard, tr.offload_reload_gbps)
            passes = int(alg.recompute_old_logprobs) + int(alg.reference_model)  # the reference is offloaded too
            phases = replace(phases, logprob_s=phases.logprob_s + passes * trip, train_s=phases.train_s + trip)
        return phases

    def snapshot_shard_bytes(self) -> float:
        """Bytes of weights one training GPU saves or restores for an old-policy snapshot.

        Megatron: the bf16 parameter buffers of the rank's TP x PP shard and its experts; FSDP:
        its shard of the stored (fp32) parameters.
        """
        tr = self.res.scenario.pipeline.training
        if tr.data_parallel is DataParallel.megatron:
            kept = memory.megatron_kept_fraction(self.llm, tr.tp, tr.pp, tr.ep, tr.etp)
            return self.llm.total_params * kept * tr.stored_param_bytes
        return self.llm.total_params * tr.stored_param_bytes / self.shard_group_gpus()

    def _sync_s(self) -> float:
        sc = self.res.scenario
        if sc.efficiency.weight_sync_s is not None:  # measured (rlsim fit): replaces the transport model
            return sc.efficiency.weight_sync_s
        pipe = sc.pipeline
        transport = pipe.transport
        payload = footprint.weight_bytes(self.llm)
        if transport is Transport.lora_adapter:
            payload = self.res.trainable_params * footprint.BF16_BYTES
        ws = pipe.weight_sync
        if sc.cluster.nodes == 1 or pipe.mode is Mode.colocated:
            link: LinkFit = self.profile.intra_node
        else:
            on_node, relays = weight_sync.sender_node(
                sc.training_gpus, sc.inference_gpus, sc.cluster.gpus_per_node, ws.broadcast_group == "all_trainer_ranks"
            )
            link = weight_sync.broadcast_link(self.profile.intra_node, self.profile.inter_node, on_node, relays)
        if sc.cluster.inter_pool_gbps is not None and pipe.mode is not Mode.colocated:  # pools in two clusters
            link = LinkFit(busbw_gbps=sc.cluster.inter_pool_gbps, latency_s=self.profile.inter_node.latency_s)
        shard_gpus = self.shard_group_gpus()
        path = weight_sync.SyncPath(
            link=link,
            engines=sc.engines,
            engine_tp=self.tp,
            filesystem_gbps=pipe.weight_sync.filesystem_gbps,
            bucket_bytes=pipe.weight_sync.bucket_mb * 1e6,
            shard_gpus=shard_gpus,
            shard_link=self.link_for(shard_gpus, self.train_profile),
            offloaded=pipe.training.param_offload,
            per_call_s=weight_sync.PER_CALL_S[pipe.weight_sync.update_api],
            tensor_host_s=ws.tensor_host_s,
            export_gbps=ws.export_gbps,
            stored_param_bytes=pipe.training.stored_param_bytes,
            reload_gbps=pipe.training.offload_reload_gbps,
            controller_calls=sc.training_gpus + sc.engines if ws.via_controller else 0,
        )
        trainer = self.train_profile if self.train_profile is not self.profile else None
        return weight_sync.sync_s(self.llm, self.profile, transport, path, payload, trainer)

    def shard_group_gpus(self) -> int:
        """GPUs one full copy of the trainer's weights is sharded over: FSDP group x TP x PP (Megatron: TP x PP)."""
        tr = self.res.scenario.pipeline.training
        if tr.data_parallel is DataParallel.megatron:  # every data-parallel rank holds a whole TP x PP shard
            return tr.tp * tr.pp
        return (tr.fsdp_size or self.train_shape.dp) * tr.tp * tr.pp * tr.cp

    def link_for(self, gpus: int, profile=None) -> LinkFit:
        """The link a group of `gpus` consecutive GPUs talks over: NVLink within a node, else the network.

        `profile`: the pool's GPU (default the engines').
        """
        per_node = self.res.scenario.cluster.gpus_per_node
        profile = profile or self.profile
        return profile.intra_node if gpus <= per_node else profile.inter_node

    def _switch_s(self) -> float:
        sc = self.res.scenario
        col = sc.pipeline.colocation
        return switch.switch_s(
            self.profile,
            sc.training_gpus,  # the colocated GPUs: the cluster, less a reward model's own pool
            self.res.trainable_params,
            footprint.weight_bytes(self.llm) / self.tp,
            col.offload_optimizer,
            col.offload_engine_weights,
            col.reallocate_s,
            col.optimizer_offload_gbps,
        )
