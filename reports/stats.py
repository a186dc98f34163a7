"""Paired significance tests on per-item scores (scipy)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedTTest:
    """Two-sided paired t-test of a method against a baseline on the items both answered."""

    n: int
    mean_diff: float
    t: float
    p: float

    @classmethod
    def of(cls, method_scores: dict[str, float], baseline_scores: dict[str, float]) -> "PairedTTest":
        common = sorted(set(method_scores) & set(baseline_scores))
        a = np.array([method_scores[i] for i in common], dtype=float)
        b = np.array([baseline_scores[i] for i in common], dtype=float)
        if len(common) < 2 or np.allclose(a - b, (a - b)[0] if len(common) else 0):
            # Too few pairs, or identical differences (zero variance): no test is possible.
            diff = float((a - b).mean()) if len(common) else 0.0
            return cls(n=len(common), mean_diff=diff, t=math.nan, p=math.nan)
        res = stats.ttest_rel(a, b)
        return cls(n=len(common), mean_diff=float((a - b).mean()), t=float(res.statistic), p=float(res.pvalue))

    def better(self, alpha: float = 0.05) -> bool:
        return not math.isnan(self.p) and self.p < alpha and self.mean_diff > 0

    def worse(self, alpha: float = 0.05) -> bool:
        return not math.isnan(self.p) and self.p < alpha and self.mean_diff < 0
