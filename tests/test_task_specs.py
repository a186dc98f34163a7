"""Tasks defined in YAML files (`--task-file`): every field checked with a one-line error before any model loads,
data from files beside the spec (JSON Lines or CSV) or from a Hugging Face dataset repository (a loopback
server stands in for the Hub), and `bench list` / a run that use them."""
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

import bench
from bench.errors import ConfigError
from bench.tasks import TASKS, load_task_file, make_task
from bench.tasks.spec import load_spec
from test_classification import CopyingClassifier

ROOT = Path(__file__).resolve().parent.parent
SPEC = {
    "name": "mood",
    "description": "a tiny mood task",
    "data": {"path": "data", "pool": "pool.jsonl", "validation": None, "test": "test.jsonl"},
    "fields": {"input": "text", "answer": "y"},
    "instruction": "Tell the mood.",
    "template": {"demo": "Text: {input}\nMood: {answer}", "query": "Text: {input}\nMood:"},
    "labels": {"0": "sad", "1": "glad"},
}


def write_spec(folder: Path, spec: dict, name: str = "mood.yaml", rows: int = 12) -> Path:
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for file, n in (("pool.jsonl", rows), ("test.jsonl", 6)):
        (data / file).write_text("".join(json.dumps({"text": f"{file} text {i}", "y": i % 2}) + "\n" for i in range(n)))
    path = folder / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def changed(**edits) -> dict:
    """SPEC with dotted keys replaced (None deletes the key)."""
    spec = json.loads(json.dumps(SPEC))
    for dotted, value in edits.items():
        *path, last = dotted.split("__")
        target = spec
        for key in path:
            target = target[key]
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return spec


@pytest.fixture(autouse=True)
def forget_task_files():
    before = dict(TASKS)
    yield
    TASKS.clear()
    TASKS.update(before)


def test_a_spec_task_loads_renders_and_scores(tmp_path):
    name = load_task_file(write_spec(tmp_path, SPEC))
    task = make_task(name).configure()
    assert (task.metric_name, task.labels, task.scoring, task.description) == ("accuracy", ("sad", "glad"), "rank",
                                                                               "a tiny mood task")
    splits = task.load_splits(None, n_test=3, n_val=2, pool_size=None, seed=0)
    assert splits.test[0].answer in ("sad", "glad") and splits.test[0].id.startswith("mood/data/test.jsonl:")
    assert task.render(splits.pool[:1], splits.test[0]).startswith("Tell the mood.\n\nText: pool.jsonl text")
    assert task.extract(" glad!") == "glad" and task.score(["glad"], [splits.test[0]], [""])[0] in (0.0, 1.0)


def test_a_csv_file_and_a_template_input(tmp_path):
    spec = changed(data__pool="pool.csv", data__test="test.csv", fields__input="{head} / {body}")
    path = write_spec(tmp_path, spec)
    for file in ("pool.csv", "test.csv"):
        (tmp_path / "data" / file).write_text("head,body,y\n" + "".join(f"h{i},\"b, {i}\",{i % 2}\n" for i in range(8)))
    task = make_task(load_task_file(path))
    splits = task.load_splits(None, n_test=2, n_val=2, pool_size=None, seed=0)
    assert splits.test[0].question.startswith("h") and " / b, " in splits.test[0].question
    assert task.parse_row({"head": None, "body": "b", "y": "1"}, "x:1").question == "/ b"  # null: empty, not "None"
    (tmp_path / "data" / "test.csv").write_text("head,body,y\nh,b,1\nh2,b2\n")
    with pytest.raises(bench.errors.DataError, match=r"test.csv:3: 3 columns expected"):
        task.load_splits(None, n_test=2, n_val=2, pool_size=None, seed=0)


def test_a_generation_spec_reads_numbers(tmp_path):
    spec = changed(labels=None, answer="number", metric="numeric", template__demo="Q: {input}\nA: {answer}",
                   template__query="Q: {input}\nA:")
    task = make_task(load_task_file(write_spec(tmp_path, spec))).configure()
    assert (task.scoring, task.reward, task.labels) == ("generate", "bertscore", ())
    from bench.items import Item

    assert task.extract("about 1,200 apples") == "1200"
    assert task.score(["1200", "3"], [Item("a", "q", "1200.0"), Item("b", "q", "4")], ["", ""]) == [1.0, 0.0]


def test_a_generation_spec_reads_a_regex_group_and_matches_up_to_case_and_spacing(tmp_path):
    from bench.items import Item

    spec = changed(labels=None, answer="regex", pattern=r"Answer: (\w+)", metric="exact_match",
                   template__demo="Q: {input}\nA: {answer}", template__query="Q: {input}\nA:")
    task = make_task(load_task_file(write_spec(tmp_path, spec))).configure()
    assert task.extract("It is blue. Answer: Blue.") == "Blue" and task.extract("no idea") == ""
    assert task.score(["  the  Blue ", "red"], [Item("a", "q", "The blue"), Item("b", "q", "blue")], ["", ""]) == [1.0, 0.0]


def test_no_validation_question_is_left_in_the_pool(tmp_path):
    from bench.items import Item

    task = make_task(load_task_file(write_spec(tmp_path, SPEC)))
    pool = [Item(f"p{i}", q, "sad") for i, q in enumerate(["A gem", "dull", "fine", "bad"])]
    splits = task.subsample(pool, [Item("v", "a  GEM", "sad")], [Item("t", "Dull", "sad")], n_test=None, n_val=1,
                            pool_size=None, seed=0)
    assert [it.question for it in splits.pool] == ["fine", "bad"]


@pytest.mark.parametrize("edits, message", [
    ({"name": None}, "field 'name' is required"),
    ({"name": "Mood Task"}, "field 'name' must be lower-case letters"),
    ({"colour": "red"}, "field 'colour' is unknown"),
    ({"data__folder": "x"}, "field 'data' needs exactly one of folder"),
    ({"data__pool": None}, "field 'data.pool' is required"),
    ({"data__tests": "t.jsonl"}, "field 'data.tests' is unknown"),
    ({"fields__answer": None}, "field 'fields.answer' is required"),
    ({"template__demo": "Text: {input}"}, "field 'template.demo' must contain {answer}"),
    ({"template__query": "Text: {input}\nMood: {answer}"}, "field 'template.query' may use {input} only"),
    ({"template__demo": "Text: {input\nMood: {answer}"}, "field 'template.demo' is not a valid template"),
    ({"template__demo": "{input} {rationale} {answer}"}, "uses {rationale} but fields.rationale is not set"),
    ({"labels": {"0": "sad", "1": "Sad"}}, "field 'labels' names one word for two labels"),
    ({"labels": {"0": "sad"}}, "field 'labels' needs at least two labels"),
    ({"labels": {"0": [], "1": "glad"}}, "field 'labels.0' must be a label word or a list of words"),
    ({"labels": None, "metric": "accuracy"}, "field 'metric' is 'accuracy' (of labels) but the spec has no labels"),
    ({"labels": None, "answer": "label", "metric": "exact_match"}, "field 'answer' is 'label' but the spec has no"),
    ({"answer": "regex"}, "field 'pattern' is required when answer is 'regex'"),
    ({"labels": None, "answer": "regex", "pattern": "(", "metric": "exact_match"}, "field 'pattern' is not a valid"),
    ({"labels": None, "answer": "regex", "pattern": "x", "metric": "exact_match"}, "field 'pattern' needs a group"),
    ({"metric": "f1"}, "field 'metric' must be one of accuracy"),
    ({"metric": "exact_match"}, "field 'metric' must be accuracy for a spec with labels"),
    ({"max_new_tokens": 0}, "field 'max_new_tokens' must be positive"),
    ({"stop": "x"}, "field 'stop' must be a list"),
    ({"stop": ["\n", ""]}, "field 'stop' must be a list of non-empty strings"),
    ({"data": {"hub": {"dataset": "a/b", "revision": "c" * 40, "branch": "main"}, "pool": "p.jsonl", "test": "t.jsonl"}},
     "field 'data.hub.branch' is unknown"),
    ({"template": "Text: {input}"}, "field 'template' must be a mapping"),
])
def test_bad_specs_fail_with_one_line_naming_the_field(tmp_path, edits, message):
    path = write_spec(tmp_path, changed(**edits))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert message in str(err.value) and str(err.value).startswith(f"task spec {path}: ")
    assert "\n" not in str(err.value)


def test_not_yaml_and_a_taken_name(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(ConfigError, match="name 'sst2' is already a task"):
        load_task_file(write_spec(tmp_path, changed(name="sst2")))


def bench_cli(*args, env=None, timeout=300):
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def test_cli_lists_a_task_file_and_refuses_a_bad_one_before_any_model(tmp_path):
    path = write_spec(tmp_path, SPEC)
    listed = bench_cli("list", "--task-file", str(path))
    assert listed.returncode == 0 and "mood " in listed.stdout and "a tiny mood task" in listed.stdout
    bad = write_spec(tmp_path, changed(template__query="Mood:"), name="bad.yaml")
    proc = bench_cli("--task-file", str(bad), "--tasks", "mood", "--methods", "knn", "--out", str(tmp_path / "r"),
                     "--llm", "no-such-model-anywhere")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: task spec {bad}: field 'template.query' must contain {{input}}"
    assert not (tmp_path / "r").exists()


def test_a_run_on_a_task_file(tmp_path):
    path = write_spec(tmp_path, SPEC)
    backend = CopyingClassifier(["sad", "glad"])
    results = bench.evaluate(["few-shot", "knn"], ["mood"], llm=backend, task_file=[path], n_test=4, n_val=2, k=2,
                             out=tmp_path / "run", no_progress=True)
    assert {r["method"] for r in results["runs"]} == {"few-shot", "knn"}
    assert all(r["metric"] == "accuracy" and r["scoring"] == "rank" for r in results["runs"])
    info = json.loads((tmp_path / "run" / "config.json").read_text())["task_info"]["mood"]
    assert info["labels"] == ["sad", "glad"]  # reports read the task from here, the spec file may be gone


class FakeHub(BaseHTTPRequestHandler):
    """The Hub's file endpoint: /datasets/OWNER/NAME/resolve/REVISION/PATH, with the headers huggingface_hub reads."""

    files: dict[str, bytes] = {}
    revision = "0123456789abcdef0123456789abcdef01234567"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool):
        parts = self.path.split("?")[0].split("/")
        found = len(parts) > 6 and parts[1] == "datasets" and parts[4] == "resolve" and parts[5] == self.revision
        data = self.files.get("/".join(parts[6:])) if found else None
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", self.revision)
        self.end_headers()
        if body:
            self.wfile.write(data)


def test_hub_files_at_a_pinned_revision(tmp_path):
    rows = "".join(json.dumps({"text": f"hub text {i}", "y": i % 2}) + "\n" for i in range(10)).encode()
    FakeHub.files = {"data/train.jsonl": rows, "data/test.jsonl": rows[: len(rows) // 2]}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = changed(data={"hub": {"dataset": "someone/moods", "revision": FakeHub.revision},
                             "pool": "data/train.jsonl", "test": "data/test.jsonl"})
        path = write_spec(tmp_path, spec)
        env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
               "HF_HOME": str(tmp_path / "hf"), "BENCH_CACHE_DIR": str(tmp_path / "cache")}
        proc = bench_cli("--task-file", str(path), "--tasks", "mood", "--methods", "zero-shot", "--n-test", "2",
                         "--n-val", "2", "--dry-run", env=env)
        assert proc.returncode == 0, proc.stderr
        assert "mood" in proc.stdout
        copied = tmp_path / "cache" / "hub-tasks" / f"someone--moods@{FakeHub.revision}" / "data" / "train.jsonl"
        assert copied.read_bytes() == rows
        copied.write_bytes(rows[:10])  # a stale or truncated copy is replaced by the hub's file
        proc = bench_cli("--task-file", str(path), "--tasks", "mood", "--methods", "zero-shot", "--n-test", "2",
                         "--n-val", "2", "--dry-run", env=env)
        assert proc.returncode == 0, proc.stderr
        assert copied.read_bytes() == rows
        missing = write_spec(tmp_path, changed(data={"hub": {"dataset": "someone/moods", "revision": "f" * 40},
                                                     "pool": "data/train.jsonl", "test": "data/test.jsonl"}),
                             name="missing.yaml")
        proc = bench_cli("--task-file", str(missing), "--tasks", "mood", "--methods", "zero-shot", "--dry-run", env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith("error: task 'mood': could not fetch data/train.jsonl from dataset someone/moods@")
    finally:
        server.shutdown()
