"""bench/embedding_cache.py: embeddings kept across runs, keyed by the encoder's identity and the text; safe under
several processes; a second run embeds nothing it embedded before, and is still charged its own embedding time."""
import json
import multiprocessing
import os

import numpy as np
import pytest

from bench.embedding_cache import EmbeddingCache, encoder_identity, resolve
from bench.encoder import Encoder

TEXTS = ["the cat sat on the mat", "a dog barked", "rain again today", "the cat sat on the mat"]


def test_a_second_encoder_serves_every_vector_from_the_cache_without_loading_its_model(tmp_path):
    path = tmp_path / "e.sqlite"
    first = Encoder(cache=path)
    first.account()
    vectors = first.encode(TEXTS)
    assert first.from_cache == 0 and first.seconds > 0
    second = Encoder(cache=path)
    second.account()
    again = second.encode(TEXTS)
    assert second._model is None  # not even loaded: every vector came from the file
    assert second.from_cache == 3 and second.seconds == 0.0
    np.testing.assert_array_equal(again, vectors)
    # charged what embedding took, as a method served by another method's embeddings is (issue: figures)
    assert second.charged_seconds == pytest.approx(first.charged_seconds) and second.charged_seconds > 0
    third = Encoder(cache=path)
    third.encode(TEXTS + ["something new"])
    assert third.from_cache == 3 and third._model is not None  # only the new text is embedded


def test_another_encoder_or_changed_weights_never_get_the_vectors(tmp_path):
    path = tmp_path / "e.sqlite"
    cache = EmbeddingCache(path, "model-a")
    cache.put_many({"x": (np.ones(4, dtype=np.float32), 0.1)})
    assert EmbeddingCache(path, "model-a").count(["x"]) == 1
    assert EmbeddingCache(path, "model-b").count(["x"]) == 0
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    before = encoder_identity(str(folder))
    (folder / "model.safetensors").write_bytes(b"\1" + b"\0" * 999)  # same size, other weights
    assert encoder_identity(str(folder)) != before
    assert encoder_identity("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"


def test_the_option_resolves_auto_off_and_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_EMBEDDING_CACHE", str(tmp_path / "x.sqlite"))
    assert resolve("auto") == tmp_path / "x.sqlite" and resolve("off") is None
    assert resolve(str(tmp_path / "y.sqlite")) == tmp_path / "y.sqlite"
    monkeypatch.delenv("BENCH_EMBEDDING_CACHE")
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "c"))
    assert resolve("auto") == tmp_path / "c" / "embeddings.sqlite"


@pytest.fixture(scope="module")
def module_fixture_cache():
    """What a module-scoped fixture (the end-to-end runs) resolves `auto` to: built before any test's own cache."""
    return resolve("auto")


def test_a_module_scoped_fixture_never_embeds_into_the_user_s_cache(module_fixture_cache, tmp_path_factory):
    assert module_fixture_cache.is_relative_to(tmp_path_factory.getbasetemp())


def _writer(path: str, offset: int) -> None:
    cache = EmbeddingCache(path, "m")
    rng = np.random.default_rng(offset)
    for start in range(0, 400, 20):  # overlapping texts, written in small batches while the other process writes
        cache.put_many({f"text {i}": (rng.random(8).astype(np.float32), 0.01) for i in range(start, start + 40)})


def test_two_processes_filling_the_same_file_store_one_row_a_text(tmp_path):
    path = str(tmp_path / "e.sqlite")
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(path, n)) for n in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    cache = EmbeddingCache(path, "m")
    assert cache.count() == 420
    assert all(v.shape == (8,) for v, _ in cache.get_many([f"text {i}" for i in range(420)]).values())


def test_a_second_run_embeds_nothing_and_the_dry_run_says_so(tmp_path, data_dir, monkeypatch, capsys):
    """knn twice on the same data: the second run's results say every text came from the cache, its log embeds
    nothing, and its selections are the first run's; a dry run counts what is cached before either."""
    import logging

    import bench.runner as runner_mod
    from bench.cli import main
    from fakes import FakeBackend

    monkeypatch.setattr(runner_mod, "make_backend", lambda spec: FakeBackend())
    cache = tmp_path / "emb.sqlite"
    args = ["--methods", "knn", "--tasks", "trec", "--n-test", "6", "--n-val", "2", "--pool-size", "80",
            "--data-dir", str(data_dir), "--embedding-cache", str(cache), "--no-progress", "--llm", "gemma3-270m"]
    assert main([*args, "--out", str(tmp_path / "plan"), "--dry-run"]) == 0
    assert "Embedding cache: " + str(cache) + " (empty" in capsys.readouterr().out
    runs = []
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / name)]) == 0
        runs.append(json.loads((tmp_path / name / "results.json").read_text()))
    served = [r["meta"]["embedding_cache"]["texts_served"] for r in runs]
    assert served[0] == 0 and served[1] > 0
    log = (tmp_path / "b" / "run.log").read_text()
    assert "embedding " not in log.split("fit knn")[-1].split("inference knn")[0]  # knn's fit embedded nothing
    picks = [[json.loads(l)["demo_ids"] for l in (tmp_path / n / "records.jsonl").read_text().splitlines()]
             for n in ("a", "b")]
    assert picks[0] == picks[1]
    assert main([*args, "--out", str(tmp_path / "plan"), "--dry-run"]) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("Embedding cache:")][0]
    held, total = (int(x.replace(",", "")) for x in line.split(": ")[2].split(" of this run's ")[0:1] +
                   [line.split(" of this run's ")[1].split(" ")[0]])
    assert 0 < held <= total
    logging.getLogger("bench").handlers.clear()
