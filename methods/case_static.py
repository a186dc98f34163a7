"""CASE (Purohit et al. 2025), task level: linear gap-index top-m bandit, then the best re-scored arm.

Follows the authors' code (kiranpurohit/CASE, Code/LLM_experiments/CASE_Gsm8K_selection.py): 100 arms of
one example per KMeans cluster, 5-dimensional slot features (mean cosine of slot j's example to the
validation items), ridge prior I, Sherman-Morrison updates, gap index theta^T (x_i - x_j) +
sqrt(2 beta(t)) ||x_i - x_j||_{sigma^2 V^-1} with the heuristic beta(t) = log((log t + 1) / delta),
sigma 0.5, 5 challengers refreshed from 5 fresh arms, the LinGapE greedy pull, a pull = the arm on every
validation item, and a static output that re-scores m = 10 arms on validation and keeps the best one (which
m arms, and how the best is judged, differ: see Deviations).

Stopping. The DEARICL paper runs CASE and DEARICL with the same bandit hyperparameters, so by default
both stop by Algorithm 1's gap rule alone (B_t(ch_t, b_t) <= epsilon). `patience=20` adds the public
script's extra condition, "20 rounds without a change of U_t". Note on that script: its counter copies U_t
by reference before swapping in place, then compares the swapped list with the re-sorted one, so it
counts rounds in which the swapped U_t is already in sorted order, not rounds without a change of the set
(the TabMWP script fixes it with a copy and a set comparison). `patience` here counts unchanged sets,
the evident intent.

Deviations, with reasons:
- reward = BERTScore of the generated rationale (the DEARICL paper's reward for every selector); the
  public GSM8K script's 0/1 indicator counts any parsed answer as correct, a bug not copied;
- epsilon 0.1 (the DEARICL paper) instead of the script's constructor default 0.11;
- `cold_start` (default 5 random arms, shared with DEARICL for a fair comparison; the script has none);
- the script's extra diagnostic LLM calls (evaluating U at round 1 and c_t each round for a logged MSE)
  are not made;
- `patience` is 0 by default; the script loops `while not done or patience < 20` (l.837), i.e. it stops
  only in a round where the gap rule holds and its counter has reached 20 (see Stopping);
- the static output: the script returns the m arms with the highest theta^T x over ALL 100 arms
  (`recommend` -> `recommend_rule` -> `m_maximal(self.means, m)`, l.681-682 and 876), evaluates each once
  more on the 20 validation items (`LLM_avg_error`, l.956) and keeps the one with the lowest error in that
  evaluation alone (`np.argmin`, l.958). Here the candidates are U_T, the bandit's top-m set sorted by
  theta^T x (`GapIndexTopM.run`'s `top_m`), each is pulled once more (`bandit_base.rescore`), and the best
  by the mean of ALL its pulls, bandit pulls included, is kept. Reasons: U_T is the set the gap stop rule
  is about; DEARICL_static uses the same step, so the two differ only in the bandit; the mean of every pull
  is less noisy than one sampled evaluation;
- pool items are embedded as question + gold output (`bandit_base.prepare`: `encode_items(pool,
  with_output=True)`), for the KMeans arms and the slot cosines; validation items as the question. The
  script loads precomputed embeddings (`gsm8k_train_emb.pkl`, `gsm8k_val_emb.pkl`, l.738-742; no code in
  the repository computes them; the same authors' EXPLORA scripts embed the `question` field only).
  Reason: the DEARICL paper's H(v; w) embeds a demonstration's input and output, and CASE, EXPLORA and
  DEARICL share that one pool embedding and so the same arms.
"""
from __future__ import annotations

from bench.items import Item
from dearicl.arms import slot_similarity_features
from methods.bandit_base import BanditSelector, observed_rewards, prepare, rescore
from methods.base import FitContext, register


@register("case-static")
class CaseStatic(BanditSelector):
    level = "task"
    surrogate_kind = "linear"

    def fit(self, ctx: FitContext) -> "CaseStatic":
        self.check_pool(ctx)
        self.prep_ = prep = prepare(ctx, self.n_arms)
        features = slot_similarity_features(prep.arms, prep.demo_emb, prep.val_emb)
        result = self.run_bandit(ctx, prep, self.linear_surrogate(features))
        self.require_pulls(result)
        # CASE's static inference: re-score the top-m arms on validation, keep the single best.
        self.best_arm_ = rescore(prep.env, result.top_m, observed_rewards(prep.env, ctx.oracle))
        return self

    def select(self, query: Item) -> list[Item]:
        return self.demos_of(self.best_arm_)
