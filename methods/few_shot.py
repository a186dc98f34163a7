"""Few-shot CoT (Wei et al. 2022): k demonstrations used for every query.

`exemplars="random"` (default): k pool items drawn once with the run's seed, as the DEARICL paper's
Few-Shot COT row. `exemplars="wei"`: on GSM8K, the first k of Wei et al.'s eight hand-written
chain-of-thought exemplars (their Table 20, the set lm-evaluation-harness's gsm8k-cot also uses), rendered
in the task's prompt format. They are not GSM8K items, so they can never be test items.
"""
from __future__ import annotations

from bench.errors import ConfigError
from bench.items import Item
from methods.base import FitContext, Selector, register

# (question, rationale, answer) of Wei et al. (2022), Table 20
WEI_GSM8K = (
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
     "there will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
     "been 21 - 15 = 6.", "6"),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5.", "5"),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, "
     "they had 74 - 35 = 39.", "39"),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
     "Jason give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8.",
     "8"),
    ("Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have "
     "now?",
     "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. "
     "5 + 4 = 9.", "9"),
    ("There were nine computers in the server room. Five more computers were installed each day, from monday to "
     "thursday. How many computers are now in the server room?",
     "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 computers "
     "were added. 9 + 20 is 29.", "29"),
    ("Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many golf "
     "balls did he have at the end of wednesday?",
     "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 more, "
     "he had 35 - 2 = 33 golf balls.", "33"),
    ("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
     "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 dollars "
     "left. 23 - 15 is 8.", "8"),
)
EXEMPLARS = ("random", "wei")


def wei_exemplars(k: int) -> list[Item]:
    return [Item(id=f"gsm8k/wei2022:{i}", question=q, rationale=r, answer=a, split="fixed")
            for i, (q, r, a) in enumerate(WEI_GSM8K[:k])]


@register("few-shot")
class FewShot(Selector):
    level = "task"

    def __init__(self, k: int = 5, exemplars: str = "random"):
        super().__init__(k)
        if exemplars not in EXEMPLARS:
            raise ConfigError(f"few-shot: exemplars must be one of {', '.join(EXEMPLARS)}, got {exemplars!r}")
        if exemplars == "wei" and k > len(WEI_GSM8K):
            raise ConfigError(f"few-shot: Wei et al. wrote {len(WEI_GSM8K)} GSM8K exemplars, k={k} asks for more")
        self.exemplars = exemplars

    def check_task(self, task) -> None:
        if self.exemplars == "wei" and task.name != "gsm8k":
            raise ConfigError(f"few-shot: exemplars=wei exists for gsm8k only, not {task.name}")

    def fit(self, ctx: FitContext) -> "FewShot":
        self.check_task(ctx.task)
        if self.exemplars == "wei":
            self.demos_ = wei_exemplars(self.k)
            return self
        self.check_pool(ctx)
        self.demos_ = ctx.rng("few-shot").sample(ctx.pool, self.k)
        return self

    def select(self, query: Item) -> list[Item]:
        return list(self.demos_)

    def selection_call_bound(self, n_val: int, n_test: int) -> int:
        return 0  # no LLM call before inference
