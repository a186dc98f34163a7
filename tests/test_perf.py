"""`python -m bench perf` reports P3, P4, P5 (ratios, not timed asserts)."""
import json

import pytest

from test_cli import bench

pytestmark = pytest.mark.slow


def test_perf_reports_ratios(tmp_path, data_dir):
    out = tmp_path / "perf.json"
    proc = bench("perf", "--data-dir", str(data_dir), "--items", "3", "--max-new-tokens", "8", "--p5-pulls", "2",
                 "--p5-items", "2", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert set(r) >= {"p3_speedup", "p3_outputs_identical", "p4_rank_ms", "p5_overhead_share"}
    assert r["p3_outputs_identical"] is True
    assert r["p3_speedup"] > 0 and r["p4_rank_ms"] > 0 and 0.0 <= r["p5_overhead_share"] <= 1.0
    d = r["details"]
    assert d["p3_prefilled_tokens_shared"] < d["p3_prompt_tokens"]  # the prefix is prefilled once
    assert "P3 shared-prefix speedup" in proc.stdout
