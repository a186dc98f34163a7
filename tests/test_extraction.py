import pytest

from bench.metrics import numbers_equal, parse_number
from bench.tasks.aquarat import extract_letter, format_options
from bench.tasks.gsm8k import extract_number, strip_calculator


@pytest.mark.parametrize("output, expected", [
    ("She has 5 - 8 = -3 dollars.\n[Answer]: -3", "-3"),
    ("[Answer]: 3.50", "3.5"),
    ("[Answer]: 0.25 of the pie", "0.25"),
    ("Total is 1,234 + 1 = 1,235.\n[Answer]: 1,235", "1235"),
    ("[Answer]: $1,000.00", "1000"),
    ("He pays $18 per hour.\n#### 18", "18"),
    ("So the answer is 42.", "42"),
    ("First 3 apples, then 4 more, 7 in all", "7"),  # fallback: last number
    ("[Answer]: −12", "-12"),  # unicode minus
    ("no digits here", ""),
    ("Answer: 10 cookies and 2 cakes", "10"),  # first number after the marker
])
def test_gsm8k_final_number(output, expected):
    assert extract_number(output) == expected


def test_last_answer_marker_wins():
    assert extract_number("[Answer]: 5\n[Question]: x\n[Answer]: 9") == "9"


@pytest.mark.parametrize("a, b, equal", [
    ("1000", "1,000", True), ("-3", "3", False), ("3.5", "3.50", True), ("$7", "7", True),
    ("0.1", "0.10000001", False), ("", "5", False), ("abc", "abc", False),
])
def test_numbers_equal(a, b, equal):
    assert numbers_equal(a, b) is equal


def test_parse_number_keeps_sign_and_decimals():
    assert parse_number("-1,234.5") == -1234.5
    assert parse_number("$3.") == 3.0
    assert parse_number("x") is None


def test_strip_calculator_annotations():
    assert strip_calculator("48/2 = <<48/2=24>>24 clips") == "48/2 = 24 clips"


@pytest.mark.parametrize("output, expected", [
    ("x = 3 so\n[Answer]: The option is C", "C"),
    ("The answer is (b)", "B"),
    ("Answer: E", "E"),
    ("we rule out A) and pick D) 12", "D"),
    ("The option is A. Wait, the option is B", "B"),
    ("nothing", ""),
])
def test_aquarat_letter(output, expected):
    assert extract_letter(output) == expected


def test_format_options_matches_paper_layout():
    assert format_options(["A)21", "B)21.5", "C) 22", "D)22.5", "E)23"]) == "A) 21, B) 21.5, C) 22, D) 22.5, E) 23"


@pytest.mark.parametrize("task_name, raw, expected", [
    # the answer comes after the think block, whatever numbers the reasoning tried
    ("gsm8k", "<think>2 + 2 might be 5... no, 4. Or 7?</think>\nThe answer is 4.", "4"),
    # the opening tag was in the chat template: only the closing tag is generated
    ("gsm8k", "First 3 apples, then 9 more: 12 in all.</think> The answer is 12", "12"),
    # max tokens cut the reasoning: no answer, not a number picked out of the thoughts
    ("gsm8k", "<think>Let me add 3 and 9 to get 12, then", ""),
    ("aquarat", "<think>Option A is 21, option (C) looks right</think>\nThe answer is (B).", "B"),
    # chat models answer in markdown and LaTeX
    ("gsm8k", "Let's add: 3 + 4 = 7 apples.\n\n**Answer**: 7 (check: 3 + 4)", "7"),
    ("gsm8k", "So the total is 12 + 30 = 42.\n\nThe final answer is $\\boxed{42}$. Check: 40 + 2", "42"),
    ("aquarat", "Testing each option, 21 fails.\n\n**Answer**: C, not A) or B)", "C"),
    ("aquarat", "Therefore $\\boxed{D}$, not A) or B).", "D"),
])
def test_answers_are_read_after_the_think_block_and_from_chat_style_outputs(task_name, raw, expected):
    from bench.tasks import make_task

    task = make_task(task_name)
    assert task.extract(task.truncate(raw)) == expected


def test_reasoning_translation_is_cut_at_stops_only_after_the_block():
    from bench.tasks import make_task
    from bench.reasoning import after_reasoning

    task = make_task("wmt19")
    # the think block spans lines: the newline stop must not cut it before the answer
    assert task.truncate("<think>Welsh AMs...\nmeans 威尔士议员\n</think>\n威尔士议员担心\n[English] next") == "威尔士议员担心"
    assert after_reasoning("plain output, no tags") == "plain output, no tags"
