"""verl's metric keys and the StepLog fields they fill (shared by the verl readers).

Confirmed in verl's code: `compute_timing_metrics` writes `timing_s/{name}` for every
`marked_timer` of the step, `compute_data_metrics` writes `response_length/{mean,max,min,
clip_ratio}` and `prompt_length/*`, `compute_throughout_metrics` writes `perf/time_per_step`
(volcengine/verl@07c9cf137c885a5b492c3440d98f1a7e8887f7ca:verl/trainer/ppo/metric_utils.py);
the trainers time `gen`, `old_log_prob`, `ref`, `update_actor`, `update_weights` and `step`
(verl/trainer/ppo/ray_trainer.py), and the rollout worker adds its own `generate_sequences`,
the engines' part of `gen` (its timing dict is merged into the step's). The one-step-off
trainer logs `timing_s/wait_prev_gen` instead of `gen` (recipe/one_step_off_policy) and the
fully-async one `fully_async/{trainer,rollouter}/idle_ratio` (read, shown to the user, not
fitted: they describe a pipelined run, and the fit starts from a synchronous one).
`Tracking.log(data, step)` hands this flat dict to every backend
(volcengine/verl@03e1b65793f0f2dcc526cf6bf087028ca8c900e9:verl/utils/tracking.py).
"""

VERL_KEYS: dict[str, str] = {
    "timing_s/gen": "generation_s",
    "timing_s/generate_sequences": "engine_generation_s",
    "timing_s/old_log_prob": "old_log_prob_s",
    "timing_s/ref": "ref_s",
    "timing_s/update_actor": "update_actor_s",
    "timing_s/update_weights": "weight_sync_s",
    "timing_s/step": "step_s",
    "response_length/mean": "response_mean",
    "response_length/max": "response_max",
    "response_length/min": "response_min",
    "response_length/clip_ratio": "response_clip_ratio",
    "prompt_length/mean": "prompt_mean",
    "timing_s/wait_prev_gen": "generation_wait_s",
    "fully_async/trainer/idle_ratio": "trainer_idle_ratio",
    "fully_async/rollouter/idle_ratio": "rollouter_idle_ratio",
}
EXPECTED = "timing_s/gen, timing_s/update_actor, timing_s/step, response_length/mean, ..."
