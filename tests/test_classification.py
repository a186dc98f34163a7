"""Classification tasks (SST-2, TREC, AG News as bundled specs): parsing, the prompts of Calibrate Before Use,
both answering modes, contextual calibration, the rewards, macro-F1, and the runner end to end on a fake LLM."""
import json
import math
from typing import Sequence

import numpy as np
import pytest
from sklearn.metrics import f1_score

import bench
from bench.answering import answer, answer_keys, rewards
from bench.errors import ConfigError, DataError
from bench.items import Item
from bench.llm import CallScope, LLMClient
from bench.llm.base import Backend, GenerationParams, RawGeneration, RawLoglik
from bench.tasks import make_task

SCOPE = CallScope("t", "t", "inference")


class CopyingClassifier(Backend):
    """A fake LLM that favours the label word the prompt's last demonstration shows (a recency bias), and that
    writes that word when asked to generate; it records how many log-likelihoods it was asked for."""

    model_id = "fake-classifier"
    batch_size = 8

    def __init__(self, words: Sequence[str]):
        self.words = list(words)
        self.scored = 0

    def _favoured(self, context: str) -> str | None:
        found = [(context.rfind(f" {w}\n"), w) for w in self.words]
        pos, word = max(found)
        return word if pos >= 0 else None

    def loglik(self, contexts, continuations):
        self.scored += len(contexts)
        return [RawLoglik(logprob=-0.1 if c.strip() == self._favoured(ctx) else -2.0 - 0.1 * len(c), n_tokens=1)
                for ctx, c in zip(contexts, continuations)]

    def generate(self, prompts, params: GenerationParams, seeds):
        return [RawGeneration(text=f" {self._favoured(p) or 'no idea'}\nReview: more", prompt_tokens=1,
                              completion_tokens=3) for p in prompts]


def item(text, label_word, label, i=0):
    return Item(id=f"sst2/x-{i}", question=text, answer=label_word, meta={"label": label})


# ---- parsing and prompts -----------------------------------------------------------------------------------
def test_bundled_specs_parse_rows_into_label_words(data_dir):
    sst2 = make_task("sst2").load_splits(data_dir, n_test=20, n_val=5, pool_size=50, seed=0)
    assert {it.answer for it in sst2.test} <= {"Negative", "Positive"}
    assert all(it.meta["label"].lower() == it.answer.lower() for it in sst2.test)
    trec = make_task("trec")
    row = trec.parse_row({"id": "t-1", "text": "What does NASA stand for ?", "label": "ABBR", "fine_label": "ABBR:exp"},
                         "trec/test.jsonl:1")
    assert (row.id, row.answer, row.meta["label"]) == ("trec/t-1", "Ab", "ABBR")  # Calibrate Before Use's word
    agnews = make_task("agnews")
    row = agnews.parse_row({"id": "a-1", "title": "T", "description": "Chips get faster.", "text": "T Chips get faster.",
                            "label": "Sci/Tech"}, "x:1")
    assert (row.question, row.answer) == ("Chips get faster.", "Technology")  # description only, as the pool has
    with pytest.raises(ValueError, match="label 'Spam' is not one of the spec's labels"):
        agnews.parse_row({"id": "a-2", "description": "x", "label": "Spam"}, "x:2")


def test_an_unknown_label_in_a_file_names_file_and_line(tmp_path):
    folder = tmp_path / "sst2"
    folder.mkdir()
    row = {"id": "a", "text": "fine", "label": "negative"}
    (folder / "train.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({**row, "label": "meh"}) + "\n")
    (folder / "dev.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"train.jsonl:2: malformed row \(label 'meh'"):
        make_task("sst2").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)


def test_prompts_follow_calibrate_before_use():
    demos = [item("a gem", "Positive", "positive", 1), item("dull", "Negative", "negative", 2)]
    query = item("it works", "Positive", "positive", 3)
    assert make_task("sst2").render(demos, query) == (
        "Review: a gem\nSentiment: Positive\n\nReview: dull\nSentiment: Negative\n\nReview: it works\nSentiment:")
    assert make_task("sst2").render([], query) == "Review: it works\nSentiment:"  # zero-shot: no empty block first
    trec = make_task("trec")
    assert trec.render([], Item("q", "Who wrote Hamlet ?", "Person")) == (
        "Classify the questions based on whether their answer type is a Number, Location, Person, Description, "
        "Entity, or Abbreviation.\n\nQuestion: Who wrote Hamlet ?\nAnswer Type:")
    assert make_task("agnews").choice_words() == ["World", "Sports", "Business", "Technology", "Science"]


# ---- generate-and-parse ------------------------------------------------------------------------------------
@pytest.mark.parametrize("task, output, label", [
    ("sst2", " Positive", "Positive"),
    ("sst2", "negative.", "Negative"),
    ("sst2", "I think it is positive overall", "Positive"),
    ("sst2", "Neutral", ""),
    ("trec", "Abbreviation", "Ab"),  # a word that starts with the label word
    ("trec", "Entity, maybe Person", "Entity"),
    ("agnews", "Science", "Technology"),  # an alias names its label
    ("agnews", "Sports and World", "Sports"),  # the first label named
    ("agnews", "Probably World news, maybe Sports", "World"),  # the first named, when no label opens the output
])
def test_generated_answers_are_read_as_labels(task, output, label):
    assert make_task(task).extract(output) == label


def test_generate_mode_end_to_end_on_a_fake_model():
    task = make_task("sst2").configure(scoring="generate")
    backend = CopyingClassifier(task.choice_words())
    client = LLMClient(backend, params=GenerationParams(max_new_tokens=1000, temperature=0))
    assert client.params_for(task).max_new_tokens == 8 and client.params_for(task).stop == ("\n",)
    demos = [item("dull", "Negative", "negative", 1), item("a gem", "Positive", "positive", 2)]
    items = [item("fine", "Positive", "positive", 3), item("bad", "Negative", "negative", 4)]
    got = answer(client, task, [demos, demos], items, scope=SCOPE)
    assert got.outputs == ["Positive", "Positive"] and got.scores == [1.0, 0.0] and got.label_probs is None
    assert task.reward == "metric" and list(rewards(task, got, items, None)) == [1.0, 0.0]


# ---- rank classification and calibration ------------------------------------------------------------------
def test_label_probabilities_sum_aliases_and_normalise():
    task = make_task("agnews")
    logliks = np.log([0.1, 0.2, 0.1, 0.3, 0.3])  # World, Sports, Business, Technology, Science
    probs = task.label_probs(logliks)
    assert probs == pytest.approx([0.1, 0.2, 0.1, 0.6])


def test_contextual_calibration_is_zhao_et_al_diagonal_w():
    task = make_task("sst2")
    p = np.array([0.7, 0.3])
    content_free = [np.log([0.9, 0.1]), np.log([0.7, 0.3]), np.log([0.8, 0.2])]  # mean 0.8 / 0.2
    p_cf = np.mean(np.exp(content_free), axis=0)
    p_cf /= p_cf.sum()
    expected = np.linalg.inv(np.identity(2) * p_cf) @ p  # their eval_accuracy, mode diagonal_W, b = 0
    got = task.label_probs(np.log(p), content_free)
    assert got == pytest.approx(expected / expected.sum())
    assert np.argmax(got) == 1 and np.argmax(task.label_probs(np.log(p))) == 0  # calibration flips this one
    # label words' likelihoods do not sum to 1: the content-free rows are averaged before normalising (their
    # get_p_content_free), so a row with little mass weighs little
    uneven = [np.log([0.09, 0.01]), np.log([0.7, 0.3])]
    p_cf = np.mean(np.exp(uneven), axis=0)
    p_cf /= p_cf.sum()
    expected = p / p_cf
    assert task.label_probs(np.log(p), uneven) == pytest.approx(expected / expected.sum())


def test_rank_mode_answers_rewards_and_calls():
    task = make_task("sst2").configure(reward="label-prob")
    assert (task.scoring, task.calibration, task.reward) == ("rank", "none", "label-prob")
    backend = CopyingClassifier(task.choice_words())
    client = LLMClient(backend)
    demos = [item("dull", "Negative", "negative", 1), item("a gem", "Positive", "positive", 2)]
    items = [item("fine", "Positive", "positive", 3), item("bad", "Negative", "negative", 4)]
    got = answer(client, task, [demos, demos], items, scope=SCOPE)
    assert got.predictions == ["Positive", "Positive"] and got.scores == [1.0, 0.0]
    favoured = 1 / (1 + math.exp(-2.0 - 0.1 * len(" Negative") + 0.1))  # softmax of the two log-likelihoods
    assert got.label_probs[0]["Positive"] == pytest.approx(favoured)
    assert list(rewards(task, got, items, None)) == pytest.approx([favoured, 1 - favoured])  # the gold's probability
    assert backend.scored == 4  # two items x two label words
    assert len(answer_keys(client, task, demos, items, client.params_for(task), [0, 0])) == 2  # one call per item
    task.configure(calibration="contextual", reward="label-prob")
    assert len(answer_keys(client, task, demos, items, client.params_for(task), [0, 0])) == 2 + 3  # + content-free
    calibrated = answer(client, task, [demos, demos], items, scope=SCOPE)
    # every content-free input sees the same last demonstration: calibration cancels the recency bias exactly
    assert calibrated.label_probs[0]["Positive"] == pytest.approx(0.5)


def test_a_cached_ranking_is_reused_only_for_the_same_label_words(tmp_path):
    from bench.llm.cache import CallCache

    task = make_task("sst2")
    backend = CopyingClassifier(task.choice_words())
    client = LLMClient(backend, CallCache(tmp_path / "cache.sqlite"))
    demos = [item("dull", "Negative", "negative", 1)]
    items = [item("fine", "Positive", "positive", 2)]
    assert len(client.classify(task, demos, items, scope=SCOPE)[0][0]) == 2 and backend.scored == 2
    assert len(client.classify(task, demos, items, scope=SCOPE)[0][0]) == 2 and backend.scored == 2  # cached
    more = make_task("sst2")  # the same prompt, one more word for Positive
    more.aliases = {"Negative": ("Negative",), "Positive": ("Positive", "Great")}
    assert client.classify_keys(more, demos, items)[3] != client.classify_keys(task, demos, items)[3]
    logliks = client.classify(more, demos, items, scope=SCOPE)[0][0]
    assert len(logliks) == 3 and backend.scored == 5 and len(more.label_probs(logliks)) == 2


@pytest.mark.parametrize("task, settings, message", [
    ("gsm8k", {"scoring": "rank"}, "task 'gsm8k' has no labels"),
    ("sst2", {"scoring": "generate", "calibration": "contextual"}, "calibrates ranked labels"),
    ("sst2", {"scoring": "generate", "reward": "label-prob"}, "needs ranked labels"),
    ("sst2", {"scoring": "ranking"}, "scoring must be one of"),
])
def test_impossible_answering_settings_are_refused(task, settings, message):
    with pytest.raises(ConfigError, match=message):
        make_task(task).configure(**settings)


def test_default_answering_per_task():
    gsm8k = make_task("gsm8k").configure()
    assert (gsm8k.scoring, gsm8k.reward) == ("generate", "bertscore")  # the paper's tasks keep theirs
    sst2 = make_task("sst2").configure()
    assert (sst2.scoring, sst2.calibration, sst2.reward) == ("rank", "none", "metric")


# ---- results ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["trec", "trec-from-a-gone-task-file"])  # reports read the labels from task_info
def test_macro_f1_beside_accuracy(tmp_path, name):
    from bench.records import ItemRecord, append_jsonl
    from reports.results import build_results

    gold = ["Ab", "Number", "Number", "Person", "Person", "Person"]
    pred = ["Number", "Number", "Number", "Person", "", "Person"]
    append_jsonl(tmp_path / "records.jsonl", [ItemRecord("knn", name, f"i{i}", [], "", p, p, g, float(p == g), 0.0)
                                              for i, (g, p) in enumerate(zip(gold, pred))])
    labels = ["Number", "Location", "Person", "Description", "Entity", "Ab"]
    (tmp_path / "config.json").write_text(json.dumps({"methods": ["knn"], "identity": {"tasks": [name]},
                                                      "task_info": {name: {"metric": "accuracy", "metric_label": "Acc",
                                                                           "lang": "en", "labels": labels}}}))
    row = build_results(tmp_path)["runs"][0]
    assert row["metric_label"] == "Acc" and row["score"] == pytest.approx(4 / 6)
    assert row["extra"]["macro_f1"] == pytest.approx(f1_score(gold, pred, labels=labels, average="macro",
                                                              zero_division=0))
    low, high = row["extra_ci"]["macro_f1"]
    assert low <= row["extra"]["macro_f1"] <= high


def test_each_bootstrap_draw_of_macro_f1_is_sklearn_s_on_that_resample():
    """The interval's draws come from per-label counts, not 1000 f1_score calls: each equals f1_score exactly,
    with answers outside the labels, labels never seen, and items drawn more than once."""
    from reports.results import resampled_macro_f1

    rng = np.random.default_rng(0)
    for _ in range(12):
        labels = [f"l{i}" for i in range(rng.integers(2, 7))]
        n = int(rng.integers(2, 40))
        gold = np.array([labels[i] for i in rng.integers(0, len(labels) - 1, n)])  # the last label never gold
        answers = labels + ["", "other"]
        pred = np.array([answers[i] for i in rng.integers(0, len(answers), n)])
        draws = rng.integers(0, n, size=(110, n))  # over one block of 100
        want = [f1_score(gold[d], pred[d], labels=labels, average="macro", zero_division=0) for d in draws]
        assert resampled_macro_f1(gold, pred, labels, draws).tolist() == want

def test_tables_show_macro_f1_and_keep_mixed_secondary_metrics_in_their_columns():
    from bench.records import ItemRecord
    from reports.tables import extra_table, secondary_table

    wmt = {"method": "knn", "task": "wmt19", "score": 0.5, "extra": {"chrf": 0.25}, "extra_ci": {"chrf": [0.2, 0.3]}}
    trec = {"method": "knn", "task": "trec", "score": 0.6, "extra": {"macro_f1": 0.4}, "extra_ci": {"macro_f1": [0.3, 0.5]}}
    records = [ItemRecord("knn", "wmt19", f"w{i}", [], "", "", "", "", 0.5, 0.0, extra={"chrf": 0.25}) for i in range(3)]
    records += [ItemRecord("knn", "trec", f"t{i}", [], "", "", "", "", 0.6, 0.0) for i in range(3)]
    table = secondary_table([wmt, trec], records, baseline=None)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines()[2:]]
    assert ["knn", "trec", "macro_f1", "40.00 [30.00, 50.00]"] in [r[:4] for r in rows]
    assert "p (Holm)" not in table and all(len(r) == 4 for r in rows)  # no test ran: no empty test columns
    base = [ItemRecord("zero-shot", "wmt19", f"w{i}", [], "", "", "", "", 0.5, 0.0, extra={"chrf": 0.2 + 0.01 * i})
            for i in range(3)]
    tested = secondary_table([wmt, {**wmt, "method": "zero-shot"}], records + base, baseline="zero-shot")
    assert "p (Holm)" in tested and "+" in tested.splitlines()[2]  # a test ran: its difference and p are shown
    extra = extra_table([wmt, trec])
    header, _, *lines = [[c.strip() for c in line.split("|")[1:-1]] for line in extra.splitlines()]
    assert header == ["Method", "Task", "chrf", "macro_f1"]
    assert ["knn", "wmt19", "25.00", ""] in lines and ["knn", "trec", "", "40.00"] in lines


# ---- the runner ---------------------------------------------------------------------------------------------
def test_a_run_ranks_labels_and_records_probabilities(tmp_path, data_dir):
    task = make_task("sst2")
    backend = CopyingClassifier(task.choice_words())
    results = bench.evaluate(["zero-shot", "few-shot"], ["sst2"], llm=backend, n_test=6, n_val=4, pool_size=40,
                             data_dir=data_dir, out=tmp_path / "run", no_progress=True)
    rows = {r["method"]: r for r in results["runs"]}
    assert rows["few-shot"]["metric"] == "accuracy" and rows["few-shot"]["scoring"] == "rank"
    assert "macro_f1" in rows["few-shot"]["extra"]
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert all(set(r["label_probs"]) == {"Negative", "Positive"} for r in records)
    assert all(r["output"] == max(r["label_probs"], key=r["label_probs"].get) for r in records)
    calls = [json.loads(line) for line in (tmp_path / "run" / "calls.jsonl").read_text().splitlines()]
    assert {c["kind"] for c in calls} == {"classify"}
