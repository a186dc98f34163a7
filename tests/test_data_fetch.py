"""`bench data fetch|verify` and `--data-source hub` against a loopback server that mirrors the pinned sources
(built here from the bundled files: the raw files the folder keeps as they are, the others reversed into their
upstream form): nothing reaches the internet."""
import csv
import functools
import hashlib
import io
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath

import pytest

from bench import data as bench_data
from bench.cli import main
from bench.data import MANIFEST, relative_url

ALL = ",".join(MANIFEST)  # explicit, whatever the CLI's default task list is
NEW = ("sst2", "trec", "agnews")
# sha256 of the upstream files that the shared folder does not keep, as their data READMEs give them
BRUNNURS_SST2_TRAIN_SHA = "5c47819a1d04cfabc7afcc79a919c97b0b367101ad42d3ff148d67bf501384c2"
ALPS_AGNEWS_DEV_SHA = "7a0811e0006080bf4de17752c5466450ff3db778be71bc5bcf3c4e99b5f0803d"
# the shared folder keeps these sources byte-for-byte, under the source file's own name
KEPT_RAW = ("sst2-tsv-to-jsonl", "trec-txt-to-jsonl", "agnews-csv-to-jsonl")


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _brunnurs_sst2_train(rows):
    """GLUE's train.tsv rebuilt from the rows, then altered as brunnurs' copy is: a sentence that is a number lost
    its trailing space and its thousands separator (`10,000 ` -> `10000`)."""
    out = ["sentence\tlabel\n"]
    for r in rows:
        label = {"negative": "0", "positive": "1"}[r["label"]]
        number = r["text"].replace(",", "").isdigit()
        out.append((r["text"].replace(",", "") if number else r["text"] + " ") + "\t" + label + "\n")
    return "".join(out).encode("utf-8")


def _alps_tsv(rows):
    """alps' pandas tsv: `description<TAB>label`, no header or index, quoted only where needed, `"` doubled."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter="\t", quotechar='"', lineterminator="\n")
    writer.writerows([r["description"], r["label"]] for r in rows)
    return buffer.getvalue().encode("utf-8")


def upstream_tree(root, data_dir):
    """Every pinned source file, as its repository serves it, rebuilt from the bundled folder."""
    for task, (folder, files) in MANIFEST.items():
        for item in files:
            bundled = (data_dir / folder / item.name).read_bytes()
            paths = [root / relative_url(item.source, p) for p in item.source.paths]
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
            rows = [json.loads(line) for line in bundled.decode("utf-8").splitlines()] if item.convert != "copy" else []
            if item.convert == "copy":
                paths[0].write_bytes(bundled)
            elif item.convert == "json-array-to-jsonl":
                paths[0].write_text(json.dumps(rows, indent=1))
            elif item.convert == "parallel-to-jsonl":
                for path, key in zip(paths, ("en", "zh")):
                    path.write_text("".join(r[key] + "\n" for r in rows), encoding="utf-8")
            elif item.convert in KEPT_RAW:
                for path, source_path in zip(paths, item.source.paths):
                    path.write_bytes((data_dir / folder / PurePosixPath(source_path).name).read_bytes())
            elif item.convert == "sst2-brunnurs-tsv-to-jsonl":
                paths[0].write_bytes(_brunnurs_sst2_train(rows))
                assert _sha(paths[0].read_bytes()) == BRUNNURS_SST2_TRAIN_SHA  # the reversal is brunnurs' file
            elif item.convert == "alps-tsv-to-jsonl":
                paths[0].write_bytes(_alps_tsv(rows))
                assert _sha(paths[0].read_bytes()) == ALPS_AGNEWS_DEV_SHA  # the reversal is alps' file
            else:
                raise AssertionError(f"no reversal for {item.convert}")


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
    assert main(["data", "fetch", "--to", str(out), "--mirror", url, "--tasks", ALL]) == 0
    for task, (folder, files) in MANIFEST.items():
        for item in files:
            assert (out / folder / item.name).read_bytes() == (data_dir / folder / item.name).read_bytes()
    assert "14 file(s) written" in capsys.readouterr().out
    assert main(["data", "verify", "--data-dir", str(out), "--tasks", ALL]) == 0
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


def _new_files():
    return [(task, item) for task in NEW for item in MANIFEST[task][1]]


@pytest.mark.parametrize("task,item", _new_files(), ids=lambda v: getattr(v, "name", v))
def test_new_converters_hash_to_the_pinned_values(data_dir, mirror, task, item):
    root, _ = mirror
    folder = MANIFEST[task][0]
    assert item.sha256 in (data_dir / folder / "README.md").read_text(encoding="utf-8")  # pinned = the README's
    assert _sha((data_dir / folder / item.name).read_bytes()) == item.sha256
    blobs = [(root / relative_url(item.source, p)).read_bytes() for p in item.source.paths]
    converted = bench_data.convert(item.convert, blobs, item.ids)
    assert _sha(converted) == item.sha256
    assert converted == (data_dir / folder / item.name).read_bytes()


def test_sst2_train_needs_the_repair_and_refuses_an_unaltered_file(mirror):
    root, _ = mirror
    item = MANIFEST["sst2"][1][0]
    brunnurs = (root / relative_url(item.source, item.source.paths[0])).read_bytes()
    # brunnurs' rows converted as they are: 5 texts differ, so the checksum would not match
    assert _sha(bench_data.convert("sst2-tsv-to-jsonl", [brunnurs], item.ids)) != item.sha256
    repaired = bench_data.convert(item.convert, [brunnurs], item.ids)
    assert b'{"id": "sst2-train-48104", "text": "10,000", "label": "positive"}\n' in repaired
    glue = brunnurs.replace(b"\n10000\t1\n", b"\n10,000 \t1\n")  # one row already in its GLUE form
    with pytest.raises(bench_data.DataError, match="line 48105 is not brunnurs' altered row"):
        bench_data.convert(item.convert, [glue], item.ids)


def _case_id(task, path, *_):
    return f"{task}-{path.rsplit('/', 1)[-1]}"


CHANGED_ROWS = [  # (task, source path, a row, that row changed)
    ("sst2", "data/SST2/train.tsv", b"\nhide new secretions from the parental units \t0\n",
     b"\nhide new secretions from the parental units \t1\n"),
    ("sst2", "data/SST2/dev.tsv", b"\nunflinchingly bleak and desperate \t0\n",
     b"\nunflinchingly bleak and desperate \t1\n"),
    ("trec", "data/trec/train.txt", b"DESC:manner How did serfdom", b"DESC:reason How did serfdom"),
    ("trec", "data/trec/test.txt", b"?\n", b" ?\n"),
    ("agnews", "data/ag_news_csv/test.csv", b'"3","Fears for T N pension', b'"2","Fears for T N pension'),
    ("agnews", "data/ag_news_csv/classes.txt", b"World\nSports\n", b"Sports\nWorld\n"),
    ("agnews", "data/agnews/dev.tsv", b"Spam King Sanford Wallace", b"Spam King Sanford  Wallace"),
]


@pytest.mark.parametrize("task,path,row,changed", CHANGED_ROWS, ids=[_case_id(*r) for r in CHANGED_ROWS])
def test_a_changed_source_row_of_a_new_task_is_refused(tmp_path, mirror, capsys, task, path, row, changed):
    root, url = mirror
    folder, files = MANIFEST[task]
    item = next(i for i in files if path in i.source.paths)
    source = root / relative_url(item.source, path)
    assert source.read_bytes().count(row) >= 1
    source.write_bytes(source.read_bytes().replace(row, changed, 1))
    out = tmp_path / "fetched"
    assert main(["data", "fetch", "--to", str(out), "--mirror", url, "--tasks", task]) == 2
    err = capsys.readouterr().err
    assert f"{task}/{item.name}: sha256" in err and "nothing written" in err
    assert not (out / folder / item.name).exists()


MALFORMED = [  # (task, source path, a part, what replaces it): sources that cannot be parsed at all
    ("sst2", "data/SST2/dev.tsv", b"sentence\tlabel\n", b""),
    ("sst2", "data/SST2/train.tsv", b"\n10000\t1\n", b"\n10,000 \t1\n"),
    ("trec", "data/trec/test.txt", b"NUM:dist How far is it from Denver to Aspen ?", b"NUM:dist"),
    ("agnews", "data/ag_news_csv/test.csv", b'"3","Fears for T N pension after talks",', b'"3",'),
    ("agnews", "data/ag_news_csv/test.csv", b'"3","Fears', b'"0","Fears'),
]


@pytest.mark.parametrize("task,path,part,replacement", MALFORMED,
                         ids=[f"{_case_id(*r)}-{n}" for n, r in enumerate(MALFORMED)])
def test_a_malformed_source_is_refused_with_one_line(tmp_path, mirror, capsys, task, path, part, replacement):
    root, url = mirror
    folder, files = MANIFEST[task]
    item = next(i for i in files if path in i.source.paths)
    source = root / relative_url(item.source, path)
    source.write_bytes(source.read_bytes().replace(part, replacement, 1))
    out = tmp_path / "fetched"
    assert main(["data", "fetch", "--to", str(out), "--mirror", url, "--tasks", task]) == 2
    err = capsys.readouterr().err
    assert f"{task}/{item.name}: cannot convert the source" in err and "nothing written" in err
    assert not (out / folder / item.name).exists()
