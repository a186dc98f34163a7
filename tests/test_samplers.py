"""The transformers backend's samplers at a temperature, on plain logits (no model): the GPU one (HashedGumbel)
draws from softmax(logits / T) over its candidates, and a row's draws depend on its seed and step only."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from bench.llm.hf import HASH_TOP, HashedGumbel, RowSeededGumbel


def draws(sampler_class, logits, seeds, temperature, steps=1):
    sampler = sampler_class(seeds, temperature, torch.device("cpu"))
    scores = torch.as_tensor(logits, dtype=torch.float32).expand(len(seeds), -1).clone()
    return [sampler(None, scores).argmax(dim=-1).numpy() for _ in range(steps)]


@pytest.mark.parametrize("sampler_class", [HashedGumbel, RowSeededGumbel])
def test_draws_follow_the_tempered_softmax(sampler_class):
    logits = np.full(300, -30.0)
    logits[[3, 70, 150, 299]] = [2.0, 1.5, 1.0, 0.0]
    temperature = 0.7
    seeds = list(range(4000 if sampler_class is RowSeededGumbel else 40000))
    got = draws(sampler_class, logits, seeds, temperature)[0]
    assert set(np.unique(got)) <= {3, 70, 150, 299}
    p = np.exp(logits[[3, 70, 150, 299]] / temperature)
    p /= p.sum()
    counts = np.array([(got == t).sum() for t in (3, 70, 150, 299)])
    assert chisquare(counts, p * len(seeds)).pvalue > 1e-3


def test_a_rows_draws_depend_on_its_seed_and_step_not_on_its_batch():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 1000)) * 2
    sampler = HashedGumbel([11, 22, 33, 44, 55], 1.0, torch.device("cpu"))
    together = [sampler(None, torch.tensor(logits, dtype=torch.float32)).argmax(-1).tolist() for _ in range(3)]
    for row, seed in enumerate([11, 22, 33, 44, 55]):
        alone = HashedGumbel([seed], 1.0, torch.device("cpu"))
        mine = [alone(None, torch.tensor(logits[row:row + 1], dtype=torch.float32)).argmax(-1).item()
                for _ in range(3)]
        assert mine == [step[row] for step in together]
    # rows that leave the batch (keep_rows) do not shift the others' draws
    sampler = HashedGumbel([11, 22, 33, 44, 55], 1.0, torch.device("cpu"))
    sampler(None, torch.tensor(logits, dtype=torch.float32))
    sampler.keep_rows([1, 4])
    later = sampler(None, torch.tensor(logits[[1, 4]], dtype=torch.float32)).argmax(-1).tolist()
    assert later == [together[1][1], together[1][4]]


def test_each_step_draws_anew_and_each_seed_differs():
    logits = np.zeros(50)  # uniform over 50 tokens: a repeated draw would show
    by_step = draws(HashedGumbel, logits, list(range(2000)), 1.0, steps=2)
    assert (by_step[0] != by_step[1]).mean() > 0.9
    assert len(set(by_step[0].tolist())) == 50
    assert chisquare(np.bincount(by_step[1], minlength=50)).pvalue > 1e-3


def test_only_the_top_candidates_are_drawn():
    logits = np.linspace(0, -1, 1000)  # flat enough that the tail would often win at T = 5
    got = draws(HashedGumbel, logits, list(range(3000)), 5.0)[0]
    assert got.max() < HASH_TOP and len(np.unique(got)) > HASH_TOP // 2


def test_the_attention_kernel_is_checked_and_reaches_the_model_loader(monkeypatch):
    """`attention` (eager on a GPU whose SDPA kernel failed the batching check) is validated at construction and
    passed to from_pretrained as attn_implementation; "auto" leaves transformers' choice alone."""
    import transformers

    from bench.errors import LLMError
    from bench.llm.hf import HFBackend

    with pytest.raises(LLMError, match="attention must be one of auto, sdpa, eager"):
        HFBackend("any", attention="flash")
    seen = []

    class Loaded(Exception):
        pass

    def load(source, **kwargs):
        seen.append(kwargs)
        raise Loaded

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda source, **kwargs: None)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load)
    for attention in ("eager", "auto"):
        with pytest.raises(Loaded):
            HFBackend("any", attention=attention)._load()
    assert seen[0]["attn_implementation"] == "eager" and "attn_implementation" not in seen[1]
