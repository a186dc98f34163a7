"""dearicl-pac: the neural surrogate proposes and ranks arms; the stop is an (epsilon, delta) certificate.

Every arm a has two intervals for its true mean:
- confidence sequence (pulled arms; [0, 1] before the first pull): by default the empirical-Bernstein sequence
  on the per-query rewards (`cs`, dearicl/confidence.py), anytime valid for ANY rewards in [0, 1] that are
  independent across queries and pulls, whatever rule chose the pulls;
- model interval (every arm): f_a +- (xi + beta ||phi_a||_{V^-1}). phi_a are the network's last-layer features
  averaged over the validation queries, reduced to `feature_dim` SVD directions plus an intercept and frozen
  between retrainings; f = phi theta is a ridge head on the observed pull means (Neural-LinUCB style).
  xi is the largest leave-one-out error of the head on the AUDIT arms, drawn uniformly at random and never shown
  to the network; beta uses a per-pull noise level from repeated pulls and a union over the arms.

`stop="sequences"` (the default) certifies: the stop reads the confidence sequences only, each at delta / K (a
union bound over the arms), so the guarantee needs no assumption about the network. S = the m arms with the
highest midpoints of the combined interval (the sequence intersected with the model interval); the run stops
when min_{a in S} LCB_a >= max_{b not in S} UCB_b - epsilon. If every sequence holds (probability >= 1 - delta),
every arm of S is then within epsilon of the true m-th best, for ANY choice of S and of the pulls
(dearicl/README.md gives the argument). The network only decides where to look: which arms form S, and, among
the outsiders whose upper bounds tie (every unpulled arm has 1), which is pulled first (the highest model upper
bound). `coverage` counts the rounds in which every arm's true mean lies in its sequence's interval.

`split="lucb++"` (with stop="sequences") reads each arm's lower side from a one-sided sequence at
delta / (2 (K - m)) and its upper side from one at delta / (2 m). The proof needs only those sides: if a returned
a has mu_a < mu_(m) - epsilon, a is outside every true top-m set T*, and since |S| = m some b in T* is outside S;
then L_a <= mu_a (a's lower side, K - m arms outside T*) and U_b >= mu_b >= mu_(m) (b's upper side, m arms in T*),
while the stop said L_a >= U_b - epsilon: mu_a >= mu_(m) - epsilon, a contradiction. This holds for ANY S, so the
network still only chooses where to look. Its `coverage` is of that one-sided event (certificate_covers).

`stop="model"` is the earlier rule, kept to compare: it stops on the combined intervals (sequences at
delta / (2K)). xi is a point estimate over at most 20 audit arms, recomputed every round, and beta is a
fixed-design bound that ignores the adaptive design, so the model interval is NOT a valid bound: its measured
coverage on the simulated families was 0.26-0.44 (issue 39). Its stop is reported as "model-stop", never as
certified.

Sampling: a share of pulls go to uniformly random audit arms (they calibrate xi); the others follow LUCB
(Kalyanakrishnan et al. 2012): the member of S with the lowest lower bound and the outsider with the highest
upper bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import chi2

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import (FIXED_SET_SEQUENCES, ArmStats, OutOfPulls, confidence_sequence, trace_coverage,
                                trace_event_held, truth_fields)


STOPS = ("sequences", "model")


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
    stop: str = "sequences"  # "sequences": a certificate; "model": the earlier, uncertified model-interval stop
    split: str = "uniform"  # the sequences' delta: "uniform" (delta / K, both sides) or "lucb++" (one-sided, see below)
    max_pulls: int | None = None
    max_rounds: int = 100_000
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.delta < 1 or self.epsilon < 0:
            raise ConfigError(f"dearicl-pac: delta must be in (0, 1) and epsilon >= 0, got {self.delta}, "
                              f"{self.epsilon}")
        if self.audits_at_start < 2 or not 0 <= self.audit_share < 1:
            raise ConfigError("dearicl-pac: audits_at_start must be >= 2 and audit_share in [0, 1)")
        if self.stop not in STOPS:
            raise ConfigError(f"dearicl-pac: stop must be one of {', '.join(STOPS)}, got {self.stop!r}")
        if self.split not in ("uniform", "lucb++") or self.split == "lucb++" and self.stop != "sequences":
            raise ConfigError(f"dearicl-pac: split must be uniform or lucb++ (lucb++ with stop=sequences), got "
                              f"{self.split!r}")
        if self.cs not in FIXED_SET_SEQUENCES:
            raise ConfigError(f"dearicl-pac: cs must be one of {', '.join(FIXED_SET_SEQUENCES)}, got {self.cs!r}")


@dataclass
class PacResult:
    top_m: list[int]  # S, best midpoint first
    pulls: int
    rounds: int
    stopped_by: str  # "certified" | "model-stop" (stop="model": no certificate) | "budget" | "max_pulls" | "max_rounds"
    trace: list[dict] = field(default_factory=list)
    coverage: float | None = None
    event_held: bool | None = None  # every arm's interval held at every round (trace_event_held)
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
        # the sequences carry the whole delta when they alone decide the stop; half of it beside the model interval
        share = 1 if config.stop == "sequences" else 2
        if config.split == "lucb++":  # members' lower sides outside T*, outsiders' upper sides inside it
            self.cs = confidence_sequence(config.cs, k, config.delta / (2 * (k - config.m)), one_sided=True)
            self.upper_cs = confidence_sequence(config.cs, k, config.delta / (2 * config.m), one_sided=True)
        else:
            self.cs = confidence_sequence(config.cs, k, config.delta / (share * k))
            self.upper_cs = self.cs
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
        if self.upper_cs is not self.cs:
            self.upper_cs.add(arm, rewards)
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

    def frontier(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, int, int, float, np.ndarray,
                                                                np.ndarray]:
        """S = the m best midpoints of the combined intervals; the stop's intervals (the sequences alone under
        stop="sequences"); S's weakest member and the strongest outsider by them, ties broken by the combined
        intervals (the network's say on where to look); and the stop's gap = UCB(strongest) - LCB(weakest)."""
        top = np.argsort(-(lo + hi), kind="stable")[: self.cfg.m]
        rest = np.setdiff1d(np.arange(self.k), top)
        if self.cfg.stop == "sequences":
            stop_lo, stop_hi = (np.clip(b, 0, 1) for b in self.cs.all_bounds())
            if self.upper_cs is not self.cs:
                stop_hi = np.clip(self.upper_cs.all_bounds()[1], 0, 1)
        else:
            stop_lo, stop_hi = lo, hi
        weakest = int(top[np.lexsort((lo[top], stop_lo[top]))[0]])
        strongest = int(rest[np.lexsort((-hi[rest], -stop_hi[rest]))[0]])
        return top, weakest, strongest, float(stop_hi[strongest] - stop_lo[weakest]), stop_lo, stop_hi

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
                top, weakest, strongest, gap, stop_lo, stop_hi = self.frontier(lo, hi)
                info = {**info, "gap_index": gap, "audits": len(self.audits)}
                trace.append({"round": rounds, "pulls": self.pulls, **info,
                              **truth_fields(self.env, stop_lo, stop_hi, top,
                                             m=cfg.m if cfg.split == "lucb++" else None)})
                if gap <= cfg.epsilon:
                    stopped_by = "certified" if cfg.stop == "sequences" else "model-stop"
                    break
                audit_due = len(self.audits) < min(cfg.max_audits, cfg.audit_share * self.pulls)
                if not (audit_due and self._audit()):
                    self._pull(weakest)
                    self._pull(strongest)
        except BudgetExhausted:
            stopped_by = "budget"
        except OutOfPulls:
            stopped_by = "max_pulls"
        if stopped_by not in ("certified", "model-stop") and self.pulls:
            if self.phi is None:
                self._refresh_features()
            lo, hi, info = self.intervals()
            top, _, _, gap, _, _ = self.frontier(lo, hi)
            info = {**info, "gap_index": gap, "audits": len(self.audits)}
        return PacResult(top_m=[int(a) for a in top], pulls=self.pulls, rounds=rounds, stopped_by=stopped_by,
                         trace=trace, coverage=trace_coverage(trace), event_held=trace_event_held(trace), certificate=info,
                         seen=[int(a) for a in np.flatnonzero(self.stats.n)])
