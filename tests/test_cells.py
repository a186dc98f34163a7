"""bench.cells: setting a selector's rows aside when its settings change (the runner's side: test_runner.py)."""
import json

from bench.cells import describe_diff, methods_with_rows, set_aside


def _write(path, rows, tail=""):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + tail, encoding="utf-8")


def test_set_aside_moves_one_methods_rows_whole_even_with_unicode_line_separators_and_a_cut_line(tmp_path):
    odd = {"method": "mmr", "output": "a\u2028b\u0085c"}  # str.splitlines would cut this row in three
    _write(tmp_path / "records.jsonl", [{"method": "knn", "i": 1}, odd, {"method": "knn", "i": 2}],
           tail='{"method": "mm')  # a killed run's cut last line
    _write(tmp_path / "fits.jsonl", [{"method": "mmr"}, {"method": "knn"}])
    _write(tmp_path / "calls.rank1.jsonl", [{"method": "mmr", "key": "x"}])
    dest = set_aside(tmp_path, {"mmr": {"params": {"lam": 0.2}}})
    assert [json.loads(l) for l in (dest / "records.jsonl").read_text(encoding="utf-8").split("\n") if l] == [odd]
    kept = (tmp_path / "records.jsonl").read_text(encoding="utf-8")
    assert kept.endswith('{"method": "mm\n')  # the cut line ends, so the next appended row starts clean
    assert [json.loads(l)["i"] for l in kept.split("\n")[:2]] == [1, 2]
    assert (tmp_path / "fits.jsonl").read_text() == '{"method": "knn"}\n'
    assert (tmp_path / "calls.rank1.jsonl").read_text() == "" and (dest / "calls.rank1.jsonl").exists()
    assert json.loads((dest / "cells.json").read_text()) == {"mmr": {"params": {"lam": 0.2}}}


def test_a_method_with_a_fit_or_calls_but_no_records_yet_counts_as_run(tmp_path):
    _write(tmp_path / "records.jsonl", [{"method": "knn"}])
    _write(tmp_path / "fits.jsonl", [{"method": "case-dynamic"}])  # cut before its first records
    _write(tmp_path / "calls.jsonl", [{"method": "lens"}])
    assert methods_with_rows(tmp_path) == {"knn", "case-dynamic", "lens"}


def test_describe_diff_names_each_changed_setting_with_both_values():
    old = {"params": {"k": 5, "pulls_per_query": 5}, "budget": 10000}
    new = {"params": {"k": 5, "pulls_per_query": 13}, "budget": 26000}
    assert describe_diff(old, new) == "budget 10000 -> 26000, params.pulls_per_query 5 -> 13"
