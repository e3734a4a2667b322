"""Drawing token lengths for GRPO groups from the scenario's distributions.

A group is one prompt (one prompt length) and G completions whose log-lengths share a common
component (`group_correlation`): hard prompts make every completion long. All draws come from
one seeded numpy Generator that the caller owns, in a fixed order, so a seed fixes every length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from rlsim.errors import ScenarioError
from rlsim.scenario import (
    ConstantLengths,
    FileLengths,
    HistogramLengths,
    LengthDist,
    LognormalLengths,
    Scenario,
)


@dataclass(frozen=True)
class GroupDraw:
    """One prompt and the response lengths of its G completions, in tokens."""

    prompt_tokens: int
    response_tokens: tuple[int, ...]


def _file_lengths(path: Path) -> np.ndarray:
    """Observed lengths from a file, re-read when the file changes (cached on its mtime)."""
    try:
        return _read_lengths(path, path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise ScenarioError("workload.response_tokens.path", f"'{path}' does not exist") from None


@cache
def _read_lengths(path: Path, _mtime_ns: int) -> np.ndarray:
    try:
        values = [int(x) for x in path.read_text().split()]
    except FileNotFoundError:
        raise ScenarioError("workload.response_tokens.path", f"'{path}' does not exist") from None
    except ValueError:
        raise ScenarioError("workload.response_tokens.path", f"'{path}' must hold one integer per line") from None
    if not values or min(values) <= 0:
        raise ScenarioError("workload.response_tokens.path", f"'{path}' must hold positive lengths")
    return np.asarray(values, dtype=np.int64)


def mean_length(dist: LengthDist, base_dir: Path = Path(".")) -> float:
    """The distribution's mean before truncation, tokens (used for schedules and reports)."""
    if isinstance(dist, LognormalLengths):
        return dist.mean
    if isinstance(dist, ConstantLengths):
        return float(dist.value)
    if isinstance(dist, HistogramLengths):
        w = sum(b[2] for b in dist.bins)
        return sum((lo + hi) / 2 * wt for lo, hi, wt in dist.bins) / w
    return float(_file_lengths(base_dir / dist.path).mean())


def _draw(
    dist: LengthDist, n: int, rng: np.random.Generator, z: np.ndarray, base_dir: Path, mean_scale: float
) -> np.ndarray:
    """n lengths; `z` are standard normals (correlated within a group) used by the lognormal."""
    if isinstance(dist, ConstantLengths):
        return np.full(n, max(1, round(dist.value * mean_scale)), dtype=np.int64)
    if isinstance(dist, LognormalLengths):
        mu = math.log(dist.mean * mean_scale) - dist.sigma**2 / 2.0
        raw = np.exp(mu + dist.sigma * z)
        lengths = np.clip(np.rint(raw), dist.min, dist.max).astype(np.int64)
        if dist.clip_fraction > 0:  # the responses that run to the limit (draws only then: seeds stay put)
            lengths[rng.random(n) < dist.clip_fraction] = dist.max
        return lengths
    if isinstance(dist, HistogramLengths):
        w = np.array([b[2] for b in dist.bins], dtype=float)
        idx = rng.choice(len(dist.bins), size=n, p=w / w.sum())
        lo = np.array([dist.bins[i][0] for i in idx])
        hi = np.array([dist.bins[i][1] for i in idx])
        raw = (lo + rng.random(n) * (hi - lo)) * mean_scale  # uniform in [low, high)
        return np.clip(np.floor(raw), 1, dist.max).astype(np.int64)
    assert isinstance(dist, FileLengths)
    values = _file_lengths(base_dir / dist.path)
    raw = rng.choice(values, size=n) * mean_scale
    return np.clip(np.rint(raw), 1, dist.max).astype(np.int64)


class GroupSampler:
    """Draws GRPO groups one at a time from a scenario's workload (stateful, seeded)."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator) -> None:
        self.wl = scenario.workload
        self.group_size = scenario.algorithm.group_size
        self.rng = rng
        self.base_dir = Path(scenario.base_dir)
        self.response_scale = 1.0

    def set_response_mean(self, mean_tokens: float) -> None:
        """Rescale response lengths so their (untruncated) mean is `mean_tokens` (schedules)."""
        self.response_scale = mean_tokens / mean_length(self.wl.response_tokens, self.base_dir)

    def draw(self) -> GroupDraw:
        return self.draw_many(1)[0]

    def draw_many(self, n: int) -> list[GroupDraw]:
        """n groups at once (vectorised: one numpy call per quantity, not per group)."""
        g, rho = self.group_size, self.wl.group_correlation
        prompts = _draw(self.wl.prompt_tokens, n, self.rng, self.rng.standard_normal(n), self.base_dir, 1.0)
        common = self.rng.standard_normal((n, 1))
        z = math.sqrt(rho) * common + math.sqrt(1 - rho) * self.rng.standard_normal((n, g))
        resp = _draw(self.wl.response_tokens, n * g, self.rng, z.ravel(), self.base_dir, self.response_scale)
        rows = resp.reshape(n, g).tolist()
        return [GroupDraw(prompt_tokens=p, response_tokens=tuple(r)) for p, r in zip(prompts.tolist(), rows)]
