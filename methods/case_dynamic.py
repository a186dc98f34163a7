"""CASE run per test instance (the DEARICL paper's CASE_dynamic): the query's features, a per-query budget.

The authors' CASE code has no per-instance mode; the DEARICL paper describes CASE_dynamic as CASE
applied to each test instance instead of one offline run. Here every query gets its own linear
gap-index run over the same arms, with slot features = cosine of each slot's example to that query, and
the best arm of its U_T is used. See case_static.py for CASE itself, the stop rule and the deviations
it shares with this selector (reward, epsilon, cold start). Embeddings, as there: the pool items (the
KMeans arms and the slot features) as question + gold output (`bandit_base.prepare`, the DEARICL paper's
H(v; w), shared with DEARICL), the query as its question alone; CASE's code embeds questions only.

Per-query cost. `pulls_per_query` caps each query's run (cold-start pulls included). The default, 13,
follows the paper's runtime: CASE_dynamic took 1554 s per GSM8K query (its inference-time table); at
about 6 s per LLM call that is ~259 calls, i.e. ~13 pulls of 20 validation items. Queries share the LLM
cache, so a pull another query already made costs no new call: the report gives both the distinct calls
(what a cold cache pays once) and the calls the queries asked for, cache hits included (what independent
per-query runs would pay). Every query's run starts with the same `cold_start` random arms (the run's
seed), so a budget of `cold_start` pulls or fewer is the cold start only: no gap-index round, one ridge fit
on the same arms for every query. Such a fit warns on its result row.
"""
from __future__ import annotations

from bench.errors import FitFailed
from bench.items import Item
from dearicl.arms import slot_similarity_features
from dearicl.bandit import GapIndexTopM
from dearicl.environments import OracleEnvironment
from methods.bandit_base import BanditSelector, prepare
from methods.base import FitContext, register


@register("case-dynamic")
class CaseDynamic(BanditSelector):
    level = "instance"
    table_group = "bandit"
    surrogate_kind = "linear"

    def __init__(self, k: int = 5, pulls_per_query: int = 13, **bandit):
        super().__init__(k, **bandit)
        self.pulls_per_query = pulls_per_query

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        """Each test query's own bandit: at most pulls_per_query pulls on every validation item."""
        return self.pulls_per_query * n_val * n_test

    def fit(self, ctx: FitContext) -> "CaseDynamic":
        self.check_pool(ctx)
        self.prep_ = prepare(ctx, self.n_arms)
        if self.cold_start != "all" and self.pulls_per_query <= int(self.cold_start):
            self.warn(f"pulls_per_query {self.pulls_per_query} <= cold_start {self.cold_start}: every query gets only "
                      "the same cold-start pulls and no gap-index round (raise pulls_per_query for CASE proper)")
        self.ctx_ = ctx
        self.last_info_: dict = {}
        return self

    def select(self, query: Item) -> list[Item]:
        ctx, prep = self.ctx_, self.prep_
        q_emb = ctx.encoder.encode_items([query])
        features = slot_similarity_features(prep.arms, prep.demo_emb, q_emb)  # cosine to this query
        per_query = ctx.oracle.child(budget=None)  # per query: max_pulls below; the run budget binds via the parent
        distinct_before = ctx.oracle.calls
        env = OracleEnvironment(per_query, ctx.pool, prep.arms, ctx.validation)
        cfg = self.bandit_config(ctx, m=self.top_m_size(len(prep.arms)), max_pulls=self.pulls_per_query)
        result = GapIndexTopM(env, self.linear_surrogate(features), cfg).run()
        if result.pulls == 0:
            raise FitFailed(f"case-dynamic: --llm-budget ran out before query {query.id} got a single pull, so its "
                            "surrogate would be untrained; raise the budget or lower pulls_per_query")
        self.last_info_ = {"pulls": result.pulls, "rounds": result.rounds, "stopped_by": result.stopped_by,
                           "llm_calls_requested": per_query.calls, "llm_calls_new": ctx.oracle.calls - distinct_before}
        return env.demos(result.top_m[0])

    def select_info(self) -> dict:
        return dict(self.last_info_)

    def scale(self) -> dict:
        return {"arms": len(self.prep_.arms), "pulls a query": self.pulls_per_query,
                "validation items a pull": len(self.prep_.env.validation)} if hasattr(self, "prep_") else {}

    def trace(self) -> list[dict]:
        return [{"summary": True, "surrogate": "linear", "pulls_per_query": self.pulls_per_query,
                 "settings": self.settings()}] if hasattr(self, "prep_") else []
