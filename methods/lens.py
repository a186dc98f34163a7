"""LENS (Li & Qiu 2023, "Finding Support Examples for In-Context Learning"): task-level support examples.

Follows the authors' code (LeeSureman/ICL_Support_Example: main_for_progressive_examples_selection.py,
main_for_iterative_optimize_train_acc_balance.py, main_for_iterative_optimize_heuristic_score_func.py,
commands/run_filter_and_search.sh).

Stage 1, progressive filtering. Each candidate is scored as a 1-shot prompt by the mean log-likelihood the
LLM gives the gold outputs of a growing random "indication" set (a candidate never indicates itself); the
better half survives and the indication set doubles (start 14), until `keep` (500) remain.

Stage 2, diversity-guided search, evaluated by the LLM:
- features: for every survivor and indication example, (zero-shot loss - loss with the survivor as the one
  demonstration); `feature_mean` = its mean over the indication set, `feature_sim` = cosine similarity of the
  survivors' feature rows; both z-scored globally (one mean and std over all survivors, one over the whole
  similarity matrix, diagonal included), as their `--which_normalization std`;
- a swap proposal replaces one uniformly drawn slot with a survivor drawn by softmax from the `top_sample`
  (4) best by zmean[c] - `diversity` (4) x mean zsim[c, rest of the list];
- the beam is seeded by a heuristic pre-search (beam 16, 20 iterations, from 160 random sets, set score =
  mean zmean + diversity x (- mean zsim over the set, diagonal included)); its sets, best first, fill the
  LLM beam when they share at most `overlap_limit` (4) examples with the union of the sets already taken
  (their `initial_example_idxs_repeat_limit` against `used_example_idxs_set`), so no near-copy gets in; random
  sets fill any shortfall; each seed list is put in random order;
- each of `iterations` (10) rounds: every beam entry spawns `swaps` (6) swap proposals and `shuffles` (2)
  random re-orderings; proposals and the old beam, de-duplicated as ORDERED lists, are scored by the LLM on
  a fixed held-out sample of `heldout` (100) pool items that are not survivors; the best `beam` (8) lists
  form the next beam. Scores are memoised, so a list is evaluated once;
- the result is the best list of the final beam, in its searched order.

Deviations, with reasons:
- scores are log-likelihoods of the task's gold output (rationale + answer, summed over its tokens) in the
  task's prompt, not the normalised label loss of their classification tasks;
- a list's held-out score (`search_metric`) is by default the mean BERTScore reward of the generated
  outputs (`reward`, the DEARICL paper's reward for every selector), where the authors use classification
  accuracy from label losses; `search_metric="loglik"` uses the mean gold-output log-likelihood instead;
- sets are not label-balanced (generation tasks have no labels) and the `direct_plus` calibration of
  classification does not apply;
- when the pool holds no item outside the survivors, the validation items serve as the held-out sample.
Under `--llm-budget`: a filtering round cut short ranks the candidates on what was scored; a search cut
short keeps the best list scored so far; either adds a warning to the result row. With nothing scored
at all the fit fails.
"""
from __future__ import annotations

import numpy as np

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from methods.base import FitContext, Selector, register

SEARCH_METRICS = ("reward", "loglik")


def filtering_schedule(n_candidates: int, indication_size: int, keep: int) -> list[tuple[int, int]]:
    """(indication set size, candidates kept) per filtering round.

    Halve the candidates and double the indication set while the next halving stays above `keep`;
    the last round keeps exactly `keep` (the authors' schedule). No round when n_candidates <= keep.
    """
    rounds: list[tuple[int, int]] = []
    n, size = n_candidates, indication_size
    while n > keep:
        if n // 2 > keep:
            rounds.append((size, n // 2))
            n, size = n // 2, size * 2
        else:
            rounds.append((size, keep))
            break
    return rounds


def zscore(x: np.ndarray) -> np.ndarray:
    """One mean and one standard deviation over the whole array (the authors' `normalize_std`)."""
    std = x.std()
    return (x - x.mean()) / (std if std > 0 else 1.0)


def search_features(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z-scored mean feature per survivor, z-scored cosine similarity matrix) from [survivors, indication]."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    unit = np.divide(features, norms, out=np.zeros_like(features), where=norms > 0)
    return zscore(features.mean(axis=1)), zscore(unit @ unit.T)


def set_score(zmean: np.ndarray, zsim: np.ndarray, members, diversity: float) -> float:
    """The heuristic pre-search's score: mean zmean + diversity * (- mean zsim over the set, diagonal in)."""
    idx = list(members)
    return float(zmean[idx].mean() - diversity * zsim[np.ix_(idx, idx)].mean())


def propose_swap(members: tuple[int, ...], zmean: np.ndarray, zsim: np.ndarray, diversity: float, top_sample: int,
                 rng: np.random.Generator) -> tuple[int, ...] | None:
    """Replace one random slot by a survivor sampled (softmax) from the `top_sample` best for the rest of the list."""
    slot = int(rng.integers(len(members)))
    rest = [m for j, m in enumerate(members) if j != slot]
    fit = zmean - diversity * (zsim[:, rest].mean(axis=1) if rest else 0.0)
    fit[list(members)] = -np.inf
    top = np.argsort(-fit, kind="stable")[:top_sample]
    top = top[np.isfinite(fit[top])]
    if len(top) == 0:  # every survivor is already in the list
        return None
    weights = np.exp(fit[top] - fit[top].max())
    out = list(members)
    out[slot] = int(rng.choice(top, p=weights / weights.sum()))
    return tuple(out)


def heuristic_search(zmean: np.ndarray, zsim: np.ndarray, k: int, diversity: float, beam: int, iterations: int,
                     n_init: int, top_sample: int, rng: np.random.Generator) -> list[tuple[tuple[int, ...], float]]:
    """The LLM-free pre-search over sets (order ignored); every set it scored, best first."""
    n = len(zmean)
    scored: dict[tuple[int, ...], float] = {}

    def add(members) -> tuple[int, ...]:
        key = tuple(sorted(members))
        if key not in scored:
            scored[key] = set_score(zmean, zsim, key, diversity)
        return key

    current = list(dict.fromkeys(add(rng.choice(n, size=k, replace=False).tolist()) for _ in range(n_init)))
    for _ in range(iterations):
        proposals = [add(p) for members in current for _ in range(beam)
                     if (p := propose_swap(members, zmean, zsim, diversity, top_sample, rng)) is not None]
        current = sorted(dict.fromkeys(current + proposals), key=lambda s: -scored[s])[:beam]
    return sorted(scored.items(), key=lambda kv: -kv[1])


def seed_lists(ranked: list[tuple[tuple[int, ...], float]], n: int, k: int, size: int, overlap_limit: int,
               rng: np.random.Generator) -> list[tuple[int, ...]]:
    """`size` seed lists: heuristic sets best first that share at most overlap_limit examples with the UNION of
    the sets already taken (the authors' `used_example_idxs_set`), then random sets; each put in random order."""
    taken: list[tuple[int, ...]] = []
    used: set[int] = set()
    for members, _ in ranked:
        if len(taken) == size:
            break
        if len(set(members) & used) <= overlap_limit:
            taken.append(members)
            used |= set(members)
    tries = 0
    while len(taken) < size and tries < 100 * size:
        tries += 1
        extra = tuple(sorted(rng.choice(n, size=k, replace=False).tolist()))
        if extra not in taken:
            taken.append(extra)
    return [tuple(int(i) for i in rng.permutation(list(t))) for t in taken]


@register("lens")
class Lens(Selector):
    level = "task"
    needs_loglik = True  # scores candidates by the gold output's log-likelihood

    def __init__(self, k: int = 5, indication_size: int = 14, keep: int = 500, max_candidates: int | None = None,
                 diversity: float = 4.0, beam: int = 8, iterations: int = 10, swaps: int = 6, shuffles: int = 2,
                 top_sample: int = 4, heldout: int = 100, search_metric: str = "reward", heuristic_beam: int = 16,
                 heuristic_iterations: int = 20, heuristic_init: int = 160, overlap_limit: int = 4):
        super().__init__(k)
        if min(indication_size, beam, top_sample, heldout, heuristic_beam, heuristic_init) < 1:
            raise ConfigError("lens: indication_size, beam, top_sample, heldout, heuristic_beam and heuristic_init "
                              "must be >= 1")
        if min(iterations, swaps, shuffles, heuristic_iterations, overlap_limit) < 0:
            raise ConfigError("lens: iterations, swaps, shuffles, heuristic_iterations and overlap_limit must be >= 0")
        if keep < k or (max_candidates is not None and max_candidates < k):
            raise ConfigError(f"lens: keep ({keep}) and max_candidates ({max_candidates}) must be at least k ({k})")
        if diversity < 0:
            raise ConfigError(f"lens: diversity must be >= 0, got {diversity}")
        if search_metric not in SEARCH_METRICS:
            raise ConfigError(f"lens: search_metric must be one of {', '.join(SEARCH_METRICS)}, got {search_metric!r}")
        self.indication_size, self.keep, self.max_candidates = indication_size, keep, max_candidates
        self.diversity, self.beam, self.iterations, self.swaps, self.shuffles = (diversity, beam, iterations, swaps,
                                                                                 shuffles)
        self.top_sample, self.heldout, self.search_metric = top_sample, heldout, search_metric
        self.heuristic_beam, self.heuristic_iterations, self.heuristic_init = (heuristic_beam, heuristic_iterations,
                                                                               heuristic_init)
        self.overlap_limit = overlap_limit

    # ---- LLM scores -----------------------------------------------------------------------------
    @staticmethod
    def _continuation(prompt: str, item: Item) -> str:
        return item.gold_output if prompt[-1:].isspace() else " " + item.gold_output

    def _loglik(self, ctx: FitContext, prompts: list[str], targets: list[Item]) -> list[float]:
        """Log-likelihoods of the gold outputs (counted; raises BudgetExhausted past the budget)."""
        return list(ctx.oracle.loglik(prompts, [self._continuation(p, t) for p, t in zip(prompts, targets)]))

    def _score_on(self, ctx: FitContext, candidates: list[int], indication: int) -> None:
        """One indication example against every candidate (a candidate never indicates itself)."""
        task, pool = ctx.task, ctx.pool
        query = task.format_query(pool[indication])
        scored = [c for c in candidates if c != indication]
        prompts = [task.prefix([pool[c]]) + query for c in scored]
        targets = [pool[indication]] * len(scored)
        room = ctx.oracle.remaining
        if room is not None and 0 < room < len(scored):
            # spend what is left on the first candidates; the oracle then refuses the rest (and records it)
            self._store(indication, scored[:room], self._loglik(ctx, prompts[:room], targets[:room]))
        self._store(indication, scored, self._loglik(ctx, prompts, targets))

    def _store(self, indication: int, candidates: list[int], values: list[float]) -> None:
        for c, value in zip(candidates, values):
            self.loglik_.setdefault(c, {})[indication] = value

    def mean_score(self, candidate: int) -> float:
        """Mean log-likelihood over the indication examples this candidate was scored on (-inf if none)."""
        values = self.loglik_.get(candidate)
        return float(np.mean(list(values.values()))) if values else -np.inf

    def _rank(self, candidates: list[int]) -> list[int]:
        means = {c: self.mean_score(c) for c in candidates}
        return sorted(candidates, key=lambda c: -means[c])  # stable: ties keep the seeded order

    # ---- fit --------------------------------------------------------------------------------------
    def fit(self, ctx: FitContext) -> "Lens":
        self.check_pool(ctx)
        rng = np.random.default_rng(ctx.seed)
        n_pool = len(ctx.pool)
        candidates = [int(i) for i in rng.permutation(n_pool)[: self.max_candidates or n_pool]]
        order = [int(i) for i in rng.permutation(n_pool)]  # indication examples are taken in this order
        # Pools at or below `keep` are not filtered but still scored once, for stage 2's features.
        rounds = filtering_schedule(len(candidates), self.indication_size, self.keep) or \
            [(self.indication_size, len(candidates))]
        self.loglik_: dict[int, dict[int, float]] = {}  # candidate -> indication -> loglik
        self.rounds_: list[dict] = []
        self.search_: list[dict] = []
        self.indication_: list[int] = []
        self.list_scores_: dict[tuple[int, ...], float] = {}
        self.stage_ = "filtering"
        try:
            for size, kept in rounds:
                new = order[len(self.indication_):min(size, n_pool)]
                self.rounds_.append({"round": len(self.rounds_), "candidates": list(candidates),
                                     "new_indication": list(new), "kept": kept})
                for i in new:
                    self._score_on(ctx, candidates, i)
                    self.indication_.append(i)
                candidates = self._rank(candidates)[:kept]
                self.rounds_[-1]["llm_calls"] = ctx.oracle.calls
            self.candidates_ = candidates
            self.stage_ = "features"
            self._features(ctx, candidates)
            self.stage_ = "search"
            best = self._search(ctx, candidates, rng)
        except BudgetExhausted:
            best = self._fallback(ctx, candidates)
        self.demos_ = [ctx.pool[self.candidates_[j]] for j in best]
        return self

    def _features(self, ctx: FitContext, candidates: list[int]) -> None:
        """zmean and zsim of stage 2, from the filtering scores and one zero-shot call per indication example."""
        task, pool = ctx.task, ctx.pool
        indication = self.indication_
        zero_shot = np.array(self._loglik(ctx, [task.prefix([]) + task.format_query(pool[i]) for i in indication],
                                          [pool[i] for i in indication]))
        loglik = np.array([[self.loglik_.get(c, {}).get(i, np.nan) for i in indication] for c in candidates])
        features = loglik - zero_shot[None, :]  # zero-shot loss minus loss with the candidate
        known = ~np.isnan(features)
        counts = np.maximum(known.sum(axis=1, keepdims=True), 1)
        row_mean = np.where(known, features, 0.0).sum(axis=1, keepdims=True) / counts
        self.features_ = np.where(known, features, row_mean)  # a candidate's own slot: its mean, neutral
        self.zmean_, self.zsim_ = search_features(self.features_)

    def _heldout(self, ctx: FitContext, candidates: list[int]) -> list[Item]:
        """A fixed sample of pool items outside the survivors (the validation items if there is none)."""
        survivors = set(candidates)
        outside = [i for i in np.random.default_rng(ctx.seed + 100).permutation(len(ctx.pool)) if i not in survivors]
        if not outside:
            if not ctx.validation:
                raise ConfigError("lens: every pool item survived filtering and there are no validation items, so "
                                  "nothing is left to score the search on; lower keep or max_candidates")
            self.warn("every pool item survived filtering: the validation items are the held-out sample")
            return list(ctx.validation)
        if len(outside) < self.heldout:
            self.warn(f"held-out sample of {len(outside)} pool items (fewer than heldout={self.heldout} outside the "
                      "survivors)")
        return [ctx.pool[int(i)] for i in outside[: self.heldout]]

    def _list_score(self, ctx: FitContext, members: tuple[int, ...]) -> float:
        """Held-out score of one ordered list (memoised: each list is evaluated once)."""
        if members not in self.list_scores_:
            demos = [ctx.pool[self.candidates_[j]] for j in members]
            if self.search_metric == "reward":
                value = float(np.mean(ctx.oracle.pull(demos, self.heldout_)))
            else:
                prefix = ctx.task.prefix(demos)
                value = float(np.mean(self._loglik(ctx, [prefix + ctx.task.format_query(h) for h in self.heldout_],
                                                   self.heldout_)))
            self.list_scores_[members] = value
        return self.list_scores_[members]

    def _search(self, ctx: FitContext, candidates: list[int], rng: np.random.Generator) -> tuple[int, ...]:
        """Stage 2: heuristic seeds, then the LLM-evaluated beam search over ordered lists."""
        k = min(self.k, len(candidates))
        ranked = heuristic_search(self.zmean_, self.zsim_, k, self.diversity, self.heuristic_beam,
                                  self.heuristic_iterations, self.heuristic_init, self.top_sample, rng)
        self.seeds_ = seed_lists(ranked, len(candidates), k, self.beam, self.overlap_limit, rng)
        self.heldout_ = self._heldout(ctx, candidates)
        beam = sorted(self.seeds_, key=lambda s: -self._list_score(ctx, s))
        for iteration in range(1, self.iterations + 1):
            proposals = []
            for members in beam:
                proposals += [p for _ in range(self.swaps) if (p := propose_swap(
                    members, self.zmean_, self.zsim_, self.diversity, self.top_sample, rng)) is not None]
                proposals += [tuple(int(i) for i in rng.permutation(list(members))) for _ in range(self.shuffles)]
            pooled = list(dict.fromkeys(beam + proposals))  # ordered lists: an order is a different list
            beam = sorted(pooled, key=lambda s: -self._list_score(ctx, s))[: self.beam]
            self.search_.append({"search_iteration": iteration, "lists_scored": len(self.list_scores_),
                                 "best_score": self.list_scores_[beam[0]], "llm_calls": ctx.oracle.calls})
        return beam[0]

    def _fallback(self, ctx: FitContext, candidates: list[int]) -> tuple[int, ...]:
        """The budget ended: the best list scored so far, else the heuristic's best, else the filtering's top k."""
        if self.list_scores_:
            self.warn(f"--llm-budget ended the search after {len(self.list_scores_)} evaluated lists: the best of "
                      "them is used")
            return max(self.list_scores_, key=self.list_scores_.get)
        if self.stage_ == "search":
            self.warn("--llm-budget ended before any list was evaluated by the LLM: the heuristic's best seed is used")
            return self.seeds_[0]
        if not self.loglik_:
            raise FitFailed("lens: --llm-budget ended before any candidate was scored; raise the budget")
        self.warn(f"--llm-budget ended the {self.stage_} stage: the top {self.k} candidates by the 1-shot scores so "
                  "far are used, best last")
        self.candidates_ = self._rank(candidates)
        return tuple(range(min(self.k, len(candidates))))[::-1]

    def select(self, query: Item) -> list[Item]:
        return list(self.demos_)

    def scale(self) -> dict:
        if not hasattr(self, "rounds_"):
            return {}
        return {"filtering rounds": len(self.rounds_), "candidates kept": len(getattr(self, "candidates_", [])),
                "beam": self.beam, "search iterations": len(self.search_),
                "held-out items": len(getattr(self, "heldout_", []))}

    def trace(self) -> list[dict]:
        rounds = getattr(self, "rounds_", [])
        return [{"round": r["round"], "candidates": len(r["candidates"]), "indication_new": len(r["new_indication"]),
                 "kept": r["kept"], "llm_calls": r.get("llm_calls")} for r in rounds] + list(getattr(self, "search_", []))
