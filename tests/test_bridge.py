"""BRIDGE: the GP proposal, the optimize/generate alternation, budget handling, and a runner run."""
import itertools
import json
import re

import numpy as np
import pytest

from bench.errors import FitFailed

import bench.runner as runner_mod
import methods.bridge  # noqa: F401  (registers "bridge")
from bench.errors import BudgetExhausted, ConfigError
from bench.items import Item
from bench.runner import Runner
from bench.tasks.gsm8k import GSM8K
from fakes import FakeBackend
from methods.base import FitContext, create
from methods.bridge import Bridge, generated_rationale, random_subsets, swap_neighbours
from test_runner import lines, make_config

POOL = [Item(f"gsm8k/p:{i}", f"Question number {i}?", str(i), f"gold reasoning {i}.", split="pool")
        for i in range(30)]
VALIDATION = [Item(f"gsm8k/v:{i}", f"Validation {i}?", "1", "v.", split="validation") for i in range(3)]


def last_question(prompt: str) -> str:
    return prompt.rsplit("[Question]: ", 1)[1].split("\n", 1)[0]


class FakeOracle:
    """Same pull/generate interface as RewardOracle: a reward function of the demos, a scripted generator."""

    def __init__(self, reward, answer=lambda prompt: " wrong\n[Answer]: -1", budget=None):
        self.reward, self.answer, self.budget = reward, answer, budget
        self.calls = 0
        self.pulled: list[tuple] = []  # (id, rationale) of every pulled subset, or "generate"
        self.prompts: list[str] = []

    def charge(self, n: int) -> None:
        if self.budget is not None and self.calls + n > self.budget:
            raise BudgetExhausted("fake budget reached")
        self.calls += n

    def pull(self, demos, items):
        self.charge(len(items))
        self.pulled.append(tuple((d.id, d.rationale) for d in demos))
        return np.full(len(items), self.reward(demos))

    def generate(self, shown):
        prompts = [GSM8K().render(demos, item) for demos, item in shown]
        self.charge(len(prompts))
        self.pulled.append("generate")
        self.prompts += prompts
        return [self.answer(p) for p in prompts]


def fit(oracle, seed=0, pool=POOL, **params) -> Bridge:
    ctx = FitContext(task=GSM8K(), pool=pool, validation=VALIDATION, encoder=None, oracle=oracle, seed=seed,
                     k=params.get("k", 5))
    return Bridge(**params).fit(ctx)


def additive_objective(candidates: list[Item], seed: int, star: int = 3):
    """Each candidate adds its own small weight; one specific candidate adds +0.3 more."""
    weights = dict(zip((c.id for c in candidates), 0.1 * np.random.default_rng(seed).permutation(len(candidates))
                       / len(candidates)))
    weights[candidates[star].id] += 0.3
    return lambda demos: sum(weights[d.id] for d in demos), weights


def test_gp_proposal_beats_random_search_on_a_synthetic_objective():
    k, n_init, n_iter, n_cand = 2, 3, 6, 10
    bo_hits = random_hits = 0
    for seed in range(10):
        candidates = fit(FakeOracle(lambda d: 0.0), seed=seed, k=k, n_candidates=n_cand, n_init=1, n_iter=0,
                         rounds=0).candidates_
        objective, weights = additive_objective(candidates, seed)
        optimum = sum(sorted(weights.values())[-k:])
        oracle = FakeOracle(objective)
        chosen = fit(oracle, seed=seed, k=k, n_candidates=n_cand, n_init=n_init, n_iter=n_iter, rounds=0).demos_
        assert len(oracle.pulled) == n_init + n_iter  # the same number of evaluations as random search gets
        bo_hits += np.isclose(objective(chosen), optimum)
        subsets = list(dict.fromkeys(random_subsets(np.random.default_rng(seed), n_cand, k, 500)))[: n_init + n_iter]
        random_hits += any(np.isclose(objective([candidates[i] for i in s]), optimum) for s in subsets)
    assert bo_hits >= 7 and bo_hits > random_hits + 3, (bo_hits, random_hits)


def test_swap_neighbours_and_random_subsets_are_valid_k_subsets():
    neighbours = swap_neighbours((0, 2), 5)
    assert len(neighbours) == 2 * 3 and len(set(neighbours)) == 6
    assert all(len(set(s) & {0, 2}) == 1 and list(s) == sorted(s) for s in neighbours)
    subsets = random_subsets(np.random.default_rng(0), 10, 4, 50)
    assert all(len(set(s)) == 4 and max(s) < 10 for s in subsets)


def test_a_generated_rationale_ends_at_its_last_answer_marker_and_the_scale_reports_the_fit():
    assert generated_rationale(" 3 + 4 = 7.\n[Answer]: 7\n") == "3 + 4 = 7."
    # a model that restates the marker mid-reasoning keeps everything before the LAST one
    assert generated_rationale("We want [Answer]: so 2 * 3 = 6.\n[Answer]: 6") == "We want [Answer]: so 2 * 3 = 6."
    assert generated_rationale("  no marker at all") == "no marker at all"  # not cut one character short
    assert Bridge().scale() == {}  # not fitted: nothing to report
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)))
    selector = fit(oracle, n_candidates=10, n_init=3, n_iter=4, n_proposals=100, rounds=2)
    assert selector.scale() == {"candidates": 10, "subsets scored": len(selector.cache_), "rounds": 2}


def test_no_subset_is_scored_twice_and_unchanged_subsets_keep_their_value():
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)))  # generate never answers right
    selector = fit(oracle, n_candidates=10, n_init=3, n_iter=4, n_proposals=100, rounds=2)
    pulls = [p for p in oracle.pulled if p != "generate"]
    assert len(pulls) == len(set(pulls))  # rationales never change here, so no prompt is ever scored again
    assert oracle.pulled.count("generate") == 2
    assert len(pulls) == 3 * (3 + 4)  # every round still scores n_init + n_iter new subsets
    assert [row["step"] for row in selector.trace()].count("generate") == 2
    assert selector.trace()[-1]["llm_calls"] == oracle.calls == len(pulls) * 3 + 2 * 10
    best = max(pulls, key=lambda p: sum(int(i.split(":")[1]) for i, _ in p))
    assert [d.id for d in selector.demos_] == [i for i, _ in best]


def test_generate_replaces_rationales_of_correct_answers_only():
    def answer(prompt: str) -> str:
        number = int(re.search(r"\d+", last_question(prompt)).group())
        return f" model reasoning for {number}.\n[Answer]: {number if number % 2 == 0 else -1}"

    # Demonstrations with model rationales score higher, so the last optimize picks them.
    oracle = FakeOracle(lambda demos: sum(d.rationale.startswith("model") for d in demos) + 0.01 * len(demos),
                        answer=answer)
    selector = fit(oracle, n_candidates=12, n_init=3, n_iter=3, n_proposals=100, rounds=1)
    by_id = {p.id: p for p in POOL}
    for cand in selector.candidates_:
        gold = by_id[cand.id]
        if int(gold.answer) % 2 == 0:
            assert cand.rationale == f"model reasoning for {gold.answer}." and cand.answer == gold.answer
        else:
            assert cand == gold  # answered wrongly: keeps the gold rationale
    # A candidate is never shown as its own demonstration while it is re-answered.
    assert all(prompt.count(last_question(prompt)) == 1 for prompt in oracle.prompts)
    assert len(oracle.prompts) == 12
    chosen = selector.select(VALIDATION[0])
    assert len(chosen) == 5 and {d.id for d in chosen} <= set(by_id)
    # The final optimize re-scored subsets whose rationales changed and kept the regenerated versions.
    current = {c.id: c for c in selector.candidates_}
    assert all(d == current[d.id] for d in chosen) and any(d.rationale.startswith("model") for d in chosen)
    first_round_best = max(r["best_reward"] for r in selector.trace() if r["round"] == 0)
    final = oracle.reward(chosen)
    assert selector.trace()[-1]["best_reward"] == pytest.approx(final) and final > first_round_best
    # the trace counts the rationales replaced: one per even-numbered candidate
    evens = sum(int(by_id[c.id].answer) % 2 == 0 for c in selector.candidates_)
    assert evens >= 2 and [r["regenerated"] for r in selector.trace() if r["step"] == "generate"] == [evens]


@pytest.mark.parametrize("budget", [0, 2])
def test_budget_before_any_subset_is_scored_fails_the_fit(budget):
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)), budget=budget)
    with pytest.raises(FitFailed, match="before any subset was scored"):
        fit(oracle, n_candidates=10, n_init=3, n_iter=4, n_proposals=100, rounds=2)
    assert oracle.calls <= budget


@pytest.mark.parametrize("budget", [14, 40])
def test_budget_exhaustion_returns_the_best_scored_subset_with_a_warning(budget):
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)), budget=budget)
    selector = fit(oracle, n_candidates=10, n_init=3, n_iter=4, n_proposals=100, rounds=2)
    chosen = selector.select(VALIDATION[0])
    assert oracle.calls <= budget
    assert len(chosen) == 5 and {d.id for d in chosen} <= {p.id for p in POOL}
    assert "the best subset scored so far is used" in selector.fit_warnings[0]
    scored = [p for p in oracle.pulled if p != "generate"]
    assert [d.id for d in chosen] == [i for i, _ in max(scored, key=lambda p: sum(int(i.split(":")[1])
                                                                                   for i, _ in p))]


def test_same_seed_same_selection():
    def reward(demos):
        return float(np.sin(sum(int(d.answer) ** 2 for d in demos)))

    runs = [fit(FakeOracle(reward), seed=s, n_candidates=10, n_init=3, n_iter=3, n_proposals=100, rounds=1)
            for s in (4, 4, 5)]
    assert [d.id for d in runs[0].demos_] == [d.id for d in runs[1].demos_]
    assert runs[0].trace() == runs[1].trace()
    assert [c.id for c in runs[0].candidates_] != [c.id for c in runs[2].candidates_]


def test_bad_parameters_raise_config_error():
    for params in ({"n_candidates": 3}, {"n_init": 0}, {"acquisition": "pi"}, {"kappa": -1.0}, {"rounds": -1}):
        with pytest.raises(ConfigError):
            create("bridge", params)
    with pytest.raises(ConfigError):
        fit(FakeOracle(lambda d: 0.0), pool=POOL[:4])  # pool smaller than k


def test_bridge_through_the_runner(tmp_path, data_dir, monkeypatch):
    answers = {}
    for line in (data_dir / "gsm8k" / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        answers[row["question"].strip()] = row["answer"].rsplit("####", 1)[1].strip()

    def respond(prompt: str) -> str:
        # Right on every other question (so generate has work), with text that depends on the demos.
        question = last_question(prompt)
        right = len(question) % 2 == 0 and question in answers
        vowels = sum(ch in "aeiou" for ch in prompt[-600:]) % 5
        return f" step {'two plus two' * vowels}\n[Answer]: {answers[question] if right else 0}\n[Question]: x"

    backend = FakeBackend(respond=respond, batch_size=8)
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: backend)
    params = {"bridge": {"n_candidates": 8, "n_init": 2, "n_iter": 2, "n_proposals": 50, "rounds": 1}}
    cfg = make_config(tmp_path, data_dir, methods=["bridge"], tasks=["gsm8k"], n_test=2, n_val=3, pool_size=30,
                      method_params=params)
    run = Runner(cfg).run()["runs"][0]
    assert run["n"] == 2 and 0 < run["llm_calls"]["selection"] <= 2 * (2 + 2) * 3 + 8
    records = lines(tmp_path / "run" / "records.jsonl")
    assert len(records) == 2 and records[0]["demo_ids"] == records[1]["demo_ids"]
    pool = GSM8K().load_splits(data_dir, n_test=2, n_val=3, pool_size=30, seed=1).pool
    assert len(records[0]["demo_ids"]) == 5 and set(records[0]["demo_ids"]) <= {p.id for p in pool}
    trace = lines(tmp_path / "run" / "fits.jsonl")[0]["trace"]
    generated = [row for row in trace if row["step"] == "generate"]
    assert len(generated) == 1 and generated[0]["regenerated"] >= 1, generated
    assert trace[-1]["llm_calls"] == run["llm_calls"]["selection"]
    assert all(a["best_reward"] <= b["best_reward"] for a, b in itertools.pairwise(trace))


def test_bridge_budget_through_the_runner(tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: FakeBackend(batch_size=8))
    params = {"bridge": {"n_candidates": 8, "n_init": 2, "n_iter": 2, "n_proposals": 50, "rounds": 1}}
    cfg = make_config(tmp_path, data_dir, methods=["bridge"], tasks=["gsm8k"], n_test=2, n_val=3, pool_size=30,
                      method_params=params, llm_budget=7)
    run = Runner(cfg).run()["runs"][0]
    assert run["budget_exhausted"] and run["llm_calls"]["selection"] == 6  # two subsets of 3 validation items
    assert run["n"] == 2 and all(len(r["demo_ids"]) == 5 for r in lines(tmp_path / "run" / "records.jsonl"))


def test_expected_improvement_is_the_gaussian_expectation_of_the_gain():
    """EI(m, s; best) = E[max(X - best, 0)] for X ~ N(m, s), checked by numerical integration."""
    from scipy import integrate, stats

    from methods.bridge import expected_improvement

    mean, std, best = np.array([0.5, 0.2, 0.31, 0.4]), np.array([0.1, 0.1, 0.05, 0.3]), 0.3
    got = expected_improvement(mean, std, best)
    for m, s, value in zip(mean, std, got):
        gain, _ = integrate.quad(lambda x: (x - best) * stats.norm.pdf(x, m, s), best, m + 12 * s)
        assert value == pytest.approx(gain, abs=1e-9)
    assert expected_improvement(np.array([0.2, 0.5]), np.zeros(2), best) == pytest.approx([0.0, 0.2])  # no spread


def test_a_proposal_maximises_the_chosen_acquisition_among_random_subsets_and_the_incumbents_neighbours(monkeypatch):
    """propose() scores every unscored proposal with a GP's mean and std (here a planted one) and returns the
    maximiser of EI, or of mean + kappa * std for "ucb"; the local proposals are the best observed subset's swaps."""
    import methods.bridge as module

    seen = {}
    weights, spread = np.linspace(-1.0, 1.0, 8), np.linspace(0.5, 0.0, 8)

    class PlantedGP:
        def predict(self, x, return_std=True):
            seen["proposals"] = x
            return x @ weights / 3.0, x @ spread

    monkeypatch.setattr(module, "fit_gp", lambda x, y, seed: PlantedGP())
    observed = {(0, 1, 2): 0.1, (1, 4, 6): 0.9, (0, 3, 5): 0.4}
    for acquisition, kappa in (("ei", 2.0), ("ucb", 2.0), ("ucb", 0.0)):
        selector = Bridge(k=3, n_proposals=5, acquisition=acquisition, kappa=kappa)
        selector.candidates_, selector.rng_, selector.gp_seed_ = list(range(8)), np.random.default_rng(0), 0
        chosen = selector.propose(dict(observed))
        x = seen["proposals"]
        mean, std = x @ weights / 3.0, x @ spread
        score = (module.expected_improvement(mean, std, 0.9) if acquisition == "ei" else mean + kappa * std)
        rows = {tuple(np.flatnonzero(row)) for row in x}
        assert chosen == tuple(np.flatnonzero(x[int(np.argmax(score))])) and chosen not in observed
        assert set(swap_neighbours((1, 4, 6), 8)) - set(observed) <= rows  # the incumbent is the best observed


def test_the_trace_of_an_unfitted_bridge_is_empty_and_a_generate_step_is_traced():
    assert Bridge().trace() == []
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)))
    selector = fit(oracle, n_candidates=10, n_init=3, n_iter=2, n_proposals=50, rounds=2)
    step = next(row for row in selector.trace() if row["step"] == "generate")
    assert set(step) >= {"round", "evaluations", "best_reward", "llm_calls", "regenerated"}
    assert step["regenerated"] == 0 and step["llm_calls"] <= oracle.calls  # the fake never answers right


def test_candidates_without_rationales_skip_the_generate_step():
    """Translation has no reasoning path to regenerate: no generation call, no generate row, no change."""
    pool = [Item(f"wmt/p:{i}", f"Sentence {i}.", str(i), "", split="pool") for i in range(12)]
    oracle = FakeOracle(lambda demos: float(sum(int(d.answer) for d in demos)), answer=lambda p: " x\n[Answer]: 1")
    selector = fit(oracle, pool=pool, n_candidates=8, n_init=2, n_iter=1, n_proposals=20, rounds=2)
    assert "generate" not in oracle.pulled and oracle.prompts == []
    assert all(row["step"] != "generate" for row in selector.trace())
    ctx = FitContext(task=GSM8K(), pool=pool, validation=VALIDATION, encoder=None, oracle=oracle, seed=0, k=5)
    assert selector.generate(ctx, 0) == 0 and all(c.rationale == "" for c in selector.candidates_)


def test_the_gp_is_the_documented_matern_plus_noise_model_with_restarts():
    """Matern 5/2 with a constant scale and white noise, each at its stated start and bounds, y normalised, two
    optimiser restarts: the prior the docstring describes (sklearn keeps it as gp.kernel; gp.kernel_ is fitted)."""
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from methods.bridge import fit_gp, inclusion_vectors

    x = inclusion_vectors([(0, 1), (1, 2), (0, 2), (2, 3)], 4)
    assert x.tolist() == [[1, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 0], [0, 0, 1, 1]]  # 0/1, not scaled
    gp = fit_gp(x, np.array([0.1, 0.5, 0.2, 0.9]), seed=3)
    expected = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(length_scale=1.0, length_scale_bounds=(1e-1, 1e2), nu=2.5) \
        + WhiteKernel(noise_level=1e-2, noise_level_bounds=(1e-6, 1e0))
    assert gp.kernel == expected and repr(gp.kernel) == repr(expected)
    params, bounds = gp.kernel.get_params(), [tuple(h.bounds.ravel()) for h in gp.kernel.hyperparameters]
    assert (params["k1__k2__nu"], params["k1__k1__constant_value"], params["k1__k2__length_scale"],
            params["k2__noise_level"]) == (2.5, 1.0, 1.0, 1e-2)
    assert bounds == [(1e-2, 1e2), (1e-1, 1e2), (1e-6, 1e0)]
    assert gp.normalize_y and gp.n_restarts_optimizer == 2 and gp.random_state == 3
