"""lucb-static (beyond the paper): model-free certified top-m identification on the LLM's rewards.

LUCB1 over the arms (dearicl/confidence.py, the reference of `bench simulate`): every arm is pulled once, then
each round pulls the weakest arm of the empirical top m and the strongest arm outside it, until the upper bound
of the one minus the lower bound of the other is below epsilon, with per-arm anytime-valid confidence
sequences at level delta / n_arms (a union bound). No surrogate: the cost of a certificate without a model, to
set beside CASE's and DEARICL's uncertified gap-index stops. The top-m set is re-scored on validation like the
other static bandit selectors, and its best arm is used for every test query. A run that ends (budget,
max_pulls) before the certificate holds says so in its warnings. `paired=True` certifies on paired differences of
the arms' rewards on the same validation items instead (dearicl/paired.py: the per-arm bounds at delta / 2, and
delta / (2 m (K - m)) per ordered pair). `split="lucb++"` reads the members' lower bounds at delta / (2 (K - m)) and the
outsiders' upper bounds at delta / (2 m) (LUCB++), and `sampling="wider"` pulls only the critical pair's arm with the
wider one-sided radius (dearicl/confidence.py: both keep the certificate).
"""
from __future__ import annotations

from bench.errors import FitFailed
from bench.items import Item
from dearicl.confidence import FIXED_SET_SEQUENCES, LUCB, check_lucb_options
from dearicl.paired import PairedLUCB
from methods.bandit_base import BanditSelector, observed_rewards, prepare, rescore
from methods.base import FitContext, register


@register("lucb-static")
class LucbStatic(BanditSelector):
    level = "task"
    surrogate_kind = "none"
    table_group = "beyond"

    def __init__(self, cs: str = "query-bernstein", paired: bool = False, split: str = "uniform",
                 sampling: str = "both", **bandit):
        super().__init__(**bandit)
        if cs not in FIXED_SET_SEQUENCES:
            raise ValueError(f"lucb-static: cs must be one of {', '.join(FIXED_SET_SEQUENCES)}, got {cs!r}")
        if paired and cs != "query-bernstein":
            raise ValueError(f"lucb-static: paired comparisons use the per-query sequence, not cs={cs!r}")
        check_lucb_options(split, sampling, "lucb-static", ValueError)
        if paired and (split, sampling) != ("uniform", "both"):
            raise ValueError("lucb-static: split and sampling are options of the per-arm LUCB, not of paired=True")
        self.cs, self.paired, self.split, self.sampling = cs, bool(paired), split, sampling

    def fit(self, ctx: FitContext) -> "LucbStatic":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        m = min(self.m, max(1, len(prep.arms) - 1))
        options = {} if self.paired else {"split": self.split, "sampling": self.sampling}
        core = PairedLUCB if self.paired else LUCB
        self.result_ = result = core(prep.env, m, epsilon=self.epsilon, delta=self.delta, max_pulls=self.max_pulls,
                                     cs=self.cs, **options).run()
        if result.pulls == 0:
            raise FitFailed("lucb-static: no arm was pulled before the budget ended; raise --llm-budget")
        if result.pulls < len(prep.arms):
            self.warn(f"only {result.pulls} of {len(prep.arms)} arms were pulled once before the {result.stopped_by} "
                      "stop: the top m is chosen among those")
        self.warn_if_uncertified(result)
        self.best_arm_ = rescore(prep.env, result.top_m, observed_rewards(prep.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)

    def settings(self) -> dict:
        if self.paired:
            return {**super().settings(), "stop_rule": "certified: LCB(mu_j - mu_o) > -epsilon for every j in the top "
                    "m and o outside", "surrogate": "none (paired and per-arm confidence sequences)",
                    "confidence_sequence": self.cs, "paired": True}
        return {**super().settings(), "stop_rule": "certified: min LCB(top m) >= max UCB(rest) - epsilon",
                "surrogate": "none (per-arm confidence sequences)", "confidence_sequence": self.cs,
                "split": self.split, "sampling": self.sampling}
