"""Sharded reward-table builds: `table build --shard i/n` records a slice of the arms (the arms built whole), and
`table merge` joins the slices into the table an unsharded build records, byte for byte in its arrays."""
import numpy as np
import pytest

from bench.cli import main
from bench.errors import ConfigError
from bench.llm import CallCache, LLMClient
from bench.reward_table import RewardTable, build, join_shards, shard_arms
from bench.tasks import make_task
from fakes import RulesLearner
from test_cli import assert_one_line_error, bench

ARRAYS = ("rewards", "metric", "loglik", "item_ids", "split", "arm_demo_ids")


@pytest.fixture(scope="module")
def setting(encoder):
    task = make_task("rules").configure()
    splits = task.load_splits(None, n_test=6, n_val=6, pool_size=80, seed=0)
    return task, splits, encoder


def make(setting, path, shard=None):
    task, splits, encoder = setting
    client = LLMClient(RulesLearner(), CallCache(path))
    return build(task, splits, client, encoder, None, n_arms=7, k=3, seed=0, samples=2, progress=False, shard=shard)


def test_four_shards_joined_are_the_unsharded_builds_arrays_byte_for_byte(setting, tmp_path):
    whole = make(setting, tmp_path / "whole.sqlite")
    whole.save(tmp_path / "whole.npz")
    paths = []
    for i in range(4):
        part = make(setting, tmp_path / f"s{i}.sqlite", shard=(i, 4))  # each job its own cache
        assert part.meta["shard"] == {"index": i, "of": 4, "arms": list(shard_arms(7, (i, 4)))}
        part.save(tmp_path / f"s{i}.npz")
        paths.append(tmp_path / f"s{i}.npz")
    assert [len(RewardTable.load(p).rewards) for p in paths] == [2, 2, 1, 2]
    assert "too few arms to test whether they differ" in RewardTable.load(paths[2]).summary()  # `build` prints it
    code = main(["table", "merge", str(paths[2]), *[a for p in (paths[0], paths[3], paths[1]) for a in ("--merge", str(p))],
                 "--out", str(tmp_path / "joined.npz")])  # in any order
    assert code == 0
    with np.load(tmp_path / "whole.npz") as a, np.load(tmp_path / "joined.npz") as b:
        for name in ARRAYS:
            assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name
    joined = RewardTable.load(tmp_path / "joined.npz")
    assert "shard" not in joined.meta and joined.meta["joined_shards"] == 4 and joined.meta["n_arms"] == 7
    assert joined.meta["calls_answered"] == whole.meta["calls_answered"]  # the shards' calls add up to the whole's


def test_shards_that_are_not_one_whole_build_do_not_join(setting, tmp_path):
    parts = [make(setting, tmp_path / "c.sqlite", shard=(i, 3)) for i in range(3)]
    with pytest.raises(ConfigError, match=r"shards \[0, 2\] of 3"):
        join_shards([parts[0], parts[2]])
    with pytest.raises(ConfigError, match=r"shards \[0, 1, 1\] of 3"):
        join_shards([parts[0], parts[1], parts[1]])
    whole = make(setting, tmp_path / "c.sqlite")
    with pytest.raises(ConfigError, match="join the shards of one build"):
        join_shards([whole, parts[1]])
    other = RewardTable(parts[1].rewards, parts[1].metric, parts[1].loglik, parts[1].item_ids, parts[1].split,
                        parts[1].arm_demo_ids, {**parts[1].meta, "seed": 5}, parts[1].extras)
    with pytest.raises(ConfigError, match="differ in seed"):
        join_shards([parts[0], other, parts[2]])


@pytest.mark.parametrize("shard, message", [("4/4", "0 <= I < N"), ("x", "wants I/N"), ("1/9", "more shards than the 6 arms")])
def test_a_bad_shard_is_one_line_exit_2(tmp_path, shard, message):
    proc = bench("table", "build", str(tmp_path / "t.npz"), "--task", "rules", "--arms", "6", "--k", "2",
                 "--n-val", "4", "--n-test", "4", "--pool-size", "40", "--shard", shard)
    assert_one_line_error(proc, message)
