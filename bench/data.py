"""`python -m bench data fetch|verify`: the bundled data folder, rebuilt from its sources at pinned revisions.

Every file is downloaded from the commit its data README names (`../shared/data/*/README.md`), converted the
way that README says, and checked against its sha256 before it is written; a mismatch, or a source that cannot
be parsed, writes nothing. The conversion kinds:

- `copy`: byte-for-byte (GSM8K, AQuA dev/test);
- `json-array-to-jsonl`: one JSON array to one object per line (the DQ-LoRe AQuA pool);
- `parallel-to-jsonl`: line-aligned `.en`/`.zh` files to `{"en", "zh"}` rows (WMT);
- `sst2-tsv-to-jsonl`: the GLUE SST-2 tsv to `{"id", "text", "label"}` rows (SST-2 dev);
- `sst2-brunnurs-tsv-to-jsonl`: brunnurs' SST-2 train.tsv with its 5 altered numeric rows put back, then as
  `sst2-tsv-to-jsonl` (SST-2 train);
- `trec-txt-to-jsonl`: `COARSE:fine question` lines to `{"id", "text", "label", "fine_label"}` rows (TREC);
- `agnews-csv-to-jsonl`: the official AG News csv plus its classes.txt to `{"id", "title", "description",
  "text", "label"}` rows (AG News test);
- `alps-tsv-to-jsonl`: alps' tab-separated `description, label` rows to the same fields with no title (the
  AG News train subset).

`--data-source hub` uses the same path into a cache folder, so hub runs see exactly the bundled splits. The
checksums of the WMT files are not in their README: they were computed from the bundled files.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.errors import DataError

GITHUB_RAW = "https://raw.githubusercontent.com"
MIRROR_ENV = "BENCH_DATA_MIRROR"  # a base URL laid out like raw.githubusercontent.com (tests, offline mirrors)


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    paths: tuple[str, ...]  # one file; the .en and .zh files of a parallel set; AG News' csv and classes.txt


@dataclass(frozen=True)
class DataFile:
    name: str
    source: Source
    sha256: str
    convert: str = "copy"  # one of the kinds in the module docstring
    ids: str = ""  # row id prefix of the converting kinds that number rows, e.g. "sst2-train" -> "sst2-train-0"


GSM8K = Source("openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c", ())
AQUA = Source("google-deepmind/AQuA", "26b64ed1f22208c6742f47df547dfd65088ec30d", ())
DQLORE = Source("AI4fun/DQ-LoRe", "edd84621386f99373aba6149ba032d5b0b275321", ("index_data/aqua/aqua/train.json",))
OPUS = Source("Helsinki-NLP/OPUS-MT-testsets", "ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180", ())
BRUNNURS = Source("brunnurs/binary-classification-bert", "35e1628db50472679176dd31b992534a3866a86e", ())
CBU = Source("tonyzhaozh/few-shot-learning", "e04d8643be91c2cce63f33e07760ff75d5aa3ad0", ())
CHARCNN = Source("mhjabreel/CharCnn_Keras", "555590db4219b1243abb1918effd6a7425a2d75f", ())
ALPS = Source("forest-snow/alps", "3c7ef2c98249fc975a897b27f275695f97d5b7a9", ())


def _at(source: Source, *paths: str) -> Source:
    return Source(source.repo, source.commit, paths)


def _newstest(year: int) -> Source:
    return _at(OPUS, f"testsets/en-zh/newstest{year}.en", f"testsets/en-zh/newstest{year}.zh")


# task -> (folder inside the data folder, its files)
MANIFEST: dict[str, tuple[str, tuple[DataFile, ...]]] = {
    "gsm8k": ("gsm8k", (
        DataFile("train.jsonl", _at(GSM8K, "grade_school_math/data/train.jsonl"),
                 "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
        DataFile("test.jsonl", _at(GSM8K, "grade_school_math/data/test.jsonl"),
                 "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
    )),
    "aquarat": ("aqua_rat", (
        DataFile("dev.json", _at(AQUA, "dev.json"), "4a52301d8a49ae0b286f8e697f9c5da1b109b247b825b47b4c6de34312dceec5"),
        DataFile("test.json", _at(AQUA, "test.json"),
                 "de41581881ef95c5588c44ddc701c77fd480839241dd422a0d181262af24520c"),
        DataFile("train_subset_dqlore_1000.json", DQLORE,
                 "d9b654e0a87b64546a68a0f63037ee755cf6401a2b4dcc0d90c8b232ea1dda4b", "json-array-to-jsonl"),
    )),
    "wmt19": ("wmt19_en_zh", (
        DataFile("test.jsonl", _newstest(2019), "9214703eca1b077fcf0c44107f5ed7b76d0d29b00c73b2c1de77f5c8caf9cf9c",
                 "parallel-to-jsonl"),
        DataFile("dev.jsonl", _newstest(2018), "3d041cf02b3d060acdd61800669b3dd601f87770515d8b9add3656b0c2c65994",
                 "parallel-to-jsonl"),
        DataFile("train_pool.jsonl", _newstest(2017),
                 "9ee319f3c3307fec21233f5a37a6426782e0d1f2c6be0a396a0497a717bdf548", "parallel-to-jsonl"),
    )),
    "sst2": ("sst2", (
        DataFile("train.jsonl", _at(BRUNNURS, "data/SST2/train.tsv"),
                 "b48923b5f4af5d13baee548ccf0b84fe70d00d42a6a83bc0f0ae8d42611d8f12", "sst2-brunnurs-tsv-to-jsonl",
                 "sst2-train"),
        DataFile("dev.jsonl", _at(BRUNNURS, "data/SST2/dev.tsv"),
                 "4a56894619d5f85c2a270a0d17bd5d497b1dc6324e5a07e2c029de41c9b4f06a", "sst2-tsv-to-jsonl", "sst2-dev"),
    )),
    "trec": ("trec", (
        DataFile("train.jsonl", _at(CBU, "data/trec/train.txt"),
                 "7f09bf844c25bd80d2da7675da62055d30224b52848c3d2de0dc901d9fade116", "trec-txt-to-jsonl", "trec-train"),
        DataFile("test.jsonl", _at(CBU, "data/trec/test.txt"),
                 "94eaa04730d947ad72f3335bb4d6a317fe792a5fa2edaf7f82ee19769b7081c4", "trec-txt-to-jsonl", "trec-test"),
    )),
    "agnews": ("ag_news", (
        DataFile("test.jsonl", _at(CHARCNN, "data/ag_news_csv/test.csv", "data/ag_news_csv/classes.txt"),
                 "efae758e71daefb939793577bb05c2144e662406da32bef58dacd60d64e88bc3", "agnews-csv-to-jsonl",
                 "ag_news-test"),
        DataFile("train_subset_alps_desc_only.jsonl", _at(ALPS, "data/agnews/dev.tsv"),
                 "b1c9dc0399d04d7e78e02896f18da33b1a6b5c2b147c4789c090c43ad6adb158", "alps-tsv-to-jsonl",
                 "ag_news-train_subset_alps"),
    )),
}

# brunnurs' SST-2 train.tsv, line (header = line 0) -> (its altered row, the GLUE row); the data README gives these
# line numbers as data rows, but they count the header: the ids of these rows are sst2-train-17688 etc.
SST2_TRAIN_REPAIRS = {
    17689: ("10\t1", "10 \t1"),
    48105: ("10000\t1", "10,000 \t1"),
    48483: ("1987\t1", "1987 \t1"),
    52196: ("3000\t1", "3000 \t1"),
    55384: ("98\t1", "98 \t1"),
}
SST2_LABELS = {"0": "negative", "1": "positive"}


def relative_url(source: Source, path: str) -> str:
    return f"{source.repo}/{source.commit}/{path}"


def url_of(source: Source, path: str, base: str | None = None) -> str:
    return f"{(base or os.environ.get(MIRROR_ENV) or GITHUB_RAW).rstrip('/')}/{relative_url(source, path)}"


def _download(url: str, timeout: float) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(
        {} if url.startswith(("http://127.0.0.1", "http://localhost")) else None))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise DataError(f"could not download {url}: {getattr(exc, 'reason', exc)}") from None


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def _sst2_rows(lines: list[str], ids: str):
    if not lines or lines[0] != "sentence\tlabel" or lines[-1] != "":
        raise DataError("not a GLUE SST-2 tsv: the header 'sentence<TAB>label' or the final newline is missing")
    for i, line in enumerate(lines[1:-1]):
        sentence, label = line.split("\t")  # GLUE ends every sentence with one space before the tab
        yield {"id": f"{ids}-{i}", "text": sentence[:-1], "label": SST2_LABELS[label]}


def _sst2_repair(lines: list[str]) -> list[str]:
    lines = list(lines)
    for n, (altered, glue) in SST2_TRAIN_REPAIRS.items():
        if n >= len(lines) or lines[n] != altered:
            raise DataError(f"SST-2 train line {n} is not brunnurs' altered row {altered!r}; cannot repair it")
        lines[n] = glue
    return lines


def _trec_rows(text: str, ids: str):
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1] if lines[-1] == "" else lines):  # the pinned files have no final newline
        tag, question = line.split(" ", 1)
        yield {"id": f"{ids}-{i}", "text": question.replace("\ufffd", " "), "label": tag.split(":")[0],
               "fine_label": tag}


def _agnews_rows(csv_text: str, classes_text: str, ids: str):
    classes = dict(enumerate(classes_text.split("\n")[:-1], start=1))  # class_index 1 -> the first line
    reader = csv.reader(io.StringIO(csv_text, newline=""), quotechar='"', delimiter=",", quoting=csv.QUOTE_ALL,
                        skipinitialspace=True)  # the reader HF `ag_news` uses
    for i, (index, title, description) in enumerate(reader):
        yield {"id": f"{ids}-{i}", "title": title, "description": description,
               "text": title + " " + description, "label": classes[int(index)]}


def _alps_rows(text: str, ids: str):
    for i, (description, label) in enumerate(csv.reader(io.StringIO(text, newline=""), delimiter="\t",
                                                         quotechar='"')):
        yield {"id": f"{ids}-{i}", "title": None, "description": description, "text": description, "label": label}


def convert(kind: str, blobs: list[bytes], ids: str = "") -> bytes:
    """The bundled file's bytes from its source files' bytes (the order of Source.paths); a malformed source
    raises DataError (or ValueError, KeyError, IndexError from parsing it, which fetch turns into DataError)."""
    if kind == "copy":
        return blobs[0]
    if kind == "json-array-to-jsonl":  # the DQ-LoRe pool: one JSON array -> one object per line
        rows = json.loads(blobs[0].decode("utf-8"))
        return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    if kind == "parallel-to-jsonl":  # line i of .en with line i of .zh, text unchanged
        en, zh = (b.decode("utf-8").split("\n") for b in blobs)
        en, zh = (lines[:-1] if lines and lines[-1] == "" else lines for lines in (en, zh))
        if len(en) != len(zh):
            raise DataError(f"parallel files have {len(en)} and {len(zh)} lines")
        return "".join(json.dumps({"en": a, "zh": b}, ensure_ascii=False) + "\n" for a, b in zip(en, zh)).encode()
    if kind == "sst2-tsv-to-jsonl":
        return _jsonl(_sst2_rows(blobs[0].decode("utf-8").split("\n"), ids))
    if kind == "sst2-brunnurs-tsv-to-jsonl":  # brunnurs' train.tsv is GLUE's but for 5 numeric rows, put back first
        return _jsonl(_sst2_rows(_sst2_repair(blobs[0].decode("utf-8").split("\n")), ids))
    if kind == "trec-txt-to-jsonl":
        return _jsonl(_trec_rows(blobs[0].decode("utf-8"), ids))
    if kind == "agnews-csv-to-jsonl":
        return _jsonl(_agnews_rows(blobs[0].decode("utf-8"), blobs[1].decode("utf-8"), ids))
    if kind == "alps-tsv-to-jsonl":
        return _jsonl(_alps_rows(blobs[0].decode("utf-8"), ids))
    raise NotImplementedError(f"unknown conversion kind {kind!r}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_tasks(tasks: list[str]) -> list[str]:
    unknown = [t for t in tasks if t not in MANIFEST]
    if unknown:
        raise DataError(f"no pinned sources for task(s) {', '.join(unknown)}; known: {', '.join(MANIFEST)}")
    return tasks


def fetch(tasks: list[str], to: Path, base: str | None = None, timeout: float = 60.0, log=print) -> list[Path]:
    """Download, convert and verify every file of the tasks into TO/<folder>/; returns the files written.
    A file already there with the right checksum is kept."""
    written = []
    for task in check_tasks(tasks):
        folder, files = MANIFEST[task]
        for item in files:
            target = Path(to) / folder / item.name
            if target.exists() and sha256(target.read_bytes()) == item.sha256:
                log(f"{target}: present, checksum ok")
                continue
            blobs = [_download(url_of(item.source, p, base), timeout) for p in item.source.paths]
            try:
                data = convert(item.convert, blobs, item.ids)
            except (DataError, ValueError, KeyError, IndexError) as exc:  # a malformed source is refused too
                why = str(exc) if isinstance(exc, DataError) else f"{type(exc).__name__}: {exc}"
                raise DataError(f"{task}/{item.name}: cannot convert the source ({item.source.repo}@"
                                f"{item.source.commit[:12]}): {why}; nothing written") from None
            digest = sha256(data)
            if digest != item.sha256:
                raise DataError(f"{task}/{item.name}: sha256 {digest} differs from the pinned {item.sha256} "
                                f"({item.source.repo}@{item.source.commit[:12]}); nothing written")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(target.suffix + ".part")
            partial.write_bytes(data)
            partial.replace(target)
            log(f"{target}: {len(data):,} bytes, sha256 ok ({item.source.repo}@{item.source.commit[:12]})")
            written.append(target)
    return written


def verify(tasks: list[str], data_dir: Path) -> list[str]:
    """Problems with a data folder's files (missing or changed), empty when every checksum matches."""
    problems = []
    for task in check_tasks(tasks):
        folder, files = MANIFEST[task]
        for item in files:
            path = Path(data_dir) / folder / item.name
            if not path.exists():
                problems.append(f"{path}: missing")
            elif sha256(path.read_bytes()) != item.sha256:
                problems.append(f"{path}: sha256 differs from the pinned source")
    return problems


def hub_data_dir(tasks: list[str], cache: Path | None = None, log=None) -> Path:
    """`--data-source hub`: the pinned files fetched once into a cache folder (BENCH_DATA_CACHE or
    ~/.cache/icl-select-bench/data); every later run reads them from there."""
    root = Path(cache or os.environ.get("BENCH_DATA_CACHE") or Path.home() / ".cache" / "icl-select-bench" / "data")
    fetch([t for t in tasks if t in MANIFEST], root, log=log or (lambda _msg: None))
    return root
