import pytest

from bench.errors import ConfigError
from bench.metrics import BertScore, BertScoreConfig, ChrF


def test_bertscore_identical_beats_unrelated(bertscore):
    same = bertscore.f1(["John has 5 apples."], ["John has 5 apples."], lang="en")[0]
    near = bertscore.f1(["John owns five apples."], ["John has 5 apples."], lang="en")[0]
    far = bertscore.f1(["The stock market fell sharply."], ["John has 5 apples."], lang="en")[0]
    assert same == pytest.approx(1.0, abs=1e-4)
    assert same > near > far


def test_bertscore_description_names_model_layer_and_hash(bertscore):
    bertscore.f1(["a"], ["b"], lang="en")
    desc = bertscore.description("en")
    assert "all-MiniLM-L6-v2 (local)" in desc and "layer 6" in desc and "_L6_no-idf_version=" in desc


def test_bertscore_auto_falls_back_to_local_without_a_cached_official_model():
    model, layers, name = BertScore(BertScoreConfig(model="auto")).resolve("zh")
    # no official model is in this machine's hub cache, so "auto" never waits on the network
    assert name == "all-MiniLM-L6-v2 (local)" and layers == 6


def test_empty_output_scores_low_not_crash(bertscore):
    assert bertscore.f1([""], ["你好"], lang="zh")[0] < 0.9


def test_chrf_range():
    chrf = ChrF()
    assert chrf.sentence("你好世界", "你好世界") == pytest.approx(1.0)
    assert 0.0 <= chrf.sentence("你好", "再见世界") < 0.5


def test_bertscore_scores_a_pair_once_and_remembers_the_same_value(bertscore):
    from bench.metrics import BertScore, BertScoreConfig

    fresh = BertScore(BertScoreConfig(model="local"))
    cands, refs = ["the cat sat", "a dog ran", "the cat sat", ""], ["the cat sat down", "a dog", "the cat sat down", "x"]
    first = fresh.f1(cands, refs, lang="en")
    scorer = fresh.scorer("en")
    asked = []
    original = scorer.score
    scorer.score = lambda c, r, **kw: (asked.append(list(c)), original(c, r, **kw))[1]
    again = fresh.f1(["a dog ran", "the cat sat", "new words"], ["a dog", "the cat sat down", "a dog"], lang="en")
    assert asked == [["new words"]]  # only the pair not seen before is scored
    assert again[:2] == [first[1], first[0]] and first[0] == first[2]
    alone = BertScore(BertScoreConfig(model="local")).f1(["new words"], ["a dog"], lang="en")
    assert again[2] == pytest.approx(alone[0], abs=1e-6)


def test_baseline_rescaling_maps_unrelated_text_to_zero_and_keeps_rewards_in_the_unit_interval(bertscore):
    """(F - b) / (1 - b) with the local MiniLM's baseline b for Chinese, clipped at 0; the raw scores of the same
    pairs give the same numbers by hand; a language with no baseline is a one-line error."""
    from pathlib import Path

    import pandas as pd

    rescaled = BertScore(BertScoreConfig(model="local", rescale=True))
    refs = ["近日刚搬至旧金山的一位28岁厨师本周被发现死于当地一家商场的楼梯间。"] * 3
    outs = [refs[0], "一位厨师被发现死于商场。", "。"]
    raw = bertscore.f1(outs, refs, lang="zh")
    got = rescaled.f1(outs, refs, lang="zh")
    b = float(pd.read_csv(Path(rescaled.baseline_file("zh"))).iloc[6]["F"])
    assert 0.4 < b < raw[1] < raw[0]
    assert got == pytest.approx([min(1.0, max(0.0, (f - b) / (1 - b))) for f in raw], abs=1e-5)
    assert got[0] == pytest.approx(1.0, abs=1e-5) and 0.0 <= got[2] < got[1] < 1.0
    assert min(raw) < b and got[2] == 0.0  # below the baseline: clipped, not negative
    assert "baseline-rescaled (clipped at 0)" in rescaled.description("zh")
    with pytest.raises(ConfigError, match="no baseline for the local MiniLM in 'fr'"):
        rescaled.f1(["bonjour"], ["salut"], lang="fr")
