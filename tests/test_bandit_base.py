"""The glue between the Selector contract and the bandit core (methods/bandit_base.py), unit by unit and without a
model: the arms a fit builds or is given, the final re-scoring, the rewards read back from the oracle's history, the
settings passed to the core, and what a fit reports (stop rule, trace, scale, warnings)."""
import numpy as np
import pytest

from bench.errors import BudgetExhausted, ConfigError, FitFailed
from bench.items import Item
from bench.oracle import Pull
from dearicl.arms import build_arms
from dearicl.bandit import BanditResult
from dearicl.environments import OracleEnvironment
from dearicl.pac import PacResult
from methods.bandit_base import BanditSelector, PacSelector, Prepared, observed_rewards, prepare, rescore
from methods.base import FitContext

POOL = [Item(id=f"pool:{i}", question=f"q{i}", answer=f"a{i}") for i in range(12)]
VALIDATION = [Item(id=f"val:{i}", question=f"v{i}", answer=f"b{i}") for i in range(3)]


class Stub:
    """fit and select are each selector's own: the bases alone are tested here."""

    def fit(self, ctx):
        return self

    def select(self, query):
        return []


class Selector(Stub, BanditSelector):
    name = "bandit-base-test"


class Certified(Stub, PacSelector):
    name = "bandit-base-pac-test"


class Encoder:
    """A fixed random vector per item id; a demonstration's vector differs with its output shown."""

    def __init__(self):
        self.calls = []

    def encode_items(self, items, with_output=False):
        self.calls.append((tuple(it.id for it in items), with_output))
        return np.array([np.random.default_rng([int(it.id.split(":")[1]), with_output, len(it.id)]).normal(size=8)
                         for it in items])


class Oracle:
    """Rewards by arm: each pull returns the next row of its arm's script; a spent budget raises."""

    def __init__(self, rewards_by_first_demo: dict[str, list[list[float]]], budget: int = 100):
        self.script, self.budget, self.history, self.calls, self.llm_seconds = rewards_by_first_demo, budget, [], 0, 0.0

    def pull(self, demos, items):
        if self.calls + len(items) > self.budget:
            raise BudgetExhausted("spent")
        rewards = self.script[demos[0].id].pop(0)
        self.calls += len(items)
        self.history.append(Pull(tuple(d.id for d in demos), tuple(it.id for it in items), tuple(rewards)))
        return np.array(rewards)


def context(arms=None, oracle=None, seed=0, k=3):
    return FitContext(task=None, pool=POOL, validation=VALIDATION, encoder=Encoder(), oracle=oracle, seed=seed, k=k,
                      arms=arms)


# --- arms, re-scoring and the oracle's history ---

def test_prepare_builds_the_seeded_arms_from_the_demonstrations_embedded_with_their_outputs():
    ctx = context(seed=4)
    prep = prepare(ctx, n_arms=6)
    assert ctx.encoder.calls == [(tuple(it.id for it in POOL), True), (tuple(it.id for it in VALIDATION), False)]
    np.testing.assert_array_equal(prep.demo_emb, Encoder().encode_items(POOL, with_output=True))
    np.testing.assert_array_equal(prep.val_emb, Encoder().encode_items(VALIDATION))
    expected = build_arms(prep.demo_emb, 6, 3, 4)
    np.testing.assert_array_equal(prep.arms.members, expected.members)
    assert len(prep.arms) == 6 and prep.arms.members.shape == (6, 3)
    assert isinstance(prep.env, OracleEnvironment) and prep.env.validation is VALIDATION and prep.env.pool is POOL
    assert prep.env.arm_set is prep.arms and prep.env.oracle is ctx.oracle
    assert not np.array_equal(prepare(context(seed=5), 6).arms.members, prep.arms.members)  # the seed picks them


def test_prepare_keeps_a_reward_table_s_arms_as_given():
    recorded = [[0, 1, 2], [3, 4, 5], [9, 10, 11]]
    prep = prepare(context(arms=recorded), n_arms=50)  # the table's arms, whatever n_arms says
    assert prep.arms.members.tolist() == recorded
    assert prep.arms.clusters.tolist() == [0] * len(POOL) and prep.arms.clusters.dtype == np.int64
    assert prep.env.demos(2) == [POOL[9], POOL[10], POOL[11]]


class ScriptedEnv:
    def __init__(self, rewards: dict[int, list[float]], budget: int):
        self.rewards, self.budget, self.pulled = rewards, budget, []

    def pull(self, arm):
        if len(self.pulled) >= self.budget:
            raise BudgetExhausted("spent")
        self.pulled.append(arm)
        return np.array([self.rewards[arm], self.rewards[arm]])


def test_rescoring_pulls_each_candidate_once_more_and_keeps_the_best_mean_of_all_its_pulls():
    env = ScriptedEnv({0: 0.5, 1: 0.6, 2: 0.2}, budget=10)
    observed = {2: [1.0, 1.0, 1.0]}  # arm 2's earlier pulls outweigh its poor re-scoring pull
    assert rescore(env, [0, 1, 2], observed) == 2
    assert env.pulled == [0, 1, 2] and observed == {0: [0.5], 1: [0.6], 2: [1.0, 1.0, 1.0, 0.2]}
    assert rescore(ScriptedEnv({0: 0.5, 1: 0.6, 2: 0.2}, budget=10), [0, 1, 2], {}) == 1


def test_rescoring_stops_at_a_spent_budget_and_keeps_the_first_candidate_if_none_was_scored():
    env = ScriptedEnv({0: 0.1, 1: 0.9, 2: 0.5}, budget=1)
    observed = {}
    assert rescore(env, [0, 1, 2], observed) == 0  # arm 1 was never re-scored: only 0 has a pull
    assert env.pulled == [0] and {arm: seen for arm, seen in observed.items() if seen} == {0: [0.1]}
    assert rescore(ScriptedEnv({}, budget=0), [5, 3], {}) == 5
    assert rescore(ScriptedEnv({5: 0.1}, budget=0), [5, 3], {3: [0.4]}) == 3  # an earlier pull still counts


def test_observed_rewards_maps_each_logged_pull_back_to_its_arm_by_demonstration_ids():
    ctx = context(arms=[[0, 1, 2], [3, 4, 5], [6, 7, 8]], oracle=Oracle({}))
    env = prepare(ctx, 3).env
    ctx.oracle.history = [Pull(("pool:3", "pool:4", "pool:5"), ("val:0",), (1.0, 0.0)),
                          Pull(("pool:0", "pool:1", "pool:2"), ("val:0",), (0.25,)),
                          Pull(("pool:4", "pool:3", "pool:5"), ("val:0",), (1.0,)),  # another order: no arm
                          Pull(("pool:3", "pool:4", "pool:5"), ("val:1",), (1.0, 1.0, 1.0))]
    assert observed_rewards(env, ctx.oracle) == {1: [0.5, 1.0], 0: [0.25]}
    assert observed_rewards(env, Oracle({})) == {}


# --- what the selector passes on and reports ---

def test_the_constructor_s_settings_reach_the_core_and_the_surrogate():
    selector = Selector(k=3, n_arms=7, m=2, challengers=3, epsilon=0.2, delta=0.1, rule="variance", cold_start=4,
                        max_pulls=9, beta="lucb1", sigma=0.3, hidden=[16, 8], dropout=0.2, lr=0.01,
                        epochs_per_round=2, mc_passes=5, tau=2.0, patience=3, batch_size=4, estimate="mc-mean",
                        width_schedule="sqrt-log", log_k="arms", mc_draws="per-round")
    cfg = selector.bandit_config(context(seed=11))
    assert (cfg.m, cfg.challengers, cfg.epsilon, cfg.delta, cfg.rule, cfg.cold_start, cfg.max_pulls, cfg.patience,
            cfg.seed) == (2, 3, 0.2, 0.1, "variance", 4, 9, 3, 11)
    assert selector.bandit_config(context(), m=1, cold_start=1, max_rounds=5).m == 1
    overridden = selector.bandit_config(context(), cold_start=1, max_rounds=5)
    assert (overridden.m, overridden.cold_start, overridden.max_rounds) == (2, 1, 5)
    n = selector.neural
    assert (n.hidden, n.dropout, n.lr, n.epochs_per_round, n.mc_passes, n.tau, n.batch_size, n.estimate,
            n.width_schedule, n.log_k, n.mc_draws) == ((16, 8), 0.2, 0.01, 2, 5, 2.0, 4, "mc-mean", "sqrt-log",
                                                        "arms", "per-round")
    linear = selector.linear_surrogate(np.eye(4))
    assert (linear.sigma, linear.delta, linear.beta_kind) == (0.3, 0.1, "lucb1")
    prep = prepare(context(), 5)
    neural = selector.neural_surrogate(prep, seed=8)
    assert neural.cfg.seed == 8 and neural.cfg.hidden == (16, 8) and neural.delta == 0.1
    with pytest.raises(ConfigError, match="unknown estimate 'no-such-estimate'"):  # at construction, before any model
        Selector(estimate="no-such-estimate")


def test_the_call_bound_counts_max_pulls_and_the_m_rescoring_pulls_per_validation_item():
    assert Selector(m=3, max_pulls=10).selection_call_bound(n_val=4, n_test=100) == (10 + 3) * 4
    assert Selector(m=3).selection_call_bound(n_val=4, n_test=100) is None  # the gap rule alone bounds nothing


@pytest.mark.parametrize("arms, m", [(100, 10), (16, 10), (15, 9), (12, 6), (7, 1), (6, 1), (2, 1)])
def test_m_leaves_the_challengers_and_one_arm_outside_the_top_m(arms, m):
    assert Selector(m=10, challengers=5).top_m_size(arms) == m


def test_a_fit_that_pulled_nothing_is_refused_with_the_budget_to_raise():
    selector = Selector()
    selector.require_pulls(BanditResult(top_m=[0], seen=[0], pulls=1, rounds=1, stopped_by="gap"))
    with pytest.raises(FitFailed, match=r"^bandit-base-test: no arm was pulled before the budget ended, so the "
                                        r"neural surrogate is untrained; raise --llm-budget$"):
        selector.require_pulls(BanditResult(top_m=[0], seen=[0], pulls=0, rounds=0, stopped_by="budget"))


def test_a_stop_without_a_certificate_is_a_warning_and_a_certified_one_is_not():
    selector = Selector()
    selector.warn_if_uncertified(PacResult(top_m=[0], pulls=5, rounds=5, stopped_by="certified"))
    assert selector.fit_warnings == []
    selector.warn_if_uncertified(PacResult(top_m=[0], pulls=7, rounds=7, stopped_by="model-stop"))
    selector.warn_if_uncertified(PacResult(top_m=[0], pulls=9, rounds=9, stopped_by="budget"))
    assert selector.fit_warnings == [
        'stopped by the model intervals after 7 pulls (stop="model"): not a certificate, the returned arms are not '
        "certified epsilon-good",
        "stopped by budget after 9 pulls before the certificate held: the returned arms are not certified "
        "epsilon-good"]


def test_settings_name_the_stop_rule_and_every_knob():
    settings = Selector(epsilon=0.2, delta=0.1, m=4, challengers=3, n_arms=50, cold_start=6, max_pulls=30,
                        rule="variance").settings()
    assert settings == {"stop_rule": "gap index <= epsilon", "epsilon": 0.2, "delta": 0.1, "m": 4, "challengers": 3,
                        "n_arms": 50, "cold_start": 6, "max_pulls": 30, "selection_rule": "variance",
                        "surrogate": "neural"}
    assert Selector(patience=20).settings()["stop_rule"] == "gap index <= epsilon and U_t unchanged for 20 rounds"


def test_trace_and_scale_are_empty_before_a_fit_and_summarise_it_after():
    selector = Selector()
    assert selector.trace() == [] and selector.scale() == {}
    selector.prep_ = prepare(context(arms=[[0, 1, 2], [3, 4, 5]]), 2)
    selector.result_ = BanditResult(top_m=[1], seen=[0, 1], pulls=6, rounds=4, stopped_by="gap",
                                    trace=[{"round": 1}, {"round": 2}])
    trace = selector.trace()
    assert trace[:2] == [{"round": 1}, {"round": 2}] and len(trace) == 3
    assert trace[2] == {"summary": True, "pulls": 6, "rounds": 4, "stopped_by": "gap", "surrogate": "neural",
                        "settings": selector.settings()}
    assert selector.scale() == {"arms": 2, "pulls": 6, "rounds": 4, "validation items a pull": 3}
    assert selector.demos_of(1) == [POOL[3], POOL[4], POOL[5]]


def test_the_certified_selector_checks_its_settings_at_once_and_names_its_stop():
    with pytest.raises(ConfigError):
        Certified(audit_share=1.5)
    with pytest.raises(ConfigError):
        Certified(stop="no-such-stop")
    certified = Certified(audits_at_start=3, audit_share=0.2, max_audits=6, feature_dim=2)
    assert certified.pac == {"audits_at_start": 3, "audit_share": 0.2, "max_audits": 6, "feature_dim": 2,
                             "stop": "sequences"}
    settings = certified.settings()
    assert settings["stop_rule"] == "certified: min LCB(S) >= max UCB(outside) - epsilon on the confidence sequences"
    assert settings["surrogate"] == "neural + linear head" and settings["audit_share"] == 0.2
    assert settings["epsilon"] == certified.epsilon and settings["stop"] == "sequences"
    model = Certified(stop="model").settings()["stop_rule"]
    assert model == "model stop (not a certificate): min lo(S) >= max hi(outside) - epsilon on the model intervals"
    result = PacResult(top_m=[0], pulls=3, rounds=3, stopped_by="certified", certificate=True)
    assert certified.trace_extra(result) == {"surrogate": "neural + linear head", "certificate": True}
    assert Selector().trace_extra(result) == {}


# --- a whole fit through the real core, tiny: six arms, three validation items, a network of 8 units ---

class ScoredOracle(Oracle):
    """Each pull rewards the arm's demonstrations by their ids' mean over 11 (arm {9, 10, 11} is the best)."""

    def __init__(self, budget: int = 10_000):
        super().__init__({}, budget)

    def pull(self, demos, items):
        if self.calls + len(items) > self.budget:
            raise BudgetExhausted("spent")
        reward = float(np.mean([int(d.id.split(":")[1]) for d in demos])) / 11
        self.calls += len(items)
        self.history.append(Pull(tuple(d.id for d in demos), tuple(it.id for it in items), (reward,) * len(items)))
        return np.full(len(items), reward)


TINY = dict(k=3, n_arms=6, m=3, challengers=1, cold_start=2, max_pulls=8, mc_passes=4, epochs_per_round=1,
            hidden=(8,), batch_size=4)
ARMS4 = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


class Task:
    name = "tiny"


def test_a_neural_fit_runs_the_core_on_the_prepared_arms_and_keeps_what_it_needs_to_select():
    ctx = FitContext(task=Task(), pool=POOL, validation=VALIDATION, encoder=Encoder(), oracle=ScoredOracle(), seed=2,
                     k=3, arms=ARMS4)
    selector = Selector(**TINY)
    result = selector.fit_neural(ctx)
    assert result is selector.result_ and selector.encoder_ is ctx.encoder
    assert selector.prep_.arms.members.tolist() == ARMS4 and selector.surrogate_.cfg.seed == 2
    assert 0 < result.pulls <= 8 and ctx.oracle.calls == 3 * result.pulls  # a pull: one call per validation item
    assert len(result.top_m) == selector.top_m_size(4) == 2  # m lowered: the challenger and one arm stay outside
    capped = Selector(**TINY).fit_neural(FitContext(**{**ctx.__dict__, "oracle": ScoredOracle()}), max_pulls=3)
    assert capped.pulls == 3 and capped.stopped_by == "max_pulls"  # an override reaches the core
    query = Item(id="test:5", question="t", answer="x")
    scores = selector.candidate_scores(query, np.array([0, 3, 1]))
    expected = selector.surrogate_.rank_scores(ctx.encoder.encode_items([query])[0], np.array([0, 3, 1]))
    np.testing.assert_array_equal(scores, expected)
    best = [0, 3, 1][int(np.argmax(scores))]
    last_best = np.array([a for a in (0, 3, 1) if a != best] + [best])  # the best candidate is not the first one
    assert selector.best_for_query(query, last_best) == selector.demos_of(best)
    with pytest.raises(ConfigError, match="k=13 is larger than the pool of task 'tiny'"):
        Selector(**{**TINY, "k": 13}).fit_neural(ctx)
    built = Selector(**{**TINY, "n_arms": 5})
    built.fit_neural(FitContext(**{**ctx.__dict__, "arms": None, "oracle": ScoredOracle()}))
    assert len(built.prep_.arms) == 5  # no table's arms: n_arms of them are built


def test_a_certified_fit_stops_at_max_pulls_with_a_warning_and_refuses_an_empty_budget():
    ctx = FitContext(task=Task(), pool=POOL, validation=VALIDATION, encoder=Encoder(), oracle=ScoredOracle(), seed=0,
                     k=3, arms=ARMS4)
    selector = Certified(**{**TINY, "m": 9, "max_pulls": 5}, audits_at_start=2, max_audits=2, feature_dim=2)
    result = selector.fit_pac(ctx)
    assert result is selector.result_ and result.pulls == 5 and result.stopped_by == "max_pulls"
    assert len(result.top_m) == 3  # m lowered to the arms but one
    assert selector.fit_warnings == ["stopped by max_pulls after 5 pulls before the certificate held: the returned "
                                     "arms are not certified epsilon-good"]
    assert selector.trace()[-1]["certificate"] == result.certificate  # the certified summary's own field
    with pytest.raises(FitFailed, match="no arm was pulled"):
        Certified(**TINY).fit_pac(FitContext(**{**ctx.__dict__, "oracle": ScoredOracle(budget=0)}))


def test_a_certified_fit_passes_every_setting_and_the_seed_to_its_core(monkeypatch):
    import methods.bandit_base

    configs = []

    class Spy:
        def __init__(self, env, surrogate, cfg):
            configs.append(cfg)

        def run(self):
            return PacResult(top_m=[0], pulls=2, rounds=2, stopped_by="certified")

    monkeypatch.setattr(methods.bandit_base, "CertifiedTopM", Spy)
    ctx = FitContext(task=Task(), pool=POOL, validation=VALIDATION, encoder=Encoder(), oracle=ScoredOracle(), seed=7,
                     k=3, arms=ARMS4[:2])
    Certified(**{**TINY, "m": 4, "epsilon": 0.3, "delta": 0.2, "cold_start": 3}, audits_at_start=4,
              audit_share=0.3, max_audits=5, feature_dim=3, stop="model").fit_pac(ctx)
    cfg = configs[0]
    assert (cfg.m, cfg.epsilon, cfg.delta, cfg.cold_start, cfg.max_pulls, cfg.seed) == (1, 0.3, 0.2, 3, 8, 7)
    assert (cfg.audits_at_start, cfg.audit_share, cfg.max_audits, cfg.feature_dim, cfg.stop) == (4, 0.3, 5, 3, "model")


def test_the_defaults_are_the_harness_s_published_ones():
    """studies/reference/selector-defaults.json holds every selector's; these are the bandits' shared ones."""
    selector, certified = Selector(), Certified()
    assert (selector.k, selector.n_arms, selector.m, selector.challengers, selector.epsilon, selector.delta,
            selector.rule, selector.cold_start, selector.max_pulls, selector.beta, selector.sigma,
            selector.patience) == (5, 100, 10, 5, 0.1, 0.05, "greedy", 5, None, "heuristic", 0.5, 0)
    n = selector.neural
    assert (n.hidden, n.dropout, n.lr, n.epochs_per_round, n.mc_passes, n.tau, n.batch_size, n.estimate,
            n.width_schedule, n.log_k, n.mc_draws) == ((256, 128), 0.1, 1e-3, 4, 256, 1.0, 16, "dropout-off",
                                                        "constant", "compared", "per-call")
    assert certified.pac == {"audits_at_start": 10, "audit_share": 0.1, "max_audits": 20, "feature_dim": 4,
                             "stop": "sequences"}
