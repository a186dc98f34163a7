"""PiRank (Swezey et al. 2021) over DEARICL's candidate arms: NeuralSort relaxed NDCG@k.

Loss as in the authors' code (ermongroup/pirank, pirank_simple.py): tau 5, NDCG cutoff 15, the
straight-through estimator on (`ste=True`: hard sort in the forward pass, NeuralSort gradients; the code's
default, `flags.DEFINE_boolean('ste', True, ...)` at pirank_simple.py l.56 and pirank_deep.py l.76, although
their README's parameter table says False; its section 4.1 commands do not set `ste`, so they ran with it
on), gains 2^y - 1, natural-log discounts, NDCG as a batch ratio of summed DCG to summed ideal DCG
(`dearicl.losses.pirank_loss`).

Deviations, with reasons: the architecture is the DEARICL paper's appendix table, an MLP (256, 256, 128,
64) with ReLU (the script's default is 256-128-64 with tanh; its README commands use 256-256-128-64 with
ReLU, lr 1e-5, ndcg_k 10); training is the paper's shared LTR setting (Adam, lr 1e-4, 100 epochs, batch
16) instead of the script's Adagrad at 0.01 for 200 epochs. `ndcg_k=10` gives the README commands' cutoff.

Measured behaviour worth knowing: on a planted query-dependent utility (12 arms, 40 training slates; the
set-up of tests/test_ltr.py), this loss trains to a low value yet ranks every unseen query the same way
(best arm found for 20% of queries, with or without the straight-through estimator), while ListNet and
NDCGLoss2++ on the same data find it for 85-90%. NeuralSort's relaxation is only row-stochastic, so a
high-gain arm can be counted at several ranks, and the gradient rewards that rather than the order. On the
behavioural tests' `rules` world (16 arms, ideal learner; tests/test_selector_behaviour.py) its straight-through
training loss even rises, 0.20 -> 0.36 over 60 epochs, while the other rankers' losses fall.
"""
from __future__ import annotations

from functools import partial

from dearicl.losses import pirank_loss
from dearicl.ltr import MLPRanker
from methods.ltr_base import LTRSelector, register_ltr


@register_ltr("pirank")
class PiRank(LTRSelector):
    loss_name = "pirank"

    def __init__(self, k: int = 5, pirank_tau: float = 5.0, ndcg_k: int | None = 15, ste: bool = True, **ltr):
        super().__init__(k, **ltr)  # `tau` stays the shared DEARICL bandit's NeuralSort temperature
        self.pirank_tau, self.ndcg_k, self.ste = pirank_tau, ndcg_k, ste

    def loss(self):
        return partial(pirank_loss, tau=self.pirank_tau, k=self.ndcg_k, ste=self.ste)

    def make_model(self, d_in: int) -> MLPRanker:
        return MLPRanker(d_in, (256, 256, 128, 64))
