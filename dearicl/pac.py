"""dearicl-pac: the neural surrogate proposes and ranks arms; the stop is a stated (epsilon, delta) certificate.

Every arm a has an interval [lo_a, hi_a] for its true mean:
- model interval (every arm): f_a +- (xi + beta ||phi_a||_{V^-1}). phi_a are the network's last-layer features
  averaged over the validation queries, reduced to `feature_dim` SVD directions plus an intercept and frozen
  between retrainings; f = phi theta is a ridge head on the observed pull means (Neural-LinUCB style).
  xi is the misspecification: the largest leave-one-out error of the head on the AUDIT arms, drawn uniformly
  at random and never shown to the network, so their errors are held out. beta uses a per-pull noise level
  from repeated pulls (an upper confidence bound on the pooled variance), and a union over the arms.
- confidence sequence (pulled arms): at delta / (2K), by default the empirical-Bernstein sequence on the
  per-query rewards (`cs`, dearicl/confidence.py), valid for ANY rewards in [0, 1] that are independent across
  queries and pulls. A pulled arm's interval is the intersection.
The returned set S = the m arms with the highest interval midpoints. It stops when
min_{a in S} lo_a >= max_{b not in S} hi_b - epsilon. Then, if every interval holds, every arm of S is within
epsilon of the true m-th best (dearicl/README.md gives the argument). The confidence sequences hold with
probability >= 1 - delta/2 without assumptions; the model intervals hold only under the stated assumption that
no arm's head error exceeds xi (+ the noise term), which is measured, not proven: `coverage` counts the rounds
in which every arm's true mean lies in its interval.

Sampling: a share of pulls go to uniformly random audit arms; the others follow LUCB (Kalyanakrishnan et al.
2012): the member of S with the lowest lower bound and the outsider with the highest upper bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import chi2

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import (CONFIDENCE_SEQUENCES, ArmStats, OutOfPulls, confidence_sequence, trace_coverage,
                                truth_fields)


@dataclass
class PacConfig:
    m: int = 10
    epsilon: float = 0.1
    delta: float = 0.05
    cold_start: int = 5  # random arms pulled first to train the network
    audits_at_start: int = 10  # uniformly random audit arms pulled next (held out from the network)
    audit_share: float = 0.1  # afterwards, this share of pulls goes to fresh uniformly random audit arms
    max_audits: int = 20  # audit arms are never shown to the network: keep them a small share of the arms
    feature_dim: int = 4  # SVD directions of the network features used by the linear head
    refresh_every: int = 10  # pulls between network retrainings (or 10% of the pulls so far, if more)
    ridge: float = 1.0
    cs: str = "query-bernstein"  # the assumption-free sequence on pulled arms (dearicl/confidence.py)
    max_pulls: int | None = None
    max_rounds: int = 100_000
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.delta < 1 or self.epsilon < 0:
            raise ConfigError(f"dearicl-pac: delta must be in (0, 1) and epsilon >= 0, got {self.delta}, "
                              f"{self.epsilon}")
        if self.audits_at_start < 2 or not 0 <= self.audit_share < 1:
            raise ConfigError("dearicl-pac: audits_at_start must be >= 2 and audit_share in [0, 1)")
        if self.cs not in CONFIDENCE_SEQUENCES:
            raise ConfigError(f"dearicl-pac: cs must be one of {', '.join(CONFIDENCE_SEQUENCES)}, got {self.cs!r}")


@dataclass
class PacResult:
    top_m: list[int]  # S, best midpoint first
    pulls: int
    rounds: int
    stopped_by: str  # "certified" | "budget" | "max_pulls" | "max_rounds"
    trace: list[dict] = field(default_factory=list)
    coverage: float | None = None
    certificate: dict = field(default_factory=dict)  # the last round's xi, sigma, gap index, audits
    seen: list[int] = field(default_factory=list)  # every arm pulled


class CertifiedTopM:
    def __init__(self, env, surrogate, config: PacConfig):
        k = env.n_arms
        if not 0 < config.m < k:
            raise ConfigError(f"dearicl-pac: m must be in [1, {k - 1}], got {config.m}")
        self.env, self.s, self.cfg, self.k = env, surrogate, config, k
        self.rng = np.random.default_rng(config.seed)
        self.stats = ArmStats(k)
        self.cs = confidence_sequence(config.cs, k, config.delta / (2 * k))
        self.audits: list[int] = []
        self.pulls, self.since_refresh = 0, 0
        self.n_queries = None
        self.phi = None

    # ---- pulls ---------------------------------------------------------------------------------
    def _pull(self, arm: int) -> None:
        if self.cfg.max_pulls is not None and self.pulls >= self.cfg.max_pulls:
            raise OutOfPulls
        rewards = np.asarray(self.env.pull(arm), dtype=np.float64)
        self.n_queries = len(rewards)
        value = float(rewards.mean())
        self.stats.add(arm, value)
        self.cs.add(arm, rewards)
        if arm not in self.audits:  # audit arms stay out of the network's training data
            self.s.observe(arm, rewards)
        self.pulls += 1
        self.since_refresh += 1

    def _audit(self) -> bool:
        """Pull a fresh uniformly random arm that the network has not trained on; False when none is left."""
        fresh = np.setdiff1d(np.flatnonzero(self.stats.n == 0), self.audits)
        if not len(fresh):
            return False
        arm = int(self.rng.choice(fresh))
        self.audits.append(arm)
        self._pull(arm)
        return True

    # ---- the model interval --------------------------------------------------------------------
    def _refresh_features(self) -> None:
        self.s.update()
        raw = self.s.features(np.arange(self.k))
        raw = raw - raw.mean(axis=0)
        u, sv, _ = np.linalg.svd(raw, full_matrices=False)
        r = min(self.cfg.feature_dim, int(np.sum(sv > 1e-8 * max(sv[0], 1e-12))))
        z = u[:, :r] * np.sqrt(self.k)  # unit variance across arms
        pred = self.s.means(np.arange(self.k))
        pred = (pred - pred.mean()) / (pred.std() + 1e-9)  # the network's own estimate, recalibrated by the head
        self.phi = np.hstack([np.ones((self.k, 1)), pred[:, None], z])
        self.since_refresh = 0

    def _sigma(self) -> float:
        """Per-pull noise: an upper (1 - delta/4) bound on the pooled within-arm variance once 5 repeat pulls
        exist; before, the bound for a mean of n_q independent [0, 1] rewards, 1 / (2 sqrt(n_q))."""
        range_bound = 0.5 / math.sqrt(self.n_queries or 1)
        var, df = self.stats.pooled_variance()
        if df < 5:
            return range_bound
        upper = var * df / chi2.ppf(self.cfg.delta / 4, df)
        return min(range_bound, math.sqrt(upper))

    def model_intervals(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        # one observation per pulled arm (its mean), so that much-pulled arms do not dominate the head
        phi, pulled = self.phi, self.stats.n > 0
        gram = self.cfg.ridge * np.eye(phi.shape[1]) + phi[pulled].T @ phi[pulled]
        target = phi[pulled].T @ self.stats.mean[pulled]
        theta = np.linalg.solve(gram, target)
        errors = []
        for a in self.audits:  # leave-one-out: the head refitted without the audit arm
            g = gram - np.outer(phi[a], phi[a])
            t = target - self.stats.mean[a] * phi[a]
            errors.append(abs(self.stats.mean[a] - phi[a] @ np.linalg.solve(g, t)))
        xi = float(max(errors)) if errors else 1.0
        sigma = self._sigma()
        beta = sigma * math.sqrt(2.0 * math.log(4.0 * self.k / self.cfg.delta))
        norms = np.sqrt(np.einsum("ad,de,ae->a", phi, np.linalg.inv(gram), phi))
        center = phi @ theta
        width = xi + beta * norms
        return center - width, center + width, xi, sigma

    def intervals(self) -> tuple[np.ndarray, np.ndarray, dict]:
        lo_m, hi_m, xi, sigma = self.model_intervals()
        lo_cs, hi_cs = self.cs.all_bounds()  # [0, 1] for unpulled arms
        lo, hi = np.maximum(lo_m, lo_cs), np.minimum(hi_m, hi_cs)
        conflict = lo > hi  # the model interval misses the CS: trust the assumption-free one
        lo, hi = np.where(conflict, lo_cs, lo), np.where(conflict, hi_cs, hi)
        return np.clip(lo, 0, 1), np.clip(hi, 0, 1), {"xi": xi, "sigma": sigma, "conflicts": int(conflict.sum())}

    def frontier(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, int, int, float]:
        """S = the m best midpoints; its weakest lower bound, the strongest upper bound outside it, and the
        certificate's gap = UCB(strongest) - LCB(weakest)."""
        top = np.argsort(-(lo + hi), kind="stable")[: self.cfg.m]
        rest = np.setdiff1d(np.arange(self.k), top)
        weakest, strongest = int(top[np.argmin(lo[top])]), int(rest[np.argmax(hi[rest])])
        return top, weakest, strongest, float(hi[strongest] - lo[weakest])

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> PacResult:
        cfg, k = self.cfg, self.k
        trace, rounds, stopped_by = [], 0, "max_rounds"
        info: dict = {}
        top = np.arange(cfg.m)
        try:
            for arm in self.rng.choice(k, min(cfg.cold_start, k), replace=False):
                self._pull(int(arm))
            for _ in range(cfg.audits_at_start):
                self._audit()
            self._refresh_features()
            while rounds < cfg.max_rounds:
                rounds += 1
                if self.since_refresh >= max(cfg.refresh_every, 0.1 * self.pulls):
                    self._refresh_features()
                lo, hi, info = self.intervals()
                top, weakest, strongest, gap = self.frontier(lo, hi)
                info = {**info, "gap_index": gap, "audits": len(self.audits)}
                trace.append({"round": rounds, "pulls": self.pulls, **info, **truth_fields(self.env, lo, hi, top)})
                if gap <= cfg.epsilon:
                    stopped_by = "certified"
                    break
                audit_due = len(self.audits) < min(cfg.max_audits, cfg.audit_share * self.pulls)
                if not (audit_due and self._audit()):
                    self._pull(weakest)
                    self._pull(strongest)
        except BudgetExhausted:
            stopped_by = "budget"
        except OutOfPulls:
            stopped_by = "max_pulls"
        if stopped_by != "certified" and self.pulls:
            if self.phi is None:
                self._refresh_features()
            lo, hi, info = self.intervals()
            top, _, _, gap = self.frontier(lo, hi)
            info = {**info, "gap_index": gap, "audits": len(self.audits)}
        return PacResult(top_m=[int(a) for a in top], pulls=self.pulls, rounds=rounds, stopped_by=stopped_by,
                         trace=trace, coverage=trace_coverage(trace), certificate=info,
                         seen=[int(a) for a in np.flatnonzero(self.stats.n)])
