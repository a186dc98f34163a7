"""The synthetic `rules` task: generated the same way every time, the truth it exposes, and a per-query selector
checked against it (knn must find same-rule demonstrations; a random draw does not)."""
from collections import Counter

import numpy as np
import pytest

from bench.tasks import make_task
from bench.tasks.rules import CODE_WORDS, TOPICS, _generate
from methods.base import FitContext, create


@pytest.fixture(scope="module")
def rules():
    return make_task("rules").configure()


def test_items_are_reproducible_unique_and_follow_their_rule(rules):
    a = rules.load_splits(None, n_test=50, n_val=20, pool_size=300, seed=1)
    b = rules.load_splits(None, n_test=50, n_val=20, pool_size=300, seed=1)
    assert [it.id for it in a.test] == [it.id for it in b.test] and [it.id for it in a.pool] == [it.id for it in b.pool]
    pool, val, test = _generate(rules.n_rules)
    texts = [it.question for split in (pool, val, test) for it in split]
    assert len(texts) == len(set(texts)) == 4600  # no input in two places: a test item is never a demonstration
    for it in test:
        topic = list(TOPICS)[it.meta["rule"]]
        assert set(it.question.split(", ")) <= set(TOPICS[topic].split()) and len(it.question.split(", ")) == 3
        assert it.answer == CODE_WORDS[it.meta["rule"]] == rules.labels[rules.rule_of(it)]


def test_rule_frequencies_and_the_task_level_truth(rules):
    counts = Counter(it.meta["rule"] for it in _generate(rules.n_rules)[0])
    assert counts.most_common(1)[0][0] == 0 and min(counts.values()) > 60  # rule 0 is the most frequent
    assert rules.best_task_level_rules(3) == ["alpha", "bravo", "charlie"]
    assert rules.frequencies == sorted(rules.frequencies, reverse=True) and sum(rules.frequencies) == pytest.approx(1)


def test_same_rule_share(rules):
    s = rules.load_splits(None, n_test=5, n_val=2, pool_size=400, seed=0)
    query = s.test[0]
    same = [d for d in s.pool if d.answer == query.answer][:4]
    other = [d for d in s.pool if d.answer != query.answer][:4]
    assert rules.same_rule_share(same, query) == 1.0 and rules.same_rule_share(other, query) == 0.0
    assert rules.same_rule_share(same[:2] + other[:2], query) == 0.5


def test_knn_finds_same_rule_demonstrations_and_random_does_not(rules, encoder):
    s = rules.load_splits(None, n_test=40, n_val=4, pool_size=600, seed=0)
    ctx = FitContext(task=rules, pool=s.pool, validation=s.validation, encoder=encoder, oracle=None, seed=0, k=5)
    knn = create("knn", {"k": 5}).fit(ctx)
    few = create("few-shot", {"k": 5}).fit(ctx)
    knn_share = np.mean([rules.same_rule_share(knn.select(q), q) for q in s.test])
    few_share = np.mean([rules.same_rule_share(few.select(q), q) for q in s.test])
    assert knn_share > 0.9, knn_share  # the topic is in the input: the nearest demonstrations share the rule
    assert few_share < 0.4, few_share  # a random fixed set matches the query's rule about as often as chance


def test_a_rules_prompt_shows_the_answer_only_with_a_same_rule_demonstration(rules):
    s = rules.load_splits(None, n_test=3, n_val=2, pool_size=200, seed=0)
    query = s.test[0]
    other = [d for d in s.pool if d.answer != query.answer][:5]
    assert query.answer not in rules.prefix(other)
    assert rules.render(other[:1], query) == f"Input: {other[0].question}\nOutput: {other[0].answer}\n\n" \
                                             f"Input: {query.question}\nOutput:"
