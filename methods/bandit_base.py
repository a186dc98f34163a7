"""Glue between the Selector contract and the bandit core: arms, features, environments, rescoring."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bench.errors import BudgetExhausted, FitFailed
from bench.items import Item
from dearicl.arms import ArmSet, arm_embeddings, build_arms
from dearicl.bandit import BanditConfig, BanditResult, GapIndexTopM
from dearicl.environments import OracleEnvironment
from dearicl.pac import CertifiedTopM, PacConfig, PacResult
from dearicl.surrogates import LinearSurrogate, NeuralConfig, NeuralSurrogate
from methods.base import FitContext, Selector


@dataclass
class Prepared:
    arms: ArmSet
    demo_emb: np.ndarray  # H(v; w) of every pool item
    val_emb: np.ndarray  # H(v) of every validation item
    env: OracleEnvironment


def prepare(ctx: FitContext, n_arms: int) -> Prepared:
    demo_emb = ctx.encoder.encode_items(ctx.pool, with_output=True)
    val_emb = ctx.encoder.encode_items(ctx.validation)
    if ctx.arms is None:
        arms = build_arms(demo_emb, n_arms, ctx.k, ctx.seed)
    else:  # the arms a reward table recorded: the bandit's own randomness still follows the seed
        arms = ArmSet(members=np.asarray(ctx.arms), clusters=np.zeros(len(ctx.pool), dtype=np.int64))
    return Prepared(arms, demo_emb, val_emb, OracleEnvironment(ctx.oracle, ctx.pool, arms, ctx.validation))


def rescore(env: OracleEnvironment, candidates: list[int], observed: dict[int, list[float]]) -> int:
    """Pull each candidate once more on validation (budget permitting); best mean of all its pulls."""
    for arm in candidates:
        try:
            observed.setdefault(arm, []).append(float(np.mean(env.pull(arm))))
        except BudgetExhausted:
            break
    scored = [a for a in candidates if observed.get(a)]
    if not scored:
        return candidates[0]
    return max(scored, key=lambda a: float(np.mean(observed[a])))


def observed_rewards(env: OracleEnvironment, oracle) -> dict[int, list[float]]:
    """Mean validation reward of every pull made so far, per arm (from the oracle's history)."""
    index = {tuple(env.demos(a)[i].id for i in range(env.arm_set.members.shape[1])): a for a in range(env.n_arms)}
    out: dict[int, list[float]] = {}
    for pull in oracle.history:
        arm = index.get(pull.demo_ids)
        if arm is not None:
            out.setdefault(arm, []).append(float(np.mean(pull.rewards)))
    return out


class BanditSelector(Selector):
    """Common parameters and bookkeeping of the bandit selectors (CASE and DEARICL families)."""

    surrogate_kind = "neural"  # or "linear"

    def __init__(self, k: int = 5, n_arms: int = 100, m: int = 10, challengers: int = 5, epsilon: float = 0.1,
                 delta: float = 0.05, rule: str = "greedy", cold_start: int | str = 5, max_pulls: int | None = None,
                 beta: str = "heuristic", sigma: float = 0.5, hidden: tuple[int, ...] = (256, 128),
                 dropout: float = 0.1, lr: float = 1e-3, epochs_per_round: int = 4, mc_passes: int = 256,
                 tau: float = 1.0, patience: int = 0, batch_size: int = 16, estimate: str = "dropout-off",
                 width_schedule: str = "constant", log_k: str = "compared", mc_draws: str = "per-call"):
        super().__init__(k)
        self.patience = patience  # 0: Algorithm 1's gap rule alone; CASE's script also waits 20 rounds
        self.n_arms, self.m, self.challengers, self.epsilon, self.delta = n_arms, m, challengers, epsilon, delta
        self.rule, self.cold_start, self.max_pulls, self.beta, self.sigma = rule, cold_start, max_pulls, beta, sigma
        # the surrogate's knobs (dearicl/surrogates.py lists which the paper states); an unknown name fails here
        self.neural = NeuralConfig(hidden=tuple(hidden), dropout=dropout, lr=lr, epochs_per_round=epochs_per_round,
                                   mc_passes=mc_passes, tau=tau, batch_size=batch_size, estimate=estimate,
                                   width_schedule=width_schedule, log_k=log_k, mc_draws=mc_draws)

    def selection_call_bound(self, n_val: int, n_test: int) -> int | None:
        """max_pulls pulls, plus one rescoring pull of each of the m returned arms (static selectors), each one
        call per validation item; the gap rule alone sets no bound."""
        return None if self.max_pulls is None else (self.max_pulls + self.m) * n_val

    def bandit_config(self, ctx: FitContext, m: int | None = None, **overrides) -> BanditConfig:
        cfg = BanditConfig(m=m or self.m, challengers=self.challengers, epsilon=self.epsilon, delta=self.delta,
                           rule=self.rule, cold_start=self.cold_start, max_pulls=self.max_pulls,
                           patience=self.patience, seed=ctx.seed)
        for key, value in overrides.items():
            setattr(cfg, key, value)
        return cfg

    def linear_surrogate(self, features: np.ndarray) -> LinearSurrogate:
        return LinearSurrogate(features, sigma=self.sigma, delta=self.delta, beta=self.beta)

    def neural_surrogate(self, prep: Prepared, seed: int) -> NeuralSurrogate:
        cfg = NeuralConfig(**{**asdict(self.neural), "seed": seed})
        return NeuralSurrogate(prep.val_emb, arm_embeddings(prep.arms, prep.demo_emb), delta=self.delta, config=cfg)

    def top_m_size(self, n_arms: int) -> int:
        """m, lowered on a small pool so that the top m and its challengers leave an arm outside them."""
        return min(self.m, max(1, n_arms - self.challengers - 1))

    def run_bandit(self, ctx: FitContext, prep: Prepared, surrogate, **overrides) -> BanditResult:
        m = self.top_m_size(len(prep.arms))
        self.result_ = GapIndexTopM(prep.env, surrogate, self.bandit_config(ctx, m=m, **overrides)).run()
        return self.result_

    def start_neural(self, ctx: FitContext) -> Prepared:
        """Arms and an untrained neural surrogate: the shared start of every DEARICL selector."""
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        self.surrogate_ = self.neural_surrogate(prep, ctx.seed)
        self.encoder_ = ctx.encoder
        return prep

    def fit_neural(self, ctx: FitContext, **overrides) -> BanditResult:
        """Arms, the neural surrogate and one bandit run."""
        prep = self.start_neural(ctx)
        return self.run_bandit(ctx, prep, self.surrogate_, **overrides)

    def best_for_query(self, query: Item, candidates: np.ndarray) -> list[Item]:
        """The demonstrations of the candidate arm the trained surrogate scores highest for this query."""
        scores = self.candidate_scores(query, candidates)
        return self.demos_of(int(candidates[int(np.argmax(scores))]))

    def candidate_scores(self, query: Item, candidates: np.ndarray) -> np.ndarray:
        """The trained surrogate's score of each candidate arm for this query (what the per-query choice maximises)."""
        return np.asarray(self.surrogate_.rank_scores(self.encoder_.encode_items([query])[0], candidates))

    def require_pulls(self, result: BanditResult) -> None:
        """A surrogate that saw no reward is untrained: refuse to select with it."""
        if result.pulls == 0:
            raise FitFailed(f"{self.name}: no arm was pulled before the budget ended, so the {self.surrogate_kind} "
                            "surrogate is untrained; raise --llm-budget")

    def warn_if_uncertified(self, result) -> None:
        """A certified search that stopped (budget, max_pulls) before its certificate held says so."""
        if result.stopped_by == "model-stop":
            self.warn(f"stopped by the model intervals after {result.pulls} pulls (stop=\"model\"): not a "
                      "certificate, the returned arms are not certified epsilon-good")
        elif result.stopped_by != "certified":
            self.warn(f"stopped by {result.stopped_by} after {result.pulls} pulls before the certificate held: "
                      "the returned arms are not certified epsilon-good")

    def settings(self) -> dict:
        """The bandit's stop rule and hyperparameters, for the report's settings list."""
        rule = "gap index <= epsilon" + (f" and U_t unchanged for {self.patience} rounds" if self.patience else "")
        return {"stop_rule": rule, "epsilon": self.epsilon, "delta": self.delta, "m": self.m,
                "challengers": self.challengers, "n_arms": self.n_arms, "cold_start": self.cold_start,
                "max_pulls": self.max_pulls, "selection_rule": self.rule, "surrogate": self.surrogate_kind}

    def trace(self) -> list[dict]:
        result = getattr(self, "result_", None)
        if result is None:
            return []
        summary = {"summary": True, "pulls": result.pulls, "rounds": result.rounds, "stopped_by": result.stopped_by,
                   "surrogate": self.surrogate_kind, "settings": self.settings(), **self.trace_extra(result)}
        return result.trace + [summary]

    def scale(self) -> dict:
        result = getattr(self, "result_", None)
        if result is None:
            return {}
        return {"arms": len(self.prep_.arms), "pulls": result.pulls, "rounds": result.rounds,
                "validation items a pull": len(self.prep_.env.validation)}

    def trace_extra(self, result) -> dict:
        """More fields for the trace's summary row."""
        return {}

    def demos_of(self, arm: int) -> list[Item]:
        return self.prep_.env.demos(arm)


class PacSelector(BanditSelector):
    """dearicl-pac in the harness: the certified top-m search of dearicl/pac.py on the LLM's rewards."""

    table_group = "beyond"

    def __init__(self, audits_at_start: int = 10, audit_share: float = 0.1, max_audits: int = 20,
                 feature_dim: int = 4, stop: str = "sequences", **bandit):
        super().__init__(**bandit)
        self.pac = dict(audits_at_start=audits_at_start, audit_share=audit_share, max_audits=max_audits,
                        feature_dim=feature_dim, stop=stop)
        PacConfig(**self.pac)  # a bad setting is a one-line error before any model loads

    def fit_pac(self, ctx: FitContext) -> PacResult:
        prep = self.start_neural(ctx)
        m = min(self.m, max(1, len(prep.arms) - 1))
        cfg = PacConfig(m=m, epsilon=self.epsilon, delta=self.delta, cold_start=self.cold_start,
                        max_pulls=self.max_pulls, seed=ctx.seed, **self.pac)
        self.result_ = result = CertifiedTopM(prep.env, self.surrogate_, cfg).run()
        self.require_pulls(result)
        self.warn_if_uncertified(result)
        return result

    def settings(self) -> dict:
        rule = ("certified: min LCB(S) >= max UCB(outside) - epsilon on the confidence sequences"
                if self.pac["stop"] == "sequences" else
                "model stop (not a certificate): min lo(S) >= max hi(outside) - epsilon on the model intervals")
        return {**super().settings(), "stop_rule": rule, "surrogate": "neural + linear head", **self.pac}

    def trace_extra(self, result) -> dict:
        return {"surrogate": "neural + linear head", "certificate": result.certificate}
