"""`python -m bench data fetch|verify`: the bundled data folder, rebuilt from its sources at pinned revisions.

Every file is downloaded from the commit its data README names (`../shared/data/*/README.md`), converted the
way that README says (nothing for byte-for-byte copies; a JSON array to JSON Lines for the DQ-LoRe AQuA pool;
line-aligned `.en`/`.zh` files to `{"en", "zh"}` rows for WMT), and checked against its sha256 before it is
written; a mismatch writes nothing. `--data-source hub` uses the same path into a cache folder, so hub runs
see exactly the bundled splits. The checksums of the WMT files are not in their README: they were computed
from the bundled files.
"""
from __future__ import annotations

import hashlib
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
    paths: tuple[str, ...]  # one file, or the .en and .zh files of a parallel set


@dataclass(frozen=True)
class DataFile:
    name: str
    source: Source
    sha256: str
    convert: str = "copy"  # "copy" | "json-array-to-jsonl" | "parallel-to-jsonl"


GSM8K = Source("openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c", ())
AQUA = Source("google-deepmind/AQuA", "26b64ed1f22208c6742f47df547dfd65088ec30d", ())
DQLORE = Source("AI4fun/DQ-LoRe", "edd84621386f99373aba6149ba032d5b0b275321", ("index_data/aqua/aqua/train.json",))
OPUS = Source("Helsinki-NLP/OPUS-MT-testsets", "ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180", ())


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
}


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


def convert(kind: str, blobs: list[bytes]) -> bytes:
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
    raise ValueError(kind)


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
            data = convert(item.convert, [_download(url_of(item.source, p, base), timeout) for p in item.source.paths])
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
