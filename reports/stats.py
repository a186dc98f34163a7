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
    mcnemar_holm: float = math.nan  # the McNemar p, Holm-adjusted like p_holm
    sd_diff: float = math.nan  # standard deviation of the paired differences
    mdd: float = math.nan  # minimal detectable difference: see min_detectable_difference

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
        sd = float(np.std(a - b, ddof=1))
        return cls(n=len(common), mean_diff=float((a - b).mean()), t=float(res.statistic), p=float(res.pvalue),
                   mcnemar_p=mcnemar_exact(a, b), sd_diff=sd, mdd=min_detectable_difference(sd, len(common)))

    def deciding_p(self, corrected: bool = False) -> float:
        """The p-value a verdict rests on: the exact McNemar test for 0/1 scores (a t-test on 0/1 differences
        is anti-conservative when few items differ, e.g. p 0.044 for 4 wins and no loss, McNemar 0.125), else
        the t-test."""
        if self.mcnemar_p is not None:
            return self.mcnemar_holm if corrected else self.mcnemar_p
        return self.p_holm if corrected else self.p

    def better(self, alpha: float = 0.05, corrected: bool = False) -> bool:
        p = self.deciding_p(corrected)
        return not math.isnan(p) and p < alpha and self.mean_diff > 0

    def worse(self, alpha: float = 0.05, corrected: bool = False) -> bool:
        p = self.deciding_p(corrected)
        return not math.isnan(p) and p < alpha and self.mean_diff < 0


def min_detectable_difference(sd_diff: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference that a two-sided paired t-test at `alpha` detects with probability
    `power`, for n pairs whose differences have standard deviation sd_diff (statsmodels' TTestPower: the
    noncentral t). A comparison that is not significant says only that the true difference is probably below this."""
    if n < 3 or not sd_diff > 0:  # with 1 degree of freedom the noncentral t overflows; no power worth stating
        return math.nan
    from statsmodels.stats.power import TTestPower

    effect = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(effect) * sd_diff


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
    """Holm's step-down adjustment of a family of p-values (statsmodels' multipletests; NaN entries are left out
    and stay NaN)."""
    from bench.multiple_testing import holm_adjusted

    valid = [key for key, p in pvalues.items() if p is not None and not math.isnan(p)]
    adjusted = {key: math.nan for key in pvalues}
    if valid:
        adjusted.update(zip(valid, map(float, holm_adjusted([pvalues[k] for k in valid]))))
    return adjusted


def tost_paired(a: np.ndarray, b: np.ndarray, margin: float) -> float:
    """Paired TOST p of |mean(a - b)| < margin (statsmodels); a difference without spread is known exactly."""
    from statsmodels.stats.weightstats import ttost_paired

    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(diff) < 2 or np.std(diff) == 0:
        return 0.0 if abs(float(np.mean(diff))) < margin else 1.0
    return float(ttost_paired(a, b, -margin, margin)[0])


def verdict(p_diff: float, p_equiv: float, alpha: float = 0.05) -> str:
    """A comparison's verdict from its difference test and its equivalence test (TOST) against a preset margin."""
    if not math.isnan(p_diff) and p_diff < alpha:
        return "differs, by less than the margin" if p_equiv < alpha else "differs"
    return "equivalent within the margin" if p_equiv < alpha else "cannot decide"


def bootstrap_seeds_items(a: np.ndarray, b: np.ndarray, margin: float, alpha: float = 0.05, resamples: int = 10_000,
                          seed: int = 0) -> dict:
    """Two methods' per-item scores [seeds, items] on the same test items, compared by resampling seeds and items
    together (two-way bootstrap: both sources of chance, the selection's seed and the test sample, the same draw for
    both methods): the mean difference, its two-sided p, the TOST p against ±margin, the 95% percentile interval, the
    bootstrap standard error and the MDD at `alpha` (80% power, normal approximation)."""
    from scipy.stats import norm

    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n_seeds, n_items = diff.shape
    rng = np.random.default_rng(seed)
    w_seeds = rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=resamples).astype(np.float64)
    w_items = rng.multinomial(n_items, np.full(n_items, 1 / n_items), size=resamples).astype(np.float64)
    draws = np.einsum("bs,si,bi->b", w_seeds, diff, w_items) / (n_seeds * n_items)  # each resample's mean difference
    share = lambda hits: (1 + int(np.sum(hits))) / (resamples + 1)  # noqa: E731  (the +1: a p-value is never 0)
    se = float(draws.std(ddof=1))
    return {"diff": float(diff.mean()), "p": min(1.0, 2 * min(share(draws <= 0), share(draws >= 0))),
            "p_tost": max(share(draws <= -margin), share(draws >= margin)),
            "ci95": [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))], "se": se,
            "mdd": float((norm.ppf(1 - alpha / 2) + norm.ppf(0.8)) * se)}


def planned_verdict(p_diff: float, p_equiv: float, margin: float, mdd: float, alpha: float = 0.05) -> str:
    """The analysis plan's verdict (studies/tables/ANALYSIS_PLAN.md): "equivalent" needs the TOST and a margin the
    design can reach (margin >= MDD); below it the design cannot show equivalence, whatever the TOST says."""
    if not math.isnan(p_diff) and p_diff < alpha:
        return "differs"
    if math.isnan(mdd):  # too few observations to know what the design can detect: no equivalence either
        return "cannot decide (no MDD)"
    if margin < mdd:
        return "cannot decide (margin < MDD)"
    return "equivalent within the margin" if p_equiv < alpha else "cannot decide"
