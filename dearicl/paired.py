"""Paired top-m identification: LUCB on one-sided confidence sequences of the arms' paired differences.

Arms evaluated on the same queries share each query's difficulty. `PairedLUCB` compares two arms through the
differences of their rewards on the same queries, pull s of one arm with pull s of the other: on the fixed
validation set (every pull covers the same items) or, under the population protocol of a recorded table, batch s of
the one shuffle every arm follows (common random numbers). A difference X_a - X_b lies in [-1, 1]; Y = (X_a - X_b +
1) / 2 goes into the same sequences as single arms use (per-query empirical Bernstein on the fixed set, the
without-replacement betting sequence on a population), and 2 L_Y - 1 is a lower bound on mu_a - mu_b.

The certificate. Each round J is the empirical top m (by each arm's own mean) and the run stops once L(j, o) > -eps
for every j in J and o outside J, where L(j, o) is the larger of two lower bounds on mu_j - mu_o: the paired one, and
LCB_j - UCB_o from per-arm sequences (those of `lucb`, at delta / (2K) each). Half of delta goes to the arms' sequences
(all hold with probability >= 1 - delta/2), half to the pairs, as follows. If some returned j had mu_j < mu_(m) - eps, then j is outside a true top-m set T,
and some o in T is outside J (|J| = |T| = m), with mu_j - mu_o < -eps: the lower side of pair (j, o)'s sequence
failed. Only ordered pairs (outside T, inside T) can fail that way, m (K - m) of them, fixed by the truth: each
pair's one-sided sequence at level delta / (2 m (K - m)) makes the pairs' share at most delta / 2, and the error
probability is at most delta, at any stopping time (the sequences are time-uniform). Pairing pays where arms share
each query's difficulty; where they do not, the per-arm bound decides, at the cost of half the delta. This is LUCB++'s observation (Simchowitz, Jamieson & Recht 2017: an error
needs one arm from outside the top and one from inside, so the two sides need not share one union bound) applied to
pairs rather than to single arms. A two-sided sequence on (a, b) serves both ordered pairs: the per-query Bernstein
sequence at 2 x level (each side gets level), the betting sequence at level (its two sides together fail with
probability <= level).

Sampling: the pair with the smallest lower bound; of its two arms, the one with fewer pulls is pulled (both when
equal), which extends their paired sequence by one pull without pulling the other arm past it.
"""
from __future__ import annotations

import numpy as np

from bench.errors import BudgetExhausted, ConfigError
from dearicl.confidence import (LUCBResult, OutOfPulls, QueryBernsteinCS, WoRBettingCS, confidence_sequence, trace_coverage,
                                trace_event_held)

PAIRED_SEQUENCES = ("query-bernstein", "wor")
# the without-replacement sequence's bet cap on paired differences: (X_a - X_b + 1) / 2 sits near 1/2 with a small
# variance, where the plug-in bet exceeds 1/2 / centre and the default cap, not the variance, sets the width (one
# difficulty instance, 1000-item pool: 1882, 1445, 1302, 1259 pulls at caps 0.5, 0.75, 0.9, 0.95; per-arm sequences
# keep 1/2, with which lucb-wor took 2290 pulls against 3030 at 0.9). Any cap below 1 is valid.
PAIR_BET_CAP = 0.9


class PairSequences:
    """Two-sided sequences on (mu_a - mu_b + 1) / 2 for unordered pairs, created when first asked and fed every
    paired pull so far (a sequence's validity is over its whole stream, whenever it is read)."""

    def __init__(self, kind: str, level: float, population: int | None):
        if kind not in PAIRED_SEQUENCES:
            raise ConfigError(f"paired sequences are {', '.join(PAIRED_SEQUENCES)}, got {kind!r}")
        if (kind == "wor") != (population is not None):
            raise ConfigError("paired: cs wor goes with an environment that samples a finite population without "
                              "replacement (--protocol population), query-bernstein with a fixed validation set")
        self.kind, self.level, self.population = kind, level, population
        self.pulls: dict[int, list[np.ndarray]] = {}
        self.sequences: dict[tuple[int, int], list] = {}  # (a, b), a < b -> [sequence, paired pulls fed]
        self.kept: np.ndarray | None = None  # [arms, arms]: lower(j, o) as last read, at kept_at paired pulls
        self.kept_at: np.ndarray | None = None

    def add(self, arm: int, rewards: np.ndarray) -> None:
        self.pulls.setdefault(arm, []).append(rewards)

    def _sequence(self, a: int, b: int):
        if (a, b) not in self.sequences:
            cs = (QueryBernsteinCS(1, 2.0 * self.level) if self.kind == "query-bernstein"
                  else WoRBettingCS(1, self.level, self.population, bet_cap=PAIR_BET_CAP))
            self.sequences[(a, b)] = [cs, 0]
        entry = self.sequences[(a, b)]
        cs, fed = entry
        paired = min(len(self.pulls.get(a, ())), len(self.pulls.get(b, ())))
        for s in range(fed, paired):
            x, y = self.pulls[a][s], self.pulls[b][s]
            if len(x) != len(y):
                raise ConfigError(f"paired pulls {s} of arms {a} and {b} cover {len(x)} and {len(y)} items: a pair "
                                  "needs both on the same queries")
            cs.add(0, (x - y + 1.0) / 2.0)
        entry[1] = max(fed, paired)
        return cs

    def lower(self, a: int, b: int) -> float:
        """A lower bound on mu_a - mu_b, one-sided at `level`."""
        lo, hi = self._sequence(min(a, b), max(a, b)).all_bounds()
        return 2.0 * float(lo[0]) - 1.0 if a < b else 1.0 - 2.0 * float(hi[0])

    def lower_matrix(self, rows: np.ndarray, cols: np.ndarray, n: np.ndarray) -> np.ndarray:
        """lower(j, o) for every j in rows and o in cols, asking the sequences only for the pairs with a new paired
        pull since they were last read (`n`: each arm's pulls); the others come from the kept matrix."""
        if self.kept is None:
            self.kept = np.full((len(n), len(n)), -np.inf)
            self.kept_at = np.full((len(n), len(n)), -1, dtype=np.int64)
        paired = np.minimum(n[rows][:, None], n[cols][None, :])
        for r, c in zip(*np.nonzero(paired != self.kept_at[np.ix_(rows, cols)])):
            j, o = int(rows[r]), int(cols[c])
            self.kept[j, o], self.kept_at[j, o] = self.lower(j, o), paired[r, c]
        return self.kept[np.ix_(rows, cols)]


class PairedLUCB:
    """Certified top-m identification on paired differences (see the module docstring).

    `split="lucb++"` gives the arms' own sequences LUCB++'s one-sided split of their half of delta. The stop reads
    them only as arm_lower[j] - arm_upper[o], j in the current top, o outside. An error needs a returned j outside a
    true top-m set T* with mu_j < mu_(m) - epsilon; then (pigeonhole) some o in T* is outside the top, and the stop
    said max(pair lower, L_j - U_o) >= -epsilon. If the pair's sequence held, mu_j - mu_o >= -epsilon; if instead the
    arm bound decided, L_j <= mu_j (j's lower side, j not in T*) and U_o >= mu_o (o's upper side, o in T*) give the
    same. So only the K - m lower sides outside T* and the m upper sides inside it must hold: delta / (4 (K - m))
    each and delta / (4 m) each, one-sided, instead of delta / (2K) two-sided for every arm."""

    def __init__(self, env, m: int, epsilon: float = 0.1, delta: float = 0.05, max_pulls: int | None = None,
                 cs: str | None = None, split: str = "uniform"):
        if not 0 < m < env.n_arms:
            raise ConfigError(f"paired lucb: m must be in [1, {env.n_arms - 1}], got {m}")
        if not 0 < delta < 1 or epsilon < 0:
            raise ConfigError(f"paired lucb: delta must be in (0, 1) and epsilon >= 0, got {delta}, {epsilon}")
        population = getattr(env, "population", None)
        kind = cs or ("wor" if population is not None else "query-bernstein")
        self.env, self.m, self.epsilon, self.delta, self.max_pulls = env, m, epsilon, delta, max_pulls
        # half of delta to the arms' own sequences; half to the pairs, of which one (outside, inside) pair of the
        # truth's must fail for an error
        if split not in ("uniform", "lucb++"):
            raise ConfigError(f"paired lucb: split must be one of uniform, lucb++, got {split!r}")
        k = env.n_arms
        if split == "uniform":
            self.arms = confidence_sequence(kind, k, delta / (2 * k), population)
            self.arms_upper = self.arms
        else:  # LUCB++ on the arms' half: lower sides outside T*, upper sides inside it (see the class docstring)
            self.arms = confidence_sequence(kind, k, delta / (4 * (k - m)), population, one_sided=True)
            self.arms_upper = confidence_sequence(kind, k, delta / (4 * m), population, one_sided=True)
        self.split = split
        self.level = delta / (2 * m * (env.n_arms - m))
        self.pairs = PairSequences(kind, self.level, population)
        self.n = np.zeros(env.n_arms, dtype=np.int64)
        self.sums = np.zeros(env.n_arms)
        self.pulls = 0

    def _pull(self, arm: int) -> None:
        if self.max_pulls is not None and self.pulls >= self.max_pulls:
            raise OutOfPulls
        rewards = np.asarray(self.env.pull(arm), dtype=np.float64)
        self.pairs.add(arm, rewards)
        self.arms.add(arm, rewards)
        if self.arms_upper is not self.arms:
            self.arms_upper.add(arm, rewards)
        self.n[arm] += 1
        self.sums[arm] += float(rewards.mean())
        self.pulls += 1

    def _top(self) -> np.ndarray:
        return np.argsort(-(self.sums / np.maximum(self.n, 1)), kind="stable")

    def run(self) -> LUCBResult:
        trace, rounds, stopped_by = [], 0, "certified"
        truth = getattr(self.env, "true_means", None)
        try:
            for arm in range(self.env.n_arms):  # every arm once: no pair is informative before
                self._pull(arm)
            while True:
                rounds += 1
                order = self._top()
                top, rest = order[: self.m], order[self.m:]
                arm_lower, arm_upper = self.arms.all_bounds()
                if self.arms_upper is not self.arms:
                    arm_upper = self.arms_upper.all_bounds()[1]
                lowers = np.maximum(self.pairs.lower_matrix(top, rest, self.n),
                                    arm_lower[top][:, None] - arm_upper[rest][None, :])
                worst = np.unravel_index(int(np.argmin(lowers)), lowers.shape)
                j, o = int(top[worst[0]]), int(rest[worst[1]])
                gap = float(-lowers[worst])  # the largest upper bound on mu_o - mu_j over the pairs
                row = {"round": rounds, "pulls": self.pulls, "gap_index": gap}
                if truth is not None:
                    row.update(self._truth_row(np.asarray(truth), top, rest, lowers))
                trace.append(row)
                if gap < self.epsilon:
                    break
                if self.max_pulls is not None and self.pulls + 1 > self.max_pulls:
                    stopped_by = "max_pulls"
                    break
                behind = min(self.n[j], self.n[o])
                for arm in (j, o):
                    if self.n[arm] == behind:
                        self._pull(arm)
        except BudgetExhausted:
            stopped_by = "budget"
        except OutOfPulls:
            stopped_by = "max_pulls"
        return LUCBResult(top_m=[int(a) for a in self._top()[: self.m]], pulls=self.pulls, rounds=rounds,
                          stopped_by=stopped_by, trace=trace, coverage=trace_coverage(trace),
                          event_held=trace_event_held(trace))

    def _truth_row(self, truth: np.ndarray, top, rest, lowers: np.ndarray) -> dict:
        """Coverage over the pairs the certificate's delta covers: (j outside the true top m, o inside), examined
        this round; simple regret of the current top."""
        best = set(np.argsort(-truth, kind="stable")[: self.m].tolist())
        held = [lowers[r, c] <= truth[j] - truth[o] + 1e-12
                for r, j in enumerate(top) for c, o in enumerate(rest) if j not in best and o in best]
        best_mean = np.sort(truth)[::-1][: self.m].mean()
        return {"covered": bool(all(held)), "simple_regret": float(best_mean - truth[top].mean())}
