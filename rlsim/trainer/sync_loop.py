"""Synchronous GRPO: one process generates, scores and trains in turn, then repeats.

The simulator's "sync" pipeline with both pools on the same cores: while the policy generates, the
training pool is recorded as idle-waiting-for-data; while it trains, the inference pool is recorded
as idle-waiting-for-weights. Weight sync is free (the generator is the trained model), so there is
no "sync" interval. Samples are never stale: version_trained == version_started.

Keeps: GRPO group-relative advantages (mean and std over G completions), the PPO-clipped
token-level loss with the sampler's log-probs as old log-probs (or recomputed by the trainer,
"logprob"), minibatches (several optimizer steps per RL step), an optional k3 KL penalty to the
frozen warm-started policy (its forward pass is also "logprob").
Drops: a value model, an entropy bonus, multiple epochs over a batch, learning-rate schedules,
sampling temperature and top-k, sequence packing, any parallelism (one process, no DP/TP).
Deterministic for a fixed seed and thread count.

Run: python -m rlsim.trainer.sync_loop [steps]
"""

import copy
import sys
import traceback
from dataclasses import asdict, dataclass

import numpy as np
import torch

from rlsim.host_allocator import steady_allocator
from rlsim.trainer.config import GRPOConfig
from rlsim.trainer.learner import build_policy, train_step, warm_start
from rlsim.trainer.model import to_hf_config
from rlsim.trainer.rollout import collect
from rlsim.trainer.task import Addition
from rlsim.trainer.timeline import PrintLogger, Timeline, build_document, write_json
from rlsim.trainer.verl_log import write_verl_log


@dataclass(frozen=True)
class SyncConfig(GRPOConfig):
    threads: int = 1
    """torch intra-op threads of the one process; more do not help ops this small (and 2 on a
    busy 2-core machine ran 10x slower)"""


def run_sync(cfg: SyncConfig, logger=None) -> dict:
    """Run synchronous GRPO; write the timeline JSON to cfg.out_path and return it."""
    # ---- setup: threads, task, policy (warm-started), optimizer, seeded generators
    torch.set_num_threads(cfg.threads)
    steady_allocator()  # per-operator costs that do not depend on what ran before (host_allocator.py)
    task = Addition(n_digits=cfg.n_digits)
    model = build_policy(cfg, task)
    warm_loss = warm_start(model, task, cfg)
    ref = copy.deepcopy(model).requires_grad_(False) if cfg.kl_coef > 0 else None
    theta0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    rng = np.random.default_rng(cfg.seed)  # prompts
    gen = torch.Generator().manual_seed(cfg.seed)  # sampling
    tl = Timeline(logger=logger)
    status, error, tracebacks = "completed", None, {}
    try:
        for step in range(cfg.steps):
            version = step  # updates applied so far; we always generate with the newest weights

            # ---- generate and score (inference pool busy; training pool waits for data)
            t0 = tl.now()
            roll = collect(model, task, cfg, rng, gen, tl, step, version)
            # roll.tokens [N, P + R], roll.mask [N, R], roll.advantages [N]; N = B * G
            tl.add("training", "idle-waiting-for-data", t0, tl.now(), step, version)

            # ---- train: old log-probs, forward/backward, optimizer (inference pool waits)
            t1 = tl.now()
            metrics = train_step(model, opt, roll, cfg, tl, step, version, ref)
            tl.add("inference", "idle-waiting-for-weights", t1, tl.now(), step, version)

            # ---- record samples and step metrics (the controller's host work: in no state)
            host_t0 = tl.now()
            lengths = roll.response_tokens.tolist()
            for reward, n in zip(roll.rewards.tolist(), lengths, strict=True):
                tl.sample(
                    prompt_tokens=roll.prompt_len,
                    response_tokens=n,
                    version_started=version,
                    version_trained=version,
                    reward=reward,
                    dropped=False,
                    step=step,
                )
            metrics["rollout/reward_mean"] = roll.rewards.mean().item()
            metrics["rollout/exact_fraction"] = (roll.rewards == 1.0).float().mean().item()
            metrics["rollout/response_tokens_mean"] = sum(lengths) / len(lengths)
            metrics["timing/score_s"] = roll.score_s
            metrics["timing/host_s"] = tl.now() - host_t0
            metrics["timing/step_end_s"] = tl.now()
            tl.log_step(step, metrics)
    except KeyboardInterrupt:
        status, error = "interrupted", "stopped by KeyboardInterrupt"
        raise
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        tracebacks = {"sync": traceback.format_exc()}
        raise
    finally:  # also on Ctrl-C: the file on disk is always a whole document
        theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        doc = build_document(
            "sync",
            asdict(cfg),
            to_hf_config(model.config),
            [tl.to_dict()],
            status=status,
            error=error,
            tracebacks=tracebacks,
            env={"torch": torch.__version__, "threads": {"sync": cfg.threads}},
            summary={
                "train/param_change_l2": (theta - theta0).norm().item(),
                "train/warmup_loss": warm_loss,
            },
        )
        write_json(cfg.out_path, doc)
        if cfg.metrics_path:
            write_verl_log(cfg.metrics_path, doc)
    return doc


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else GRPOConfig.steps
    result = run_sync(SyncConfig(steps=steps), logger=PrintLogger())
    for key, value in result["summary"].items():
        print(f"{key:45s} {value:.4g}")
