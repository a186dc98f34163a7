"""The gap-index top-m loop (the paper's Algorithm 1), shared by CASE and DEARICL.

Only the surrogate (estimate + confidence width) differs between the two; arms, challenger
refresh, frontier, selection rule, stopping rule and the per-round trace are the same code.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import trace_coverage, trace_event_held, true_simple_regret
from dearicl.surrogates import Surrogate

RULES = ("greedy", "variance", "both", "random")


class Environment(Protocol):
    """Arms and a way to pull them. `true_means` is known only in simulated environments."""

    n_arms: int
    true_means: np.ndarray | None

    def pull(self, arm: int) -> np.ndarray:
        """Rewards of one arm on every validation query (may raise BudgetExhausted)."""

    def llm_calls(self) -> int: ...

    def llm_seconds(self) -> float: ...


@dataclass
class BanditConfig:
    m: int = 10  # |U_t|
    challengers: int = 5  # m' = |C_t|
    epsilon: float = 0.1
    delta: float = 0.05
    rule: str = "greedy"  # greedy | variance | both | random (the random-exploration ablation)
    cold_start: int | str = 5  # random arms pulled before the loop; "all" pulls every arm once (GIFA)
    max_pulls: int | None = None
    max_rounds: int = 10_000
    patience: int = 0  # also require U_t unchanged for this many rounds before stopping (CASE's script: 20)
    seed: int = 0

    def __post_init__(self):
        if self.rule not in RULES:
            raise ConfigError(f"unknown selection rule '{self.rule}'; choose one of {', '.join(RULES)}")


@dataclass
class BanditResult:
    top_m: list[int]  # U_T ordered by estimated mean, best first
    seen: list[int]  # every arm that was in some U_t or C_t (DEARICL-dynamic ranks these)
    pulls: int
    rounds: int
    stopped_by: str  # "gap" | "budget" | "max_pulls" | "max_rounds"
    trace: list[dict] = field(default_factory=list)
    pulled: dict[int, int] = field(default_factory=dict)  # arm -> number of pulls
    coverage: float | None = None  # share of rounds whose width covered every true gap (known truth only)
    event_held: bool | None = None  # the widths covered at every round (trace_event_held): a model's intervals, no proof


def gaps_covered(estimates: np.ndarray, truth: np.ndarray, widths: np.ndarray) -> bool:
    """Every off-diagonal |(est_i - est_j) - (true_i - true_j)| <= widths[i, j]."""
    error = np.abs((estimates[:, None] - estimates[None, :]) - (truth[:, None] - truth[None, :]))
    off = ~np.eye(len(estimates), dtype=bool)
    return bool(np.all(error[off] <= widths[off] + 1e-12))


class GapIndexTopM:
    def __init__(self, env: Environment, surrogate: Surrogate, config: BanditConfig):
        k = env.n_arms
        if config.m >= k:
            raise ConfigError(f"top-m needs more arms than m={config.m} (have {k})")
        self.env, self.s, self.cfg = env, surrogate, config
        self.rng = np.random.default_rng(config.seed)
        self.pulls = 0
        self.pulled: dict[int, int] = {}
        self.observed_sum: dict[int, float] = {}
        self.t = 0

    # ---- pulling ------------------------------------------------------------------------------
    def _pull(self, arm: int) -> None:
        rewards = np.asarray(self.env.pull(arm), dtype=np.float64)
        self.s.observe(arm, rewards)
        self.pulls += 1
        self.pulled[arm] = self.pulled.get(arm, 0) + 1
        self.observed_sum[arm] = self.observed_sum.get(arm, 0.0) + float(rewards.mean())

    def _budget_left(self) -> bool:
        return self.cfg.max_pulls is None or self.pulls < self.cfg.max_pulls

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> BanditResult:
        cfg, k = self.cfg, self.env.n_arms
        order = self.rng.permutation(k)
        upper = order[: cfg.m].copy()  # U_0: random m arms
        n_ch = min(cfg.challengers, k - cfg.m)
        chall = order[cfg.m: cfg.m + n_ch].copy()  # C_0
        seen = set(upper.tolist()) | set(chall.tolist())
        trace: list[dict] = []
        stopped_by = "max_rounds"
        unchanged, previous = 0, None
        try:
            cold = list(range(k)) if cfg.cold_start == "all" else self.rng.choice(k, int(cfg.cold_start), replace=False).tolist()
            for arm in cold:
                if not self._budget_left():
                    break
                self._pull(int(arm))
            self.s.update()
            while self.t < cfg.max_rounds:
                self.t += 1
                began, llm_before, calls_before = time.perf_counter(), self.env.llm_seconds(), self.env.llm_calls()
                # (a, b) swap the weakest of U with the strongest challenger when it looks better
                mu_u, mu_c = self.s.means(upper), self.s.means(chall)
                weak, strong = int(np.argmin(mu_u)), int(np.argmax(mu_c))
                if mu_c[strong] >= mu_u[weak]:
                    upper[weak], chall[strong] = chall[strong], upper[weak]
                # (c) fresh random arms outside U and C; keep the top m' by estimated mean
                outside = np.setdiff1d(np.arange(k), np.concatenate([upper, chall]))
                if len(outside):
                    fresh = self.rng.choice(outside, min(n_ch, len(outside)), replace=False)
                    pool = np.concatenate([chall, fresh])
                    chall = pool[np.argsort(-self.s.means(pool), kind="stable")[:n_ch]]
                seen |= set(chall.tolist())
                current = frozenset(upper.tolist())
                unchanged = unchanged + 1 if current == previous else 0
                previous = current
                # (d) ambiguity frontier: b_t = argmax_b max_c B(c, b); ch_t = argmax_c B(c, b_t)
                gap = self.gap_matrix(chall, upper)  # [C, U]: B(c, b)
                b_idx = int(np.argmax(gap.max(axis=0)))
                c_idx = int(np.argmax(gap[:, b_idx]))
                b_t, ch_t, index = int(upper[b_idx]), int(chall[c_idx]), float(gap[c_idx, b_idx])
                row = {"round": self.t, "gap_index": index, "b": b_t, "ch": ch_t, "pulls": self.pulls,
                       "simple_regret": self.simple_regret(upper), "regret_kind": self.regret_kind()}
                if self.env.true_means is not None:
                    row["covered"] = self.covered(np.concatenate([upper, chall]))
                if index <= cfg.epsilon and self.pulls > 0 and unchanged >= cfg.patience:
                    stopped_by = "gap"
                    trace.append(self._finish_row(row, began, llm_before, calls_before))
                    break
                if not self._budget_left():
                    stopped_by = "max_pulls"
                    trace.append(self._finish_row(row, began, llm_before, calls_before))
                    break
                # (e) acquire feedback and retrain
                arms = ([int(self.rng.integers(k))] if cfg.rule == "random" else self.s.pick(b_t, ch_t, cfg.rule))
                for arm in arms:
                    self._pull(arm)
                self.s.update()
                self.s.end_round(np.unique(np.concatenate([upper, chall])))
                trace.append(self._finish_row(row, began, llm_before, calls_before))
        except BudgetExhausted:
            stopped_by = "budget"
            if self.pulls:
                self.s.update()
        final = upper[np.argsort(-self.s.means(upper), kind="stable")]
        return BanditResult(top_m=final.tolist(), seen=sorted(seen), pulls=self.pulls, rounds=self.t,
                            stopped_by=stopped_by, trace=trace, pulled=dict(self.pulled),
                            coverage=trace_coverage(trace), event_held=trace_event_held(trace))

    def _finish_row(self, row: dict, began: float, llm_before: float, calls_before: int) -> dict:
        wall = time.perf_counter() - began
        llm = self.env.llm_seconds() - llm_before
        row.update(pulls_after=self.pulls, llm_calls=self.env.llm_calls() - calls_before,
                   llm_calls_total=self.env.llm_calls(), seconds=round(wall, 6),
                   seconds_outside_llm=round(max(0.0, wall - llm), 6))
        return row

    def gap_matrix(self, cols_first: np.ndarray, rows_second: np.ndarray) -> np.ndarray:
        """B(i, j) = mu_i - mu_j + W(i, j) for i in the first set, j in the second."""
        mu_i, mu_j = self.s.means(cols_first), self.s.means(rows_second)
        return mu_i[:, None] - mu_j[None, :] + self.s.widths(cols_first, rows_second, max(self.pulls, 1))

    def covered(self, arms: np.ndarray) -> bool:
        """Whether |estimated gap - true gap| <= W_t(i, j) for every pair i != j of `arms` (U_t and C_t)."""
        arms = np.unique(arms)
        est, truth = self.s.means(arms), self.env.true_means[arms]
        return gaps_covered(est, truth, self.s.widths(arms, arms, max(self.pulls, 1)))

    # ---- simple regret ------------------------------------------------------------------------
    def regret_kind(self) -> str:
        return "true" if self.env.true_means is not None else "observed"

    def simple_regret(self, upper: np.ndarray) -> float:
        """Mean reward of the best arms minus that of U_t (>= 0).

        With known truth (simulated environments): the true top-m against U_t, in true means.
        Otherwise only observations count: U_t's j pulled members against the best j observed arm
        means among all pulled arms (NaN while no member of U_t has been pulled).
        """
        if self.env.true_means is not None:
            return true_simple_regret(self.env.true_means, upper)
        observed = {a: self.observed_sum[a] / n for a, n in self.pulled.items()}
        mine = [observed[int(a)] for a in upper if int(a) in observed]
        if not mine:
            return float("nan")
        best = np.sort(np.array(list(observed.values())))[::-1][: len(mine)]
        return float(best.mean() - np.mean(mine))
