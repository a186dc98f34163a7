"""`bench data fetch|verify` and `--data-source hub` against a loopback server that mirrors the pinned sources
(built here from the bundled files, reversed into their upstream form): nothing reaches the internet."""
import functools
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.cli import main
from bench.data import MANIFEST, relative_url


def upstream_tree(root, data_dir):
    """Every pinned source file, as its repository serves it, rebuilt from the bundled folder."""
    for task, (folder, files) in MANIFEST.items():
        for item in files:
            bundled = (data_dir / folder / item.name).read_bytes()
            paths = [root / relative_url(item.source, p) for p in item.source.paths]
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
            if item.convert == "copy":
                paths[0].write_bytes(bundled)
            elif item.convert == "json-array-to-jsonl":
                rows = [json.loads(line) for line in bundled.decode().splitlines()]
                paths[0].write_text(json.dumps(rows, indent=1))
            else:
                rows = [json.loads(line) for line in bundled.decode("utf-8").splitlines()]
                for path, key in zip(paths, ("en", "zh")):
                    path.write_text("".join(r[key] + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def mirror(tmp_path, data_dir):
    root = tmp_path / "mirror"
    upstream_tree(root, data_dir)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_fetch_rebuilds_the_bundled_folder_byte_for_byte(tmp_path, data_dir, mirror, capsys):
    _, url = mirror
    out = tmp_path / "fetched"
    assert main(["data", "fetch", "--to", str(out), "--mirror", url]) == 0
    for task, (folder, files) in MANIFEST.items():
        for item in files:
            assert (out / folder / item.name).read_bytes() == (data_dir / folder / item.name).read_bytes()
    assert "8 file(s) written" in capsys.readouterr().out
    assert main(["data", "verify", "--data-dir", str(out)]) == 0
    assert main(["data", "fetch", "--to", str(out), "--mirror", url, "--tasks", "gsm8k"]) == 0  # kept, not refetched
    assert "0 file(s) written" in capsys.readouterr().out


def test_a_changed_source_is_refused_and_nothing_is_written(tmp_path, mirror, capsys):
    root, url = mirror
    test_file = root / relative_url(MANIFEST["gsm8k"][1][1].source, "grade_school_math/data/test.jsonl")
    test_file.write_bytes(test_file.read_bytes().replace(b"####", b"#### 0", 1))
    out = tmp_path / "fetched"
    assert main(["data", "fetch", "--to", str(out), "--mirror", url, "--tasks", "gsm8k"]) == 2
    err = capsys.readouterr().err
    assert "gsm8k/test.jsonl: sha256" in err and "nothing written" in err
    assert not (out / "gsm8k" / "test.jsonl").exists()
    assert main(["data", "fetch", "--to", str(out), "--mirror", "http://127.0.0.1:9", "--tasks", "aquarat",
                 "--timeout", "2"]) == 2
    assert "could not download http://127.0.0.1:9/google-deepmind/AQuA/" in capsys.readouterr().err


def test_verify_reports_a_changed_file(tmp_path, data_dir, capsys):
    copy = tmp_path / "data" / "gsm8k"
    copy.mkdir(parents=True)
    (copy / "train.jsonl").write_bytes((data_dir / "gsm8k" / "train.jsonl").read_bytes()[:-10])
    assert main(["data", "verify", "--tasks", "gsm8k", "--data-dir", str(tmp_path / "data")]) == 1
    out = capsys.readouterr().out
    assert "train.jsonl: sha256 differs" in out and "test.jsonl: missing" in out
    assert main(["data", "verify", "--tasks", "mmlu"]) == 2


def test_hub_source_builds_exactly_the_bundled_splits(tmp_path, data_dir, mirror, monkeypatch):
    from bench.tasks import make_task

    _, url = mirror
    monkeypatch.setenv("BENCH_DATA_MIRROR", url)
    monkeypatch.setenv("BENCH_DATA_CACHE", str(tmp_path / "cache"))
    for name in ("gsm8k", "aquarat", "wmt19"):
        task = make_task(name)
        kw = dict(n_test=30, n_val=10, pool_size=200, seed=3)
        hub, local = task.load_splits(None, source="hub", **kw), task.load_splits(data_dir, **kw)
        for split in ("pool", "validation", "test"):
            assert [(i.id, i.question, i.answer) for i in getattr(hub, split)] == \
                [(i.id, i.question, i.answer) for i in getattr(local, split)]
    assert (tmp_path / "cache" / "aqua_rat" / "train_subset_dqlore_1000.json").exists()
