"""`rules`: a synthetic classification task whose best demonstrations are known by construction.

Each item belongs to one of R hidden rules. A rule is a topic (fruits, animals, ...) and a code word (NATO
alphabet words, which name no topic): an item's input is three words of its rule's topic and its answer is the
rule's code word. The code word cannot be guessed from the input; a model can only copy it from a
demonstration of the same rule. So:
- per query, the best demonstrations are same-rule ones (the more the better), and a selector that reads the
  query (knn on the topic) can find them; other-rule demonstrations never show the answer;
- at task level, the best fixed set holds one demonstration of each of the k most frequent rules (rule
  frequencies fall off as 1/(r+1)^0.8), and the model must match the query's topic to the right one.
`same_rule_share`, `rule_of` and `best_task_level_rules` expose the truth to tests and reports.

The items are generated from a fixed seed (`DATA_SEED`), the same for every run, like a dataset: 3,000 pool,
600 validation and 1,000 test items (the run's --seed subsamples them as for any task); no data file is read.
"""
from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Sequence

from bench.items import Item
from bench.tasks.base import Splits, SplitSpec
from bench.tasks.classification import ClassificationTask

DATA_SEED = 20261126
SIZES = {"pool": 3000, "validation": 600, "test": 1000}
WORDS_PER_INPUT = 3
CODE_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
              "kilo", "lima")
TOPICS = {
    "fruit": "apple banana cherry mango peach pear plum grape lemon lime melon kiwi apricot papaya guava "
             "coconut fig date orange tangerine nectarine pineapple raspberry strawberry blueberry",
    "animal": "tiger lion zebra giraffe elephant wolf fox bear rabbit deer monkey horse donkey camel kangaroo "
              "leopard cheetah hippo rhino otter beaver squirrel moose bison gorilla",
    "country": "France Germany Spain Italy Japan China India Brazil Canada Mexico Egypt Kenya Norway Sweden "
               "Poland Greece Turkey Chile Peru Argentina Vietnam Thailand Ireland Portugal Austria",
    "instrument": "violin cello guitar piano flute trumpet trombone clarinet saxophone harp drum banjo "
                  "accordion oboe bassoon tuba ukulele mandolin harmonica xylophone bagpipe organ sitar "
                  "tambourine cymbal",
    "sport": "soccer tennis golf basketball baseball hockey cricket rugby volleyball badminton boxing "
             "wrestling swimming cycling rowing skiing fencing archery surfing judo karate lacrosse handball "
             "polo squash",
    "vehicle": "car truck bus bicycle motorcycle scooter tram train subway van taxi ambulance tractor "
               "limousine minivan jeep trolley forklift bulldozer snowmobile wagon sedan pickup moped caravan",
    "profession": "doctor nurse teacher lawyer engineer farmer pilot chef baker plumber carpenter electrician "
                  "dentist surgeon architect journalist librarian accountant firefighter mechanic pharmacist "
                  "tailor butcher barber painter",
    "body part": "elbow knee shoulder ankle wrist finger thumb toe heel chin forehead cheek eyebrow eyelid "
                 "nostril lip tongue tooth jaw neck spine hip thigh shin palm",
    "furniture": "sofa couch armchair table desk bookshelf wardrobe dresser cabinet bench stool bed crib "
                 "nightstand cupboard sideboard ottoman recliner hammock futon bunk vanity chest footstool "
                 "rocker",
    "clothing": "shirt trousers jacket coat sweater scarf glove sock shoe boot sandal skirt dress blouse hat "
                "cap vest hoodie pajamas jeans shorts tie belt raincoat apron",
    "vegetable": "carrot potato onion garlic cabbage lettuce spinach broccoli cauliflower celery cucumber "
                 "pumpkin zucchini radish turnip beet pea bean leek kale asparagus artichoke eggplant "
                 "parsnip okra",
    "tool": "hammer screwdriver wrench pliers saw drill chisel shovel rake axe ladder tape level sander "
            "crowbar mallet trowel clamp file vise hoe scissors knife spanner toolbox",
}


class Rules(ClassificationTask):
    name = "rules"
    description = "SYNTHETIC: R hidden topic -> code-word rules; same-rule demonstrations are the known best"
    spec = SplitSpec(folder="", pool="", validation=None, test="")  # generated, no files
    n_rules = 8
    labels = CODE_WORDS[:n_rules]

    @property
    def frequencies(self) -> list[float]:
        return _frequencies(self.n_rules)

    def parse_row(self, row: dict, row_id: str) -> Item:  # generated items are never read from rows
        raise NotImplementedError

    def load_splits(self, data_dir: Path | None, *, n_test: int | None, n_val: int, pool_size: int | None,
                    seed: int, source: str = "local") -> Splits:
        pool, val, test = _generate(self.n_rules)
        return self.subsample(list(pool), list(val), list(test), n_test=n_test, n_val=n_val, pool_size=pool_size,
                              seed=seed)

    def format_demo(self, item: Item) -> str:
        return f"Input: {item.question}\nOutput: {item.answer}"

    def format_query(self, item: Item) -> str:
        return f"Input: {item.question}\nOutput:"

    # ---- the truth ----------------------------------------------------------------------------
    def rule_of(self, item: Item) -> int:
        return self.labels.index(item.answer)

    def same_rule_share(self, demos: Sequence[Item], query: Item) -> float:
        """Share of the demonstrations that follow the query's rule (1.0 is the per-query optimum)."""
        return sum(d.answer == query.answer for d in demos) / len(demos) if demos else 0.0

    def best_task_level_rules(self, k: int) -> list[str]:
        """The code words of the k most frequent rules: the best fixed set holds one demonstration of each."""
        order = sorted(range(self.n_rules), key=lambda r: -self.frequencies[r])
        return [self.labels[r] for r in order[:k]]


def _frequencies(n_rules: int) -> list[float]:
    weights = [1 / (r + 1) ** 0.8 for r in range(n_rules)]
    return [w / sum(weights) for w in weights]


@functools.cache
def _generate(n_rules: int) -> tuple[tuple[Item, ...], ...]:
    """(pool, validation, test), the same for every run: no input repeats within or across splits."""
    topics, frequencies, seen, splits = list(TOPICS)[:n_rules], _frequencies(n_rules), set(), []
    for split, n in SIZES.items():
        rng = random.Random(f"{DATA_SEED}:{split}")
        items: list[Item] = []
        while len(items) < n:
            rule = rng.choices(range(n_rules), weights=frequencies)[0]
            text = ", ".join(rng.sample(TOPICS[topics[rule]].split(), WORDS_PER_INPUT))
            if text in seen:
                continue
            seen.add(text)
            items.append(Item(id=f"rules/{split}-{len(items)}", question=text, answer=CODE_WORDS[rule],
                              split=split, meta={"rule": rule}))
        splits.append(tuple(items))
    return tuple(splits)
