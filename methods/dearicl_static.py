"""DEARICL_static: the neural-surrogate gap-index bandit; the best arm of U_T, re-scored on validation."""
from __future__ import annotations

from bench.items import Item
from methods.bandit_base import BanditSelector, observed_rewards, rescore
from methods.base import FitContext, register


@register("dearicl-static")
class DearIclStatic(BanditSelector):
    level = "task"

    def fit(self, ctx: FitContext) -> "DearIclStatic":
        result = self.fit_neural(ctx)
        self.require_pulls(result)
        self.best_arm_ = rescore(self.prep_.env, result.top_m, observed_rewards(self.prep_.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)
