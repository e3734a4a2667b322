"""Fitting the response-length distribution to what a log says about lengths.

With every sample's length logged, the fit is the observed lengths themselves (a `kind: file`
distribution, resampled). Otherwise a lognormal truncated at the max length (the workload model
rlsim draws from, rlsim.workload) is fitted by least squares (scipy) to the per-step statistics:
the mean response; the clip ratio (the share cut at the max length, which with the mean pins the
spread); and, for steps that clipped nothing, the largest and smallest of the step's N samples,
whose expectations for N independent draws are E[max] = ∫ (1 - F(x)^N) dx and
E[min] = 1 + ∫_1 (1 - F(x))^N dx. With the mean alone the spread is not identified and is kept
from the base scenario. Units: tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import integrate, optimize, stats

from rlsim.logs.record import StepLog
from rlsim.scenario import LengthDist, LognormalLengths


@dataclass(frozen=True)
class LengthFit:
    """The fitted distribution, what identified it, and what had to be kept from the base."""

    dist: dict  # the scenario's workload.response_tokens mapping (file paths filled in by the writer)
    observed: np.ndarray | None  # every sample's length, when the log had them (kind: file)
    fitted: dict[str, tuple[float, str]]  # field -> (value, the statistic it came from)
    kept: list[str]


def _mean_of(steps: list[StepLog], name: str) -> float | None:
    values = [getattr(s, name) for s in steps if getattr(s, name) is not None]
    return float(np.mean(values)) if values else None


def _base_max(base: LengthDist) -> int:
    return int(getattr(base, "max", None) or getattr(base, "value", 32768))


def truncated_mean(mean: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for a lognormal X of arithmetic mean `mean` and log-spread `sigma`."""
    if sigma <= 0:
        return min(mean, cap)
    mu = math.log(mean) - sigma**2 / 2
    z = (math.log(cap) - mu) / sigma
    return mean * stats.norm.cdf(z - sigma) + cap * stats.norm.sf(z)


def clip_ratio(mean: float, sigma: float, cap: float) -> float:
    """P(rint(X) >= cap): the share of responses cut at the max length."""
    mu = math.log(mean) - sigma**2 / 2
    return float(stats.norm.sf((math.log(max(cap - 0.5, 1.0)) - mu) / sigma))


def expected_extremes(mean: float, sigma: float, cap: float, n: int) -> tuple[float, float]:
    """(E[max], E[min]) of n independent draws clipped to [1, cap]."""
    mu = math.log(mean) - sigma**2 / 2
    dist = stats.lognorm(s=sigma, scale=math.exp(mu))
    e_max = integrate.quad(lambda x: 1.0 - dist.cdf(x) ** n, 0.0, cap, limit=200)[0]
    e_min = 1.0 + integrate.quad(lambda x: dist.sf(x) ** n, 1.0, cap, limit=200)[0]
    return e_max, e_min


def fit_lengths(steps: list[StepLog], base: LengthDist, samples_per_step: int) -> LengthFit:
    """The response-length distribution these steps imply (see the module docstring)."""
    if steps and all(s.response_lengths for s in steps):
        observed = np.concatenate([np.asarray(s.response_lengths) for s in steps])
        cap = max(int(observed.max()), _base_max(base))
        fitted = {"workload.response_tokens.mean (observed)": (float(observed.mean()), "response_lengths")}
        return LengthFit({"kind": "file", "path": "", "max": cap}, observed, fitted, [])
    mean_obs = _mean_of(steps, "response_mean")
    if mean_obs is None:
        return LengthFit(base.model_dump(), None, {}, ["workload.response_tokens"])
    clip_obs = _mean_of(steps, "response_clip_ratio")
    max_seen = max((s.response_max for s in steps if s.response_max is not None), default=None)
    cap = int(round(max_seen)) if clip_obs and max_seen else _base_max(base)
    sigma0 = base.sigma if isinstance(base, LognormalLengths) and base.sigma > 0 else 0.8
    n_all = samples_per_step * len(steps)
    # a step's max says something only when it clipped nothing; its min always does
    maxima = [s.response_max for s in steps if not s.response_clip_ratio and s.response_max is not None]
    maxima = [m for m in maxima if m < cap]
    minima = [s.response_min for s in steps if s.response_min is not None]
    spread_known = bool(clip_obs) or bool(maxima) or bool(minima)

    def residuals(x: np.ndarray) -> np.ndarray:
        # each statistic's miss over its standard error, so the most precise one counts most
        mean, sigma = math.exp(x[0]), x[1] if spread_known else sigma0
        cv = math.sqrt(math.expm1(sigma**2))
        out = [(truncated_mean(mean, sigma, cap) / mean_obs - 1.0) / max(cv / math.sqrt(n_all), 1e-6)]
        if clip_obs:
            se = math.sqrt(clip_obs * (1 - clip_obs) / n_all)
            out.append((clip_ratio(mean, sigma, cap) - clip_obs) / max(se, 1e-6))
        if maxima or minima:
            e_max, e_min = expected_extremes(mean, sigma, cap, samples_per_step)
            for values, expected in ((maxima, e_max), (minima, e_min)):
                if values:
                    out.append((expected - np.mean(values)) / _standard_error(values))
        return np.array(out)

    x0 = np.array([math.log(mean_obs), sigma0])
    lo, hi = [-np.inf, 0.01], [np.inf, 3.0]
    if not spread_known:
        x0, lo, hi = x0[:1], lo[:1], hi[:1]
    sol = optimize.least_squares(residuals, x0, bounds=(lo, hi), xtol=1e-12, ftol=1e-12)
    mean = math.exp(sol.x[0])
    sigma = float(sol.x[1]) if spread_known else sigma0
    fitted = {"workload.response_tokens.mean": (mean, "response_length/mean")}
    kept = []
    if spread_known:
        source = "response_length/clip_ratio" if clip_obs else "response_length/max, min"
        fitted["workload.response_tokens.sigma"] = (sigma, source)
    else:
        kept.append("workload.response_tokens.sigma")
    if clip_obs:
        fitted["workload.response_tokens.max"] = (float(cap), "response_length/max")
    dist = {"kind": "lognormal", "mean": mean, "sigma": sigma, "max": cap}
    if isinstance(base, LognormalLengths):
        dist["min"] = base.min
    return LengthFit(dist, None, fitted, kept)


def _standard_error(values: list[float]) -> float:
    """Standard error of the mean of per-step extremes (their spread over steps; 5% of one if alone)."""
    spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.05 * abs(values[0])
    return max(spread / math.sqrt(len(values)), 1e-6 * max(abs(float(np.mean(values))), 1.0))
