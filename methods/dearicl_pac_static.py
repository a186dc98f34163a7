"""dearicl-pac-static (beyond the paper): DEARICL's surrogate proposes, the stop is certified (dearicl/pac.py).

The certified top-m set S is re-scored on validation like dearicl-static and its best arm is used for every
test query. A run that ends (budget, max_pulls) before the certificate holds says so in its warnings.
"""
from __future__ import annotations

from bench.items import Item
from methods.bandit_base import PacSelector, observed_rewards, rescore
from methods.base import FitContext, register


@register("dearicl-pac-static")
class DearIclPacStatic(PacSelector):
    level = "task"

    def fit(self, ctx: FitContext) -> "DearIclPacStatic":
        result = self.fit_pac(ctx)
        self.best_arm_ = rescore(self.prep_.env, result.top_m, observed_rewards(self.prep_.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)
