"""Confidence intervals and paired significance tests on per-item scores (scipy)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


def bootstrap_ci(values, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float | None,
                                                                                                  float | None]:
    """A bootstrap confidence interval for the mean over items (scipy, BCa; percentile when BCa is undefined,
    as when every item scored the same). (None, None) below 2 items."""
    data = np.sort(np.asarray(values, dtype=float))  # the same interval whatever order the records were merged in
    if len(data) < 2:
        return None, None
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    for method in ("BCa", "percentile"):
        with np.errstate(all="ignore"):
            res = stats.bootstrap((data,), np.mean, confidence_level=confidence, n_resamples=resamples,
                                  method=method, rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high
    return None, None


@dataclass(frozen=True)
class PairedTTest:
    """Two-sided paired t-test of a method against a baseline on the items both answered."""

    n: int
    mean_diff: float
    t: float
    p: float
    p_holm: float = math.nan  # Holm-adjusted over the methods compared with the same baseline on the task
    mcnemar_p: float | None = None  # exact McNemar test, for 0/1 scores only

    @classmethod
    def of(cls, method_scores: dict[str, float], baseline_scores: dict[str, float]) -> "PairedTTest":
        common = sorted(set(method_scores) & set(baseline_scores))
        a = np.array([method_scores[i] for i in common], dtype=float)
        b = np.array([baseline_scores[i] for i in common], dtype=float)
        if len(common) < 2 or np.allclose(a - b, (a - b)[0] if len(common) else 0):
            # Too few pairs, or identical differences (zero variance): no test is possible.
            diff = float((a - b).mean()) if len(common) else 0.0
            return cls(n=len(common), mean_diff=diff, t=math.nan, p=math.nan,
                       mcnemar_p=mcnemar_exact(a, b) if len(common) else None)
        res = stats.ttest_rel(a, b)
        return cls(n=len(common), mean_diff=float((a - b).mean()), t=float(res.statistic), p=float(res.pvalue),
                   mcnemar_p=mcnemar_exact(a, b))

    def better(self, alpha: float = 0.05, corrected: bool = False) -> bool:
        p = self.p_holm if corrected else self.p
        return not math.isnan(p) and p < alpha and self.mean_diff > 0

    def worse(self, alpha: float = 0.05, corrected: bool = False) -> bool:
        p = self.p_holm if corrected else self.p
        return not math.isnan(p) and p < alpha and self.mean_diff < 0


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided exact McNemar test of paired 0/1 outcomes (a binomial test on the discordant pairs);
    None unless every score is 0 or 1."""
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        return None
    only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def holm(pvalues: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (NaN entries are left out and stay NaN)."""
    valid = sorted((p, key) for key, p in pvalues.items() if p is not None and not math.isnan(p))
    adjusted, running = {key: math.nan for key in pvalues}, 0.0
    for rank, (p, key) in enumerate(valid):
        running = max(running, min(1.0, (len(valid) - rank) * p))
        adjusted[key] = running
    return adjusted
