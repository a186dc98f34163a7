"""DEARICL_static: the neural-surrogate gap-index bandit; the best arm of U_T, re-scored on validation."""
from __future__ import annotations

from bench.items import Item
from dearicl.selection import BanditSelector, observed_rewards, prepare, rescore
from methods.base import FitContext, register


@register("dearicl-static")
class DearIclStatic(BanditSelector):
    level = "task"

    def fit(self, ctx: FitContext) -> "DearIclStatic":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        self.surrogate_ = self.neural_surrogate(prep, ctx.seed)
        result = self.run_bandit(ctx, prep, self.surrogate_)
        self.best_arm_ = rescore(prep.env, result.top_m, observed_rewards(prep.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)
