"""Asynchronous GRPO: a generator process and a trainer process that overlap, like two GPU pools.

The parent warm-starts the policy, puts its weights in shared memory (version 0) and spawns two
processes, each pinned to its own cores with its own torch thread count:

- the generator first reserves a slot in the rollout buffer (at most `queue_depth` batches may
  be generated and not yet taken; while none is free it is recorded as idle-waiting-for-weights:
  it can only go on once the trainer moves ahead), then loads the newest published weights
  ("sync"; only between batches: the blocking interrupt model), generates and scores a whole
  batch of groups ("prefill", "decode"), tags it with its weight version and enqueues it. Depth 1
  is verl's one-step-off pipeline: when the trainer is the bottleneck every batch lags by 1;
- the trainer takes batches (idle-waiting-for-data while the queue is empty), drops a batch whose
  version lags its own by more than `max_lag` (counted as dropped samples and tokens), trains on
  the rest ("logprob", "train", "optimizer") and every `sync_every` steps copies its weights into
  shared memory and bumps the version ("sync").

The parent supervises: if a process dies or raises, it stops the other within seconds, writes the
JSON (status "failed") and raises `TrainerProcessError` naming the dead process. Ctrl-C stops
both (children ignore SIGINT; the parent tells them to stop), writes the JSON (status
"interrupted") and re-raises KeyboardInterrupt. Timestamps share the parent's clock.

Keeps: everything of sync_loop's GRPO (group advantages, clipped token-level loss, minibatches,
optional k3 KL), plus version tags, a bounded buffer, max_lag rejection and periodic weight sync.
With the sampler's log-probs as old log-probs (the default), the clipped ratio is also the
importance correction of stale samples. Drops: partial rollouts, in-flight weight updates
(weights change only between batches), several generators. Not bit-reproducible: which weight
version a batch gets depends on timing.

Run: python -m rlsim.trainer.async_loop [steps]
"""

import copy
import os
import pickle
import queue
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.multiprocessing as mp

from rlsim.host_allocator import steady_allocator
from rlsim.trainer.config import GRPOConfig
from rlsim.trainer.learner import build_policy, train_step, warm_start
from rlsim.trainer.model import to_hf_config
from rlsim.trainer.rollout import collect
from rlsim.trainer.task import Addition
from rlsim.trainer.timeline import NullLogger, PrintLogger, Timeline, build_document, write_json
from rlsim.trainer.verl_log import write_verl_log

POLL_S = 0.05  # how often a blocked process checks whether it should stop


@dataclass(frozen=True)
class AsyncConfig(GRPOConfig):
    queue_depth: int = 1
    """buffer depth K: batches generated (or being generated) and not yet taken by the trainer"""
    max_lag: int = 1
    """drop a batch generated with weights more than this many versions behind the trainer's"""
    sync_every: int = 1
    """the trainer publishes its weights every this many RL steps"""
    generator_threads: int = 1
    """torch threads (and pinned cores) of the generator process: the inference pool"""
    trainer_threads: int = 1
    """torch threads (and pinned cores) of the trainer process: the training pool"""
    pin_cores: bool = True
    """pin each process to its own cores (os.sched_setaffinity), like two GPU pools"""
    stop_timeout_s: float = 10.0
    """after a stop or a failure, how long the parent waits for the other process to finish"""


class TrainerProcessError(RuntimeError):
    """A generator or trainer process died or raised; the message names it."""


@dataclass
class SharedWeights:
    """The published policy: a flat float32 vector in shared memory, its version and a lock."""

    flat: torch.Tensor
    version: object  # multiprocessing Value("q"): RL steps behind the published weights
    lock: object  # multiprocessing Lock, held while `flat` and `version` change together

    def load_into(self, model: torch.nn.Module, stop) -> int | None:
        """Copy the published weights into `model`; return their version (None if stopped)."""
        if not _acquire(self.lock, stop):
            return None
        try:
            _copy_flat(self.flat, model, into_model=True)
            return self.version.value
        finally:
            self.lock.release()

    def publish(self, model: torch.nn.Module, version: int, stop) -> bool:
        if not _acquire(self.lock, stop):
            return False
        try:
            _copy_flat(self.flat, model, into_model=False)
            self.version.value = version
            return True
        finally:
            self.lock.release()


@torch.no_grad()
def _copy_flat(flat: torch.Tensor, model: torch.nn.Module, into_model: bool) -> None:
    # copies, never views: the generator's weights must not change under it mid-batch
    offset = 0
    for p in model.parameters():
        chunk = flat[offset : offset + p.numel()].view_as(p)
        if into_model:
            p.copy_(chunk)
        else:
            chunk.copy_(p)
        offset += p.numel()


def _should_stop(stop) -> bool:
    parent = mp.parent_process()
    return stop.is_set() or (parent is not None and not parent.is_alive())


def _acquire(lock, stop) -> bool:
    # a timeout, so a lock held by a killed process cannot hang us
    while not lock.acquire(timeout=POLL_S):
        if _should_stop(stop):
            return False
    return True


def _put(q, item, stop) -> bool:
    while not _should_stop(stop):
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            pass
    return False


def _get(q, stop):
    while not _should_stop(stop):
        try:
            return q.get(timeout=POLL_S)
        except queue.Empty:
            pass
    return None


def _child_main(name, body, cores, threads, run_start_wall_s, result_q, *args) -> None:
    """Process entry: pin, run `body(timeline, *args)`, report (name, part, error) to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if cores is not None:
        os.sched_setaffinity(0, cores)  # like a GPU pool: these cores are ours alone
    torch.set_num_threads(threads)
    steady_allocator()  # per-operator costs that do not depend on what ran before (host_allocator.py)
    tl = Timeline(run_start_wall_s=run_start_wall_s)
    try:
        summary = body(tl, *args)
        result_q.put((name, tl.to_dict() | {"summary": summary}, None))
    except BaseException:
        result_q.put((name, tl.to_dict() | {"summary": {}}, traceback.format_exc()))
        sys.exit(1)


def generator_body(tl: Timeline, cfg: AsyncConfig, weights: SharedWeights, buffer, stop) -> dict:
    """The inference pool: reserve a slot, sync weights, generate, score, enqueue; until stopped."""
    data_q, slots = buffer
    data_q.cancel_join_thread()  # on exit, never wait for a trainer that stopped reading
    task = Addition(n_digits=cfg.n_digits)
    model = build_policy(cfg, task).eval()
    rng = np.random.default_rng(cfg.seed)  # prompts
    gen = torch.Generator().manual_seed(cfg.seed)  # sampling
    version, batch_index = -1, 0
    while not _should_stop(stop):
        # ---- wait for a free buffer slot: the trainer must take a batch (and so move ahead)
        if not slots.acquire(block=False):
            t0 = tl.now()
            if not _acquire(slots, stop):
                break
            tl.add("inference", "idle-waiting-for-weights", t0, tl.now(), batch_index, version)

        # ---- weight sync: load newer published weights, only between batches
        if weights.version.value != version:
            t0 = tl.now()
            version = weights.load_into(model, stop)
            if version is None:
                break
            tl.add("inference", "sync", t0, tl.now(), batch_index, version)

        # ---- generate and score one batch of whole groups ("prefill", "decode")
        roll = collect(model, task, cfg, rng, gen, tl, batch_index, version)
        # roll.tokens [N, P + R], roll.mask [N, R], roll.advantages [N]; N = B * G

        # ---- hand off (never blocks: we hold a slot). Plain pickle bytes, not torch's
        # shared-memory tensors, so a batch stays readable after its generator died
        if not _put(data_q, pickle.dumps(roll), stop):
            break
        batch_index += 1
    return {"rollout/batches_generated": batch_index}


def trainer_body(tl: Timeline, cfg: AsyncConfig, weights: SharedWeights, buffer, stop, logger):
    """The training pool: take batches, reject stale ones, train, publish weights."""
    data_q, slots = buffer
    tl.logger = logger
    task = Addition(n_digits=cfg.n_digits)
    model = build_policy(cfg, task)
    weights.load_into(model, stop)
    ref = copy.deepcopy(model).requires_grad_(False) if cfg.kl_coef > 0 else None
    theta0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    version, step, dropped_batches = 0, 0, 0
    while step < cfg.steps:
        # ---- wait for data
        try:
            item = data_q.get_nowait()
        except queue.Empty:
            t0 = tl.now()
            item = _get(data_q, stop)
            tl.add("training", "idle-waiting-for-data", t0, tl.now(), step, version)
        if item is None:
            break
        slots.release()  # the generator may start the next batch
        host_t0 = tl.now()  # the controller's host work of this step (in no state) starts here
        roll = pickle.loads(item)

        # ---- staleness: reject the whole batch if its weights lag too far behind ours
        lag = version - roll.version
        lengths = roll.response_tokens.tolist()
        if lag > cfg.max_lag:
            dropped_batches += 1
            for reward, n in zip(roll.rewards.tolist(), lengths, strict=True):
                tl.sample(
                    prompt_tokens=roll.prompt_len,
                    response_tokens=n,
                    version_started=roll.version,
                    version_trained=None,
                    reward=reward,
                    dropped=True,
                    step=None,
                )
            continue

        # ---- train: old log-probs, forward/backward, optimizer
        host_s = tl.now() - host_t0
        metrics = train_step(model, opt, roll, cfg, tl, step, version, ref)
        host_t0 = tl.now()
        for reward, n in zip(roll.rewards.tolist(), lengths, strict=True):
            tl.sample(
                prompt_tokens=roll.prompt_len,
                response_tokens=n,
                version_started=roll.version,
                version_trained=version,
                reward=reward,
                dropped=False,
                step=step,
            )
        version += 1
        host_s += tl.now() - host_t0

        # ---- weight sync: publish to the generator every sync_every steps
        if version % cfg.sync_every == 0:
            with tl.phase("training", "sync", step, version):
                if not weights.publish(model, version, stop):
                    break

        # ---- step metrics
        host_t0 = tl.now()
        metrics["rollout/reward_mean"] = roll.rewards.mean().item()
        metrics["rollout/exact_fraction"] = (roll.rewards == 1.0).float().mean().item()
        metrics["rollout/response_tokens_mean"] = sum(lengths) / len(lengths)
        metrics["timing/score_s"] = roll.score_s
        metrics["rollout/lag"] = lag
        metrics["rollout/batches_dropped"] = dropped_batches
        metrics["timing/host_s"] = host_s + tl.now() - host_t0
        metrics["timing/step_end_s"] = tl.now()
        tl.log_step(step, metrics)
        step += 1
    stop.set()  # done (or stopped): the generator and the parent see it
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    return {"train/param_change_l2": (theta - theta0).norm().item(), "train/steps_done": step}


def _split_cores(cfg: AsyncConfig) -> dict[str, list[int] | None]:
    """Disjoint cores for the two processes when there are enough, else shared round-robin."""
    if not cfg.pin_cores or not hasattr(os, "sched_setaffinity"):
        return {"generator": None, "trainer": None}
    cores = sorted(os.sched_getaffinity(0))
    n_gen, n_train = cfg.generator_threads, cfg.trainer_threads
    pick = [cores[i % len(cores)] for i in range(n_gen + n_train)]
    return {"generator": pick[:n_gen], "trainer": pick[n_gen:]}


def _supervise(procs: dict, result_q, stop, timeout_s: float, parts: dict, tracebacks: dict):
    """Collect each process's timeline part; stop everyone when one finishes, fails or dies.

    Returns None on success, else a one-line message naming the process that failed (a raised
    exception's traceback goes to `tracebacks`). After a stop, the processes get `timeout_s` to
    report before they are terminated.
    """
    failure, deadline, exited_at = None, None, {}
    while len(parts) < len(procs):
        try:
            name, part, error = result_q.get(timeout=POLL_S)
            parts[name] = part
            if error is not None:
                tracebacks[name] = error
                last_line = error.strip().splitlines()[-1]
                failure = failure or f"{name} process (pid {procs[name].pid}) raised {last_line}"
        except queue.Empty:
            pass
        now = time.monotonic()
        for name, p in procs.items():
            if name in parts or p.is_alive():
                continue
            exited_at.setdefault(name, now)
            # a clean exit reports first; allow its part a moment to arrive through the pipe
            if p.exitcode != 0 or now - exited_at[name] > 2.0:
                parts[name] = None
                if failure is None:
                    failure = f"{name} process (pid {p.pid}) died with exit code {p.exitcode}"
                    if p.exitcode is not None and p.exitcode < 0:
                        failure += f" ({signal.Signals(-p.exitcode).name})"
        if failure is not None or stop.is_set():
            stop.set()
            deadline = deadline or now + timeout_s
        if deadline is not None and now > deadline:
            break
    for p in procs.values():
        p.join(timeout=1.0)
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
    return failure


def run_async(cfg: AsyncConfig, logger=None, on_start=None) -> dict:
    """Run asynchronous GRPO; write the timeline JSON to cfg.out_path and return it.

    `on_start`, if given, is called in the parent with {"generator": pid, "trainer": pid} once
    both processes have started (tests use it to kill one). Raises TrainerProcessError if a
    process dies or raises, KeyboardInterrupt on Ctrl-C; the JSON is written in every case.
    """
    ctx = mp.get_context("spawn")
    # ---- setup in the parent: the warm-started policy both processes start from, version 0
    torch.set_num_threads(cfg.trainer_threads)  # the warm start is training work
    steady_allocator()
    task = Addition(n_digits=cfg.n_digits)
    model = build_policy(cfg, task)
    warm_loss = warm_start(model, task, cfg)
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    weights = SharedWeights(flat.share_memory_(), ctx.Value("q", 0, lock=False), ctx.Lock())
    buffer = (ctx.Queue(maxsize=cfg.queue_depth), ctx.Semaphore(cfg.queue_depth))
    result_q, stop = ctx.Queue(), ctx.Event()
    cores = _split_cores(cfg)
    run_start_wall_s = time.time()  # t = 0 of every timeline: the shared clock

    # ---- spawn the two pools
    shared = (run_start_wall_s, result_q, cfg, weights, buffer, stop)
    gen_args = ("generator", generator_body, cores["generator"], cfg.generator_threads, *shared)
    train_args = ("trainer", trainer_body, cores["trainer"], cfg.trainer_threads, *shared)
    procs = {
        "generator": ctx.Process(target=_child_main, args=gen_args, daemon=True),
        "trainer": ctx.Process(target=_child_main, args=(*train_args, logger or NullLogger()), daemon=True),
    }
    for p in procs.values():
        p.start()
    if on_start is not None:
        on_start({name: p.pid for name, p in procs.items()})

    # ---- supervise until the trainer is done, a process fails, or Ctrl-C
    parts: dict[str, dict | None] = {}
    tracebacks: dict[str, str] = {}
    status, interrupted = "completed", False
    try:
        failure = _supervise(procs, result_q, stop, cfg.stop_timeout_s, parts, tracebacks)
    except KeyboardInterrupt:
        stop.set()
        interrupted = True
        failure = _supervise(procs, result_q, stop, cfg.stop_timeout_s, parts, tracebacks)
    if interrupted:  # a child hit by the same Ctrl-C while starting is not the cause
        status = "interrupted"
        failure = "stopped by KeyboardInterrupt" + ("" if failure is None else f"; {failure}")
    elif failure is not None:
        status = "failed"

    # ---- merge both timelines into one document, written atomically
    alive = [p for p in parts.values() if p is not None]
    summary = {"train/warmup_loss": warm_loss}
    for part in alive:
        summary |= part.pop("summary")
    doc = build_document(
        "async",
        asdict(cfg),
        to_hf_config(model.config),
        alive,
        status=status,
        error=failure,
        tracebacks=tracebacks,
        env={"torch": torch.__version__, "cores": cores},
        summary=summary,
    )
    write_json(cfg.out_path, doc)
    if cfg.metrics_path:
        write_verl_log(cfg.metrics_path, doc)
    if status == "failed":
        raise TrainerProcessError(f"{failure}; stopped the run, timeline in {cfg.out_path}")
    if interrupted:
        raise KeyboardInterrupt
    return doc


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else GRPOConfig.steps
    result = run_async(AsyncConfig(steps=steps), logger=PrintLogger())
    for key, value in result["summary"].items():
        print(f"{key:45s} {value:.4g}")
