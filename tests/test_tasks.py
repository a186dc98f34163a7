import json

import pytest

from bench.errors import ConfigError, DataError
from bench.items import Item
from bench.tasks import make_task
from bench.tasks.base import normalise_text


@pytest.mark.parametrize("name, n_pool_at_least", [("gsm8k", 5000), ("aquarat", 990), ("wmt19", 2000)])
def test_splits_are_disjoint_and_reproducible(data_dir, name, n_pool_at_least):
    task = make_task(name)
    a = task.load_splits(data_dir, n_test=30, n_val=20, pool_size=None, seed=3)
    b = task.load_splits(data_dir, n_test=30, n_val=20, pool_size=None, seed=3)
    c = task.load_splits(data_dir, n_test=30, n_val=20, pool_size=None, seed=4)
    assert [it.id for it in a.test] == [it.id for it in b.test]
    assert [it.id for it in a.test] != [it.id for it in c.test]
    assert len(a.test) == 30 and len(a.validation) == 20 and len(a.pool) >= n_pool_at_least
    pool_ids = {it.id for it in a.pool}
    assert not pool_ids & {it.id for it in a.test}
    assert not pool_ids & {it.id for it in a.validation}
    held_out = {normalise_text(it.question) for it in a.test + a.validation}
    assert not any(normalise_text(it.question) in held_out for it in a.pool)
    assert {it.split for it in a.pool} == {"pool"} and {it.split for it in a.test} == {"test"}


def test_pool_size_subsample(data_dir):
    s = make_task("aquarat").load_splits(data_dir, n_test=5, n_val=5, pool_size=50, seed=0)
    assert len(s.pool) == 50


def test_gsm8k_rows_parse_answer_and_strip_annotations(data_dir):
    s = make_task("gsm8k").load_splits(data_dir, n_test=5, n_val=5, pool_size=200, seed=0)
    assert all("<<" not in it.rationale and "####" not in it.rationale for it in s.pool)
    assert all(it.answer.lstrip("-").replace(".", "").replace(",", "").isdigit() for it in s.pool)


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


def test_malformed_row_names_file_and_line(tmp_path):
    good = {"question": "q?", "options": ["A)1", "B)2", "C)3", "D)4", "E)5"], "rationale": "r", "correct": "A"}
    folder = tmp_path / "aqua_rat"
    _write(folder / "train_subset_dqlore_1000.json", [good, good, {**good, "correct": "Z"}])
    _write(folder / "dev.json", [good])
    _write(folder / "test.json", [good])
    with pytest.raises(DataError, match=r"train_subset_dqlore_1000.json:3: malformed row .*correct"):
        make_task("aquarat").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)
    _write(folder / "train_subset_dqlore_1000.json", [good, "{not json"])
    with pytest.raises(DataError, match=r":2: not valid JSON"):
        make_task("aquarat").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)
    _write(folder / "train_subset_dqlore_1000.json", [{"question": "q"}])
    with pytest.raises(DataError, match=r":1: malformed row .*options"):
        make_task("aquarat").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)


def test_missing_data_folder(tmp_path):
    with pytest.raises(DataError, match="data folder for task 'gsm8k' not found"):
        make_task("gsm8k").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)


def test_unknown_task():
    with pytest.raises(ConfigError, match="unknown task 'gsm9k'; did you mean 'gsm8k'\\? \\(known tasks: gsm8k, aquarat, wmt19"):
        make_task("gsm9k")


def test_duplicate_test_question_never_enters_pool(tmp_path):
    folder = tmp_path / "wmt19_en_zh"
    _write(folder / "train_pool.jsonl", [{"en": "Same sentence.", "zh": "一"}, {"en": "Other.", "zh": "二"}])
    _write(folder / "dev.jsonl", [{"en": "Dev.", "zh": "三"}])
    _write(folder / "test.jsonl", [{"en": "same  SENTENCE.", "zh": "一"}])
    s = make_task("wmt19").load_splits(tmp_path, n_test=1, n_val=1, pool_size=None, seed=0)
    assert [it.question for it in s.pool] == ["Other."]


GSM_DEMO = Item(id="d1", question="Tom has 2 apples and buys 3. How many?", answer="5",
                rationale="2 + 3 = 5 apples.")
AQUA_DEMO = Item(id="d2", question="What is 3x if x = 3?", answer="A", rationale="3x = 9",
                 options=("A)9", "B)10", "C)11", "D)12", "E)13"))


def test_gsm8k_prompt_shape():
    task = make_task("gsm8k")
    query = Item(id="q", question="What is 1+1?", answer="2")
    prompt = task.render([GSM_DEMO], query)
    assert prompt.startswith("You are a helpful, respectful and honest assistant helping to solve math word problems")
    assert "[Question]: Tom has 2 apples and buys 3. How many?\n[Explanation]: 2 + 3 = 5 apples.\n[Answer]: 5" in prompt
    assert prompt.endswith("[Question]: What is 1+1?\n[Explanation]:")
    assert prompt == task.prefix([GSM_DEMO]) + task.format_query(query)


def test_aquarat_prompt_shape_and_reward_reference():
    task = make_task("aquarat")
    prompt = task.render([AQUA_DEMO], AQUA_DEMO)
    assert "[Options]: A) 9, B) 10, C) 11, D) 12, E) 13\n[Explanation]: 3x = 9\n[Answer]: The option is A" in prompt
    assert prompt.endswith("[Options]: A) 9, B) 10, C) 11, D) 12, E) 13\n[Explanation]:")
    assert task.reward_reference(AQUA_DEMO) == "3x = 9\nThe option is A"


def test_zero_shot_prompt_has_instruction_and_query_only():
    task = make_task("gsm8k")
    prompt = task.render([], GSM_DEMO)
    assert prompt.count("[Question]") == 1 and "[Answer]" not in prompt


def test_wmt_prompt_and_truncation():
    task = make_task("wmt19")
    demo = Item(id="w", question="Hello.", answer="你好。")
    assert task.render([demo], Item(id="x", question="Bye.", answer="再见。")).endswith(
        "[English]: Hello.\n[Chinese]: 你好。\n\n[English]: Bye.\n[Chinese]:")
    assert task.truncate(" 再见。\n[English]: more") == "再见。"
    assert task.truncate("\n\n 再见。[English]: x") == "再见。"


def test_math_truncation_cuts_at_next_exemplar():
    task = make_task("gsm8k")
    assert task.truncate(" 1+1=2\n[Answer]: 2\n\n[Question]: next one") == "1+1=2\n[Answer]: 2"


def test_exact_match_scores():
    gsm, aqua = make_task("gsm8k"), make_task("aquarat")
    items = [Item("a", "q", "1,000"), Item("b", "q", "-2.5")]
    assert gsm.score(["1000", "-2.50"], items, ["", ""]) == [1.0, 1.0]
    assert gsm.score(["100", "2.5"], items, ["", ""]) == [0.0, 0.0]
    assert aqua.score(["A", "B"], [AQUA_DEMO, AQUA_DEMO], ["", ""]) == [1.0, 0.0]


def test_wmt19_scores_chrf_first_and_keeps_bertscore_beside_it():
    """chrF is WMT19's metric (the offline BERTScore encoder sees mostly [UNK] in Chinese); BERTScore stays an extra."""
    from bench.metrics import ChrF

    class CountingBertScore:
        def f1(self, candidates, references, lang):
            assert lang == "zh"
            return [0.5 + 0.1 * i for i in range(len(candidates))]

    task = make_task("wmt19", bertscore=CountingBertScore())
    items = [Item("a", "Bye.", "再见。"), Item("b", "Hello.", "你好。")]
    outputs = ["再见。", "世界"]
    assert task.metric_name == "chrf" and task.metric_label == "chrF"
    scores = task.score(outputs, items, outputs)
    assert scores[0] == pytest.approx(ChrF().sentence("再见。", "再见。")) and scores[0] > 0.9 and scores[1] < 0.2
    assert task.extra_metrics(outputs, items) == {"bertscore_f1": [0.5, 0.6]}


def test_run_folders_from_before_chrf_read_their_scores_as_bertscore():
    from reports.results import metric_label, metric_name

    assert (metric_name("wmt19"), metric_label("wmt19")) == ("bertscore_f1", "BERTScore F1")  # no task_info
    info = {"wmt19": {"metric": "chrf", "metric_label": "chrF"}}
    assert (metric_name("wmt19", info), metric_label("wmt19", info)) == ("chrf", "chrF")
