"""The NeMo RL v0.4 rows (docs/about/performance-summary.md, 'Nemo RL v0.4'): each encodes its
recipe's batch, and the response lengths it simulates have the table's G-average as their mean.

The table publishes the mean generated length of each run (G-Average Seq len, response only:
its tokens/s/GPU column counts about 100-135 prompt tokens more per sample). The rows write it as
a lognormal truncated at the 4,096-token limit, whose untruncated mean is solved so that the
truncated mean is the published one; Qwen3 thinks long, so a third or more of its responses hit
the limit, and the untruncated mean sits far above the published figure.
"""

from __future__ import annotations

import pytest

from rlsim.validation.published import published_rows
from rlsim.validation.published_run import simulate_row

ROWS = {r.id: r for r in published_rows()}

# The table's G-Average Seq len per run (NVIDIA-NeMo/RL@cff17f83bf30c4f9c757b5fe707b2c32db606411:
# docs/about/performance-summary.md), and its G-GBS.
G_AVERAGE = {
    "nemo-rl-v04-llama8b-sync": 1060,
    "nemo-rl-v04-llama8b-async": 1129,
    "nemo-rl-v04-qwen3-32b-sync": 3206,
    "nemo-rl-v04-qwen3-32b-async": 3207,
    "nemo-rl-v04-qwen3-30b-a3b-sync": 3154,
    "nemo-rl-v04-qwen3-30b-a3b-async": 3158,
    "nemo-rl-v04-deepseek-v3-sync": 745,
    "nemo-rl-v04-deepseek-v3-async": 744,
    "nemo-rl-v04-qwen3-235b-sync": 5671,
    "nemo-rl-v04-qwen3-235b-async": 5691,
}
G_GBS = {rid: 2048 for rid in G_AVERAGE} | {rid: 512 for rid in G_AVERAGE if "deepseek" in rid or "235b" in rid}


def test_the_v04_rows_are_in_the_suite_and_the_async_ones_pair_with_their_on_policy_run() -> None:
    assert set(G_AVERAGE) <= set(ROWS)
    for rid in G_AVERAGE:
        if rid.endswith("-async"):
            assert ROWS[rid].pair_with == rid.replace("-async", "-sync")
            assert ROWS[rid].scenario["pipeline"]["mode"] == "one_step_off"
        else:
            assert ROWS[rid].scenario["pipeline"]["mode"] == "colocated"


@pytest.mark.parametrize("rid", sorted(G_AVERAGE))
def test_a_v04_row_generates_the_published_mean_length_for_the_published_batch(rid: str) -> None:
    predicted = simulate_row(ROWS[rid])
    assert predicted["samples_per_step"] == G_GBS[rid]
    mean = predicted["response_tokens_per_step"] / predicted["samples_per_step"]
    # 512 to a few thousand lognormal draws a step: within 2% of the table's mean
    assert mean == pytest.approx(G_AVERAGE[rid], rel=0.02)
