import json

import pytest

from bench.errors import BudgetExhausted, LLMError
from bench.items import Item
from bench.llm import CallCache, CallLog, CallScope, GenerationParams, LLMClient
from bench.oracle import RewardOracle
from bench.tasks import make_task
from fakes import FakeBackend

INF = CallScope("knn", "gsm8k", "inference")
SEL = CallScope("case", "gsm8k", "selection")
GREEDY = GenerationParams(max_new_tokens=8, temperature=0.0)


def client(tmp_path, **kw):
    backend = FakeBackend(**kw)
    return LLMClient(backend, CallCache(tmp_path / "cache.sqlite"), CallLog(tmp_path / "calls.jsonl"), GREEDY), backend


def calls(tmp_path):
    return [json.loads(l) for l in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_cache_miss_then_hit_survives_a_new_process(tmp_path):
    c, backend = client(tmp_path)
    first = c.generate(["p1", "p2", "p3"], scope=INF)
    assert [g.cached for g in first] == [False] * 3 and len(backend.prompts) == 3
    # a new client on the same cache file (a restarted run) answers from disk
    c2, backend2 = client(tmp_path)
    second = c2.generate(["p2", "p1", "p4"], scope=INF)
    assert [g.cached for g in second] == [True, True, False]
    assert backend2.prompts == ["p4"]
    assert second[0].text == first[1].text and second[0].compute_s == pytest.approx(first[1].compute_s)
    log = calls(tmp_path)
    assert [r["cached"] for r in log] == [False, False, False, False, True, True]
    assert all(r["phase"] == "inference" and r["method"] == "knn" for r in log)


def test_duplicate_prompts_in_one_call_are_computed_once(tmp_path):
    c, backend = client(tmp_path)
    out = c.generate(["same", "same", "other"], scope=INF)
    assert backend.prompts == ["same", "other"]
    assert [g.cached for g in out] == [False, True, False]
    assert [r["cached"] for r in calls(tmp_path)].count(False) == 2


def test_key_covers_model_params_and_sample_index(tmp_path):
    c, _ = client(tmp_path)
    sampled = GenerationParams(max_new_tokens=8, temperature=0.25)
    keys = {c.generate_key("p", GREEDY, 0), c.generate_key("p", sampled, 0), c.generate_key("p", sampled, 1),
            c.generate_key("p", GenerationParams(max_new_tokens=9, temperature=0.0), 0)}
    assert len(keys) == 4
    # greedy decoding is deterministic: the sample index does not make a new call
    assert c.generate_key("p", GREEDY, 0) == c.generate_key("p", GREEDY, 5)
    other = LLMClient(FakeBackend(model_id="other-model"), None, None, GREEDY)
    assert other.generate_key("p", GREEDY, 0) != c.generate_key("p", GREEDY, 0)


def test_sampled_outputs_do_not_depend_on_batching(tmp_path):
    sampled = GenerationParams(max_new_tokens=8, temperature=0.25)
    a, _ = client(tmp_path / "a", batch_size=1)
    b, _ = client(tmp_path / "b", batch_size=3)
    prompts = ["x", "y", "z"]
    ta = [g.text for g in a.generate(prompts, scope=INF, params=sampled, sample_indices=[0, 0, 1])]
    tb = [g.text for g in b.generate(prompts[::-1], scope=INF, params=sampled, sample_indices=[1, 0, 0])][::-1]
    assert ta == tb


def test_phase_accounting_and_tokens(tmp_path):
    c, _ = client(tmp_path)
    c.generate(["a b c"], scope=SEL)
    c.generate(["d e"], scope=INF)
    c.loglik(["ctx"], [" cont"], scope=SEL)
    log = calls(tmp_path)
    assert [(r["phase"], r["kind"]) for r in log] == [("selection", "generate"), ("inference", "generate"),
                                                      ("selection", "loglik")]
    assert log[0]["prompt_tokens"] == 3 and log[0]["completion_tokens"] > 0
    assert all(r["prefilled_tokens"] == r["prompt_tokens"] for r in log)


def test_backend_crash_is_one_llm_error_and_keeps_answers(tmp_path):
    c, backend = client(tmp_path, batch_size=1, fail_after=2)
    with pytest.raises(LLMError, match="fake-model: RuntimeError: fake backend stopped on purpose"):
        c.generate(["a", "b", "c"], scope=INF)
    assert len(CallCache(tmp_path / "cache.sqlite")) == 2  # the two answered calls are kept
    assert len(calls(tmp_path)) == 2


def test_evaluate_shares_one_prefix(tmp_path):
    c, backend = client(tmp_path, batch_size=8)
    task = make_task("gsm8k")
    demos = [Item(f"d{i}", f"question {i}", str(i), "because") for i in range(3)]
    items = [Item(f"v{i}", f"val {i}", str(i)) for i in range(4)]
    gens = c.evaluate(task, demos, items, scope=SEL)
    assert backend.prefix_calls == [(task.prefix(demos), 4)]
    assert all(task.extract(task.truncate(g.text)) == "3" for g in gens)  # the fake saw 3 demos
    # same prompts through generate() hit the cache
    again = c.generate([task.render(demos, it) for it in items], scope=SEL, params=c.params_for(task))
    assert all(g.cached for g in again)


def test_oracle_budget_counts_distinct_calls(tmp_path, bertscore):
    c, backend = client(tmp_path, batch_size=8)
    task = make_task("gsm8k")
    pool = [Item(f"d{i}", f"question {i}", str(i), "because") for i in range(6)]
    val = [Item(f"v{i}", f"val {i}", "2", "two") for i in range(4)]
    oracle = RewardOracle(c, task, "case", bertscore, budget=10)
    r1 = oracle.pull(pool[:2], val)
    assert r1.shape == (4,) and oracle.calls == 4
    # the same arm again under greedy decoding is the same calls: free
    oracle.pull(pool[:2], val)
    assert oracle.calls == 4 and len(backend.prompts) == 4
    oracle.pull(pool[2:4], val)
    assert oracle.calls == 8 and oracle.remaining == 2
    with pytest.raises(BudgetExhausted):
        oracle.pull(pool[4:6], val)
    assert oracle.budget_exhausted and oracle.calls == 8 and len(backend.prompts) == 8
    assert len(oracle.history) == 3


def test_oracle_rewards_prefer_the_right_answer(tmp_path, bertscore):
    task = make_task("gsm8k")
    right = FakeBackend(respond=lambda p: " two plus two is four\n[Answer]: 4")
    wrong = FakeBackend(respond=lambda p: " the moon is made of cheese\n[Answer]: 99")
    val = [Item("v", "What is 2+2?", "4", "two plus two is four")]
    good = RewardOracle(LLMClient(right, None, None, GREEDY), task, "m", bertscore).pull([], val)[0]
    bad = RewardOracle(LLMClient(wrong, None, None, GREEDY), task, "m", bertscore).pull([], val)[0]
    assert good > bad + 0.3 and good > 0.75


def test_oracle_repeated_pulls_draw_new_samples_when_sampling(tmp_path, bertscore):
    backend = FakeBackend()
    c = LLMClient(backend, None, None, GenerationParams(max_new_tokens=8, temperature=0.25))
    oracle = RewardOracle(c, make_task("gsm8k"), "m", bertscore)
    val = [Item("v", "q", "1", "r")]
    oracle.pull([], val)
    oracle.pull([], val)
    assert len(backend.prompts) == 2 and oracle.calls == 2
