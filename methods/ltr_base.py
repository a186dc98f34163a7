"""The learning-to-rank selectors' shared part: candidates from DEARICL's U_t/C_t, training data (own pulls
or the DEARICL run's log) and the @register_ltr decorator. The rankers and losses live in dearicl/ltr.py."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from dearicl.arms import arm_embeddings, slot_similarity_features
from dearicl.losses import PADDED
from dearicl.ltr import LOSSES, pair_features, slates_from_rewards, standardiser, train_ranker
from methods.bandit_base import BanditSelector
from methods.base import FitContext, register

LTR_DATA = ("own", "dearicl")
CANDIDATES = ("dearicl", "all")  # test-time candidates: DEARICL's U_t/C_t shortlist, or every arm
DEARICL_DATA = "@dearicl-data"  # name suffix of the data-ablation variant


def register_ltr(name: str):
    """@register(name) for an LTR selector, plus NAME@dearicl-data: the same model trained on the
    DEARICL run's logged observations (the paper's Table 3), run when --ltr-data asks for it."""

    def wrap(cls: type[LTRSelector]) -> type[LTRSelector]:
        register(name)(cls)

        def __init__(self, k: int = 5, ltr_data: str = "dearicl", **params):
            cls.__init__(self, k, ltr_data=ltr_data, **params)

        variant = type(f"{cls.__name__}OnDearIclData", (cls,),
                       {"__init__": __init__, "in_all": False, "__module__": cls.__module__,
                        "__doc__": f"{name} trained on the DEARICL run's (arm, query, reward) log."})
        register(name + DEARICL_DATA)(variant)
        return cls

    return wrap


class LTRSelector(BanditSelector):
    """Rank DEARICL's candidate arms per test query with a learning-to-rank model.

    Candidates are the arms of DEARICL's U_t and C_t (a DEARICL bandit run with the same settings
    and seed), so every LTR baseline ranks what dearicl-dynamic ranks. Training data:
    ``ltr_data="own"``: a classical LTR pipeline, `train_arms` random arms plus `negatives` arms whose
    examples are least similar to the validation set, each pulled once on all validation queries;
    ``ltr_data="dearicl"``: the (arm, query, reward) observations logged by the DEARICL run (Table 3).
    ``candidates="all"`` ranks every arm at test time instead of DEARICL's shortlist.
    A fit with no slate of two observed arms fails (FitFailed): it never ranks with an untrained model.
    """

    level = "instance"
    table_group = "instance"
    loss_name: str = ""

    def __init__(self, k: int = 5, ltr_data: str = "own", train_arms: int = 20, negatives: int = 10,
                 label_scale: float = 4.0, epochs: int = 100, batch_size: int = 16, ltr_lr: float = 1e-4,
                 normalise: bool = False, candidates: str = "dearicl", **bandit):
        super().__init__(k, **bandit)
        if ltr_data not in LTR_DATA:
            raise ConfigError(f"ltr_data must be one of {', '.join(LTR_DATA)}, got '{ltr_data}'")
        if candidates not in CANDIDATES:
            raise ConfigError(f"candidates must be one of {', '.join(CANDIDATES)}, got '{candidates}'")
        self.candidates = candidates
        self.ltr_data, self.train_arms, self.negatives, self.label_scale = ltr_data, train_arms, negatives, label_scale
        self.epochs, self.ltr_batch_size, self.ltr_lr, self.normalise = epochs, batch_size, ltr_lr, normalise

    def selection_call_bound(self, n_val: int, n_test: int) -> None:
        return None  # the DEARICL run's pulls and, with own data, the training arms' pulls: bounded by the budget

    def make_model(self, d_in: int) -> nn.Module:
        raise NotImplementedError

    def test_candidates(self, result) -> np.ndarray:
        """The arms ranked at test time: DEARICL's U_t/C_t shortlist, or every arm (`candidates="all"`)."""
        return np.array(result.seen) if self.candidates == "dearicl" else np.arange(len(self.prep_.arms))

    def loss(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return LOSSES[self.loss_name]

    def fit(self, ctx: FitContext) -> "LTRSelector":
        result = self.fit_neural(ctx)  # the candidate set (and, for ltr_data="dearicl", the training data)
        prep = self.prep_
        self.candidates_ = self.test_candidates(result)
        self.arm_emb_ = arm_embeddings(prep.arms, prep.demo_emb)
        if self.ltr_data == "dearicl":
            sums, counts = self.surrogate_.reward_sum, self.surrogate_.reward_count
            asked = None
        else:
            sums, counts = self._own_pulls(ctx)
            asked = self.train_arms + self.negatives
        self.training_arms_ = int((counts.sum(axis=1) > 0).sum())
        slates = slates_from_rewards(prep.val_emb, self.arm_emb_, sums, counts, self.label_scale)
        usable = int(((slates.labels != PADDED).sum(axis=1) >= 2).sum()) if slates.labels.size else 0
        source = "the DEARICL run's log" if self.ltr_data == "dearicl" else "its own pulls"
        if usable == 0:
            raise FitFailed(f"{self.name}: no training data: {self.training_arms_} arm(s) observed in {source}, and a "
                            "slate needs two; raise --llm-budget (the shared DEARICL bandit spends it first)")
        if asked is not None and self.training_arms_ < asked:
            self.warn(f"trained on {self.training_arms_} of the {asked} arms asked for (the budget ran out)")
        if usable < len(ctx.validation):
            self.warn(f"trained on {usable} of {len(ctx.validation)} validation slates (the others had < 2 arms)")
        self.shift_, self.scale_ = standardiser(slates.features) if self.normalise else (0.0, 1.0)
        slates.features = (slates.features - self.shift_) / self.scale_
        torch.manual_seed(ctx.seed)
        self.model_ = self.make_model(slates.features.shape[-1])
        self.losses_ = train_ranker(self.model_, self.loss(), slates, epochs=self.epochs,
                                    batch_size=self.ltr_batch_size, lr=self.ltr_lr, seed=ctx.seed)
        self.model_.eval()  # dropout off at test time
        return self

    def _own_pulls(self, ctx: FitContext) -> tuple[np.ndarray, np.ndarray]:
        """Random arms plus heuristic negatives, each pulled once on all validation queries."""
        prep = self.prep_
        n_arms = len(prep.arms)
        rng = np.random.default_rng(ctx.seed + 1)
        sampled = rng.permutation(n_arms)[: self.train_arms].tolist()
        similarity = slot_similarity_features(prep.arms, prep.demo_emb, prep.val_emb).mean(axis=1)
        negatives = [a for a in np.argsort(similarity, kind="stable").tolist() if a not in sampled][: self.negatives]
        sums = np.zeros((n_arms, len(ctx.validation)))
        counts = np.zeros_like(sums)
        for arm in sampled + negatives:
            try:
                sums[arm] += prep.env.pull(arm)
            except BudgetExhausted:
                break
            counts[arm] += 1
        return sums, counts

    def select(self, query: Item) -> list[Item]:
        scores = self.candidate_scores(query, self.candidates_)
        return self.demos_of(int(self.candidates_[int(np.argmax(scores))]))

    def candidate_scores(self, query: Item, candidates: np.ndarray) -> np.ndarray:
        """The trained ranker's score of each candidate arm for this query."""
        query_emb = self.encoder_.encode_items([query])
        x = (pair_features(query_emb, self.arm_emb_[candidates]) - self.shift_) / self.scale_
        with torch.no_grad():
            return self.model_(torch.as_tensor(x, dtype=torch.float32))[0].numpy()

    def scale(self) -> dict:
        """The shared bandit's pulls, then the ranker's own training: arms observed, epochs and Adam steps."""
        if not hasattr(self, "losses_"):
            return super().scale()
        slates = len(self.prep_.env.validation)
        return {**super().scale(), "training arms": self.training_arms_, "candidate arms": len(self.candidates_),
                "epochs": len(self.losses_), "optimiser steps": len(self.losses_) * -(-slates // self.ltr_batch_size)}

    def trace(self) -> list[dict]:
        losses = getattr(self, "losses_", [])
        ltr = {"ltr": True, "loss": self.loss_name, "ltr_data": self.ltr_data, "candidate_set": self.candidates,
               "epochs": len(losses),
               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
               "training_arms": getattr(self, "training_arms_", 0), "candidates": len(getattr(self, "candidates_", []))}
        return super().trace() + [ltr]
