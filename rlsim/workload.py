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
from rlsim.errors_format import shown
from rlsim.inputs import LENGTHS_LIMIT_BYTES, read_text
from rlsim.scenario import (
    ConstantLengths,
    FileLengths,
    HistogramLengths,
    LengthDist,
    LognormalLengths,
    Scenario,
)
from rlsim.turns import draw_episodes

MAX_FILE_LENGTH = 10**9  # tokens in one observed sequence: far beyond any context window
PROMPT_FIELD = "workload.prompt_tokens.path"
RESPONSE_FIELD = "workload.response_tokens.path"


@dataclass(frozen=True)
class GroupDraw:
    """One prompt and the response lengths of its G completions, in tokens."""

    prompt_tokens: int
    response_tokens: tuple[int, ...]
    episodes: tuple | None = None  # agent scenarios: one turns.EpisodeDraw per completion


def _file_lengths(path: Path, field: str) -> np.ndarray:
    """Observed lengths from a file, re-read when the file changes (cached on its mtime)."""
    try:
        mtime_ns = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise ScenarioError(field, f"'{path}' does not exist") from None
    except OSError as exc:
        raise ScenarioError(field, f"cannot read '{path}': {exc.strerror or exc}") from None
    return _read_lengths(path, mtime_ns, field)


@cache
def _read_lengths(path: Path, _mtime_ns: int, field: str) -> np.ndarray:
    """Positive integer lengths, one per line, each at most MAX_FILE_LENGTH (bounded read)."""
    words = read_text(path, field, "lengths file", LENGTHS_LIMIT_BYTES).split()
    if not words:
        raise ScenarioError(field, f"'{path}' holds no lengths (one positive integer per line)")
    for i, word in enumerate(words):
        if not (word.isascii() and word.isdigit()) or len(word) > 12 or not 0 < int(word) <= MAX_FILE_LENGTH:
            raise ScenarioError(
                field,
                f"'{path}' value {i + 1} is {shown(word)}; each line must hold one integer "
                f"between 1 and {MAX_FILE_LENGTH:,} tokens",
            )
    return np.asarray([int(w) for w in words], dtype=np.int64)


def mean_length(dist: LengthDist, base_dir: Path = Path("."), field: str = "workload.response_tokens.path") -> float:
    """The distribution's mean before truncation, tokens (used for schedules and reports)."""
    if isinstance(dist, LognormalLengths):
        return dist.mean
    if isinstance(dist, ConstantLengths):
        return float(dist.value)
    if isinstance(dist, HistogramLengths):
        w = sum(b[2] for b in dist.bins)
        return sum((lo + hi) / 2 * wt for lo, hi, wt in dist.bins) / w
    return float(_file_lengths(base_dir / dist.path, field).mean())


def _draw(
    dist: LengthDist,
    n: int,
    rng: np.random.Generator,
    z: np.ndarray,
    base_dir: Path,
    mean_scale: float,
    field: str,
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
    values = _file_lengths(base_dir / dist.path, field)
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
        normals = self.rng.standard_normal(n)
        prompts = _draw(self.wl.prompt_tokens, n, self.rng, normals, self.base_dir, 1.0, PROMPT_FIELD)
        common = self.rng.standard_normal((n, 1))
        z = math.sqrt(rho) * common + math.sqrt(1 - rho) * self.rng.standard_normal((n, g))
        resp = _draw(
            self.wl.response_tokens, n * g, self.rng, z.ravel(), self.base_dir, self.response_scale, RESPONSE_FIELD
        )
        rows = resp.reshape(n, g).tolist()
        if self.wl.agent is not None:  # drawn after everything else: single-turn draws stay as they were
            episodes = draw_episodes(
                self.wl.agent,
                resp.reshape(n, g),
                g,
                rho,
                self.rng,
                self._lengths,
                self.wl.response_tokens,
                self.base_dir,
            )
            return [
                GroupDraw(prompt_tokens=p, response_tokens=tuple(r), episodes=e)
                for p, r, e in zip(prompts.tolist(), rows, episodes)
            ]
        return [GroupDraw(prompt_tokens=p, response_tokens=tuple(r)) for p, r in zip(prompts.tolist(), rows)]

    def _lengths(self, dist: LengthDist, n: int, z: np.ndarray, field: str) -> np.ndarray:
        """n lengths from `dist` (response schedules scale only the responses)."""
        scale = self.response_scale if dist is self.wl.response_tokens else 1.0
        return _draw(dist, n, self.rng, z, self.base_dir, scale, field)


# the longest sequence a length distribution is tabulated to, token by token (`length_pmf`)
PMF_MAX_TOKENS = 1 << 21


def length_pmf(dist: LengthDist, base_dir: Path = Path("."), field: str = RESPONSE_FIELD) -> np.ndarray:
    """P(length == i) for i = 0..max: the distribution `_draw` samples from, tabulated exactly.

    Lognormal: rounded and clipped to [min, max] as drawn, `clip_fraction` moved to max; a histogram:
    each bin's integers equally likely; a file: its clipped values' frequencies.
    """
    top = dist.value if isinstance(dist, ConstantLengths) else dist.max
    if top > PMF_MAX_TOKENS:
        raise ScenarioError(
            field.rsplit(".", 1)[0] + ".max",
            f"{top:,} tokens; the attention graph-build term tabulates lengths up to {PMF_MAX_TOKENS:,}",
        )
    pmf = np.zeros(top + 1)
    if isinstance(dist, ConstantLengths):
        pmf[dist.value] = 1.0
    elif isinstance(dist, LognormalLengths):
        lo, hi = min(dist.min, dist.max), dist.max
        if dist.sigma == 0:
            pmf[min(max(round(dist.mean), lo), hi)] = 1.0
        else:
            from scipy.special import ndtr  # the standard normal CDF

            mu = math.log(dist.mean) - dist.sigma**2 / 2.0
            k = np.arange(lo, hi)  # P(rint(X) <= k) = P(X < k + 0.5); everything above hi - 1 is hi
            cdf = np.append(ndtr((np.log(k + 0.5) - mu) / dist.sigma), 1.0)
            pmf[lo : hi + 1] = np.diff(cdf, prepend=0.0)
        if dist.clip_fraction > 0:
            pmf *= 1.0 - dist.clip_fraction
            pmf[hi] += dist.clip_fraction
    elif isinstance(dist, HistogramLengths):
        weights = np.array([b[2] for b in dist.bins], dtype=float)
        for (lo, hi, _), w in zip(dist.bins, weights / weights.sum(), strict=True):
            values = np.clip(np.arange(lo, hi), 1, dist.max)
            np.add.at(pmf, values, w / (hi - lo))
    else:
        values = np.clip(_file_lengths(base_dir / dist.path, field), 1, dist.max)
        pmf += np.bincount(values, minlength=top + 1) / values.size
    return pmf


def sample_length_pmf(scenario: Scenario) -> np.ndarray:
    """P(a trained sample is i tokens long): prompt + response, drawn independently of each other."""
    base = Path(scenario.base_dir)
    prompt = length_pmf(scenario.workload.prompt_tokens, base, PROMPT_FIELD)
    response = length_pmf(scenario.workload.response_tokens, base, RESPONSE_FIELD)
    return np.convolve(prompt, response)
