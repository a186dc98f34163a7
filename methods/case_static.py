"""CASE (Purohit et al. 2025), task level: linear gap-index top-m bandit, then the best re-scored arm."""
from __future__ import annotations

from bench.items import Item
from dearicl.arms import slot_similarity_features
from dearicl.selection import BanditSelector, observed_rewards, prepare, rescore
from methods.base import FitContext, register


@register("case-static")
class CaseStatic(BanditSelector):
    level = "task"
    surrogate_kind = "linear"
    default_patience = 20  # CASE's public script waits 20 rounds without a change of U_t before stopping

    def fit(self, ctx: FitContext) -> "CaseStatic":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        features = slot_similarity_features(prep.arms, prep.demo_emb, prep.val_emb)
        result = self.run_bandit(ctx, prep, self.linear_surrogate(features))
        # CASE's static inference: re-score the top-m arms on validation, keep the single best.
        self.best_arm_ = rescore(prep.env, result.top_m, observed_rewards(prep.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)
