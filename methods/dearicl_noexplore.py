"""Ablation: the DEARICL ranker trained only on the initial random arms (no adaptive sampling)."""
from __future__ import annotations

import numpy as np

from methods.base import FitContext, register
from methods.dearicl_dynamic import DearIclDynamic


@register("dearicl-noexplore")
class DearIclNoExplore(DearIclDynamic):
    def __init__(self, k: int = 5, initial_arms: int = 20, train_rounds: int = 25, **bandit):
        super().__init__(k, **bandit)
        self.initial_arms, self.train_rounds = initial_arms, train_rounds

    def fit(self, ctx: FitContext) -> "DearIclNoExplore":
        # the cold start only: M random arms pulled once, then as many updates as a bandit run would make
        self.require_pulls(self.fit_neural(ctx, cold_start=self.initial_arms, max_pulls=self.initial_arms))
        for _ in range(self.train_rounds):
            self.surrogate_.update()
        self.candidates_ = np.arange(len(self.prep_.arms))  # no exploration trace: rank every arm
        return self
