"""The synthetic task that plays GSM8K's role: recall over 1 to 4 pages of 128 tokens.

A prompt is filler text (lowercase letters) with facts ``K42`` scattered through it (``K`` one
of 10 upper-case keys, the value two digits 10..99), ending with a query ``?K``. The model
answers the two digits of that key's value, then ``EOS``::

    <BOS> qwhzk...pxK42ab...mn?K    ->    4 2 <EOS>

The evaluation set holds one fact per prompt (a needle in 1 to 4 pages of filler), placed
anywhere, most often pages before the query: a decode step that reads the wrong pages of the
KV cache (or another request's pages, holding another number) cannot get it right, and
guessing succeeds 1 time in 90. Training prompts hold 1 to 8 facts with distinct first digits.

How we got here (measured on this project's 2-core CPU, each run under 15 minutes): with
``K=42;`` facts queried as ``?K=``, or ``K42`` facts with repeated first digits, a 2-layer
MLA model learned only part of the answer; with several facts and distinct first digits it
learned to find *a* fact's value and read both digits (second digit 0.98-1.00 teacher-forced)
but not yet to tell 10 or 24 keys apart (first digit ~0.15 with 4-8 facts). So the
evaluation asks for the one fact in the prompt; ``make_dataset(..., facts=(4, 8))`` builds
the harder version for anyone with a longer training budget.

Scoring mirrors SGLang's ``benchmark/gsm8k/bench_sglang.py`` (sgl-project/sglang, read at
commit 0126b5f4): ``get_answer_value`` drops commas, takes the *last* ``\\d+`` in the
completion and ``ast.literal_eval``s it; no digits (or a literal Python rejects, such as
``07``) is ``INVALID = -9999999``. Accuracy = mean(pred == label), invalid = mean(pred == INVALID).
Values are therefore drawn from 10..99, so that every label parses.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from typing import Sequence
from mla_edu.util import PAGE_SIZE, is_int

# ----------------------------------------------------------------------------- tokenizer

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")
DIGITS = "0123456789"
KEYS = "ABCDEFGHIJ"  # 10 keys
FILLER = "abcdefghijklmnopqrstuvwxyz"
SEPARATORS = "=;?"  # only "?" (the query mark) appears in prompts; "=" and ";" are spare
CHARS = DIGITS + KEYS + SEPARATORS + FILLER
VOCAB_SIZE = len(SPECIAL_TOKENS) + len(CHARS)  # 3 + 10 + 10 + 3 + 26 = 52

_CHAR_TO_ID = {c: i + len(SPECIAL_TOKENS) for i, c in enumerate(CHARS)}
_ID_TO_TEXT = list(SPECIAL_TOKENS) + list(CHARS)

# ----------------------------------------------------------------------------- task sizes

CONTEXT_LEN = 4 * PAGE_SIZE  # 512: prompt + generated tokens always fit
ANSWER_DIGITS = 2
MAX_NEW_TOKENS = ANSWER_DIGITS + 1  # two digits, then EOS
MIN_PROMPT_LEN = 100
# the cache holds the prompt plus every generated token fed back (both digits): <= CONTEXT_LEN
MAX_PROMPT_LEN = CONTEXT_LEN - MAX_NEW_TOKENS - 1  # 508
MIN_FACTS, MAX_FACTS = 1, 8  # facts per training prompt
EVAL_FACTS = (1, 1)  # the evaluation's prompts hold one fact (see the module docstring)
FACT_LEN = 3  # "K42"
QUERY_LEN = 2  # "?K"
# lengths around page boundaries, where an off-by-one page count shows up
BOUNDARY_LENGTHS = (127, 128, 129, 255, 256, 257, 383, 384, 385, MAX_PROMPT_LEN)
EVAL_SEED = 1234
EVAL_SIZE = 256

INVALID = -9999999


def encode(text: str, bos: bool = False) -> list[int]:
    """Characters -> token ids (optionally preceded by BOS)."""
    if not isinstance(text, str):
        raise TypeError(f"encode expects a str, got {type(text).__name__}")
    ids = [BOS] if bos else []
    for pos, ch in enumerate(text):
        tid = _CHAR_TO_ID.get(ch)
        if tid is None:
            raise ValueError(
                f"character {ch!r} at position {pos} is not in the vocabulary "
                f"(expected digits, keys {KEYS[0]}..{KEYS[-1]}, '{SEPARATORS}' or lowercase filler)"
            )
        ids.append(tid)
    return ids


def decode(ids: Sequence[int], stop_at_eos: bool = True) -> str:
    """Token ids -> text. BOS/PAD are dropped; decoding stops at EOS (or drops it)."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    out = []
    for pos, tid in enumerate(ids):
        if not isinstance(tid, int) or isinstance(tid, bool):
            raise TypeError(f"decode expects integer ids, got {type(tid).__name__} at position {pos}")
        if not 0 <= tid < VOCAB_SIZE:
            raise ValueError(f"token id {tid} at position {pos} is outside the vocabulary [0, {VOCAB_SIZE})")
        if tid == EOS:
            if stop_at_eos:
                break
            continue
        if tid in (PAD, BOS):
            continue
        out.append(_ID_TO_TEXT[tid])
    return "".join(out)


# ----------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Question:
    """One recall question: ``prompt`` text (without BOS), the ``answer`` text and where its fact is."""

    prompt: str
    answer: str
    key: str
    fact_pos: int  # token index (BOS counted) of the queried fact's key in the prompt

    @property
    def prompt_ids(self) -> list[int]:
        """BOS + prompt characters; this is what the model is fed."""
        return encode(self.prompt, bos=True)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt) + 1

    @property
    def label(self) -> int:
        return get_answer_value(self.answer)


def sample_question(rng: random.Random, length: int, n_facts: int | None = None) -> Question:
    """A question whose prompt is exactly ``length`` tokens (BOS included)."""
    if not is_int(length):
        raise TypeError(f"length must be an int, got {type(length).__name__}")
    if n_facts is None:
        n_facts = rng.randint(MIN_FACTS, MAX_FACTS)
    if not is_int(n_facts) or not 1 <= n_facts <= 9:
        raise ValueError(f"n_facts: expected an int in 1..9 (one fact a first digit 1-9), got {n_facts!r}")
    body_len = length - 1 - QUERY_LEN
    n_facts = min(n_facts, body_len // FACT_LEN)
    if n_facts < 1:
        raise ValueError(f"length must leave room for one fact: expected >= {1 + QUERY_LEN + FACT_LEN}, got {length}")
    keys = rng.sample(KEYS, n_facts)
    # distinct first digits: "after 4 came 2" then names one fact, so both digits are one lookup
    values = [10 * d + rng.randint(0, 9) for d in rng.sample(range(1, 10), n_facts)]
    # split the filler into n_facts + 1 gaps (a random composition of n_filler)
    n_filler = body_len - n_facts * FACT_LEN
    cuts = sorted(rng.randint(0, n_filler) for _ in range(n_facts))
    gaps = [b - a for a, b in zip([0] + cuts, cuts + [n_filler])]
    parts, fact_start = [], []
    pos = 1  # BOS
    for gap, key, value in zip(gaps, keys, values):
        parts.append("".join(rng.choices(FILLER, k=gap)))
        pos += gap
        fact_start.append(pos)
        parts.append(f"{key}{value}")
        pos += FACT_LEN
    parts.append("".join(rng.choices(FILLER, k=gaps[-1])))
    q = rng.randrange(n_facts)
    prompt = "".join(parts) + f"?{keys[q]}"
    assert len(prompt) + 1 == length
    return Question(prompt=prompt, answer=str(values[q]), key=keys[q], fact_pos=fact_start[q])


def make_dataset(
    n: int, seed: int, min_len: int = MIN_PROMPT_LEN, max_len: int = MAX_PROMPT_LEN,
    facts: tuple[int, int] = (MIN_FACTS, MAX_FACTS),
) -> list[Question]:
    """``n`` seeded questions; every 4th has a length at a page boundary (127/128/129, ...),
    the others pick a page count 1..4 uniformly, then a length uniformly inside that page
    (clipped to [min_len, max_len]). Same (n, seed) -> same questions."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not (isinstance(facts, tuple) and len(facts) == 2 and all(is_int(f) for f in facts)
            and 1 <= facts[0] <= facts[1] <= 9):
        raise ValueError(f"facts: expected (min, max) ints with 1 <= min <= max <= 9 (one fact a first digit 1-9), "
                         f"got {facts!r}")
    if not (FACT_LEN + QUERY_LEN + 1 <= min_len <= max_len <= MAX_PROMPT_LEN):
        raise ValueError(
            f"expected {FACT_LEN + QUERY_LEN + 1} <= min_len <= max_len <= {MAX_PROMPT_LEN}, "
            f"got min_len={min_len}, max_len={max_len}"
        )
    rng = random.Random(seed)
    boundary = [b for b in BOUNDARY_LENGTHS if min_len <= b <= max_len]
    out = []
    for i in range(n):
        if boundary and i % 4 == 3:
            length = boundary[(i // 4) % len(boundary)]
        else:
            pages = rng.randint((min_len - 1) // PAGE_SIZE + 1, (max_len - 1) // PAGE_SIZE + 1)
            lo = max(min_len, (pages - 1) * PAGE_SIZE + 1)
            hi = min(max_len, pages * PAGE_SIZE)
            length = rng.randint(lo, hi)
        out.append(sample_question(rng, length, rng.randint(*facts)))
    return out


def default_eval_set() -> list[Question]:
    """The fixed evaluation set: 256 questions, seed 1234, prompt lengths 100..508, one fact each."""
    return make_dataset(EVAL_SIZE, EVAL_SEED, facts=EVAL_FACTS)


# ----------------------------------------------------------------------------- scoring


def get_answer_value(text: str) -> int:
    """The last integer in ``text``, as bench_sglang.py parses it; ``INVALID`` when there is none."""
    if not isinstance(text, str):
        raise TypeError(f"expected the generated text as str, got {type(text).__name__}")
    numbers = re.findall(r"\d+", text.replace(",", ""))
    if not numbers:
        return INVALID
    try:
        return ast.literal_eval(numbers[-1])
    except SyntaxError:  # e.g. "07": leading zeros are not a Python literal
        return INVALID


def score(generated: str | Sequence[str], answers: str | int | Sequence[str | int]) -> tuple[float, float]:
    """``(accuracy, invalid)`` of completions against answers, like bench_sglang.py."""
    if isinstance(generated, str):
        generated = [generated]
    if isinstance(answers, (str, int)):
        answers = [answers]
    generated, answers = list(generated), list(answers)
    if len(generated) != len(answers):
        raise ValueError("expected one answer per completion, "
                         f"got {len(generated)} completions and {len(answers)} answers")
    if not generated:
        raise ValueError("expected at least one completion, got none")
    for i, a in enumerate(answers):  # get_answer_value reads digits only: a sign or a fraction never matches
        if not (isinstance(a, str) or is_int(a) and a >= 0):
            raise TypeError(f"answers[{i}]: expected an int >= 0 or a str holding one, got {type(a).__name__} {a!r}")
    for i, g in enumerate(generated):
        if not isinstance(g, str):
            raise TypeError(f"generated[{i}]: expected the generated text as str, got {type(g).__name__}")
    labels = [a if is_int(a) else get_answer_value(a) for a in answers]
    if any(lab == INVALID for lab in labels):
        raise ValueError(f"every answer must hold an integer, got {answers[labels.index(INVALID)]!r}")
    preds = [get_answer_value(g) for g in generated]
    acc = sum(p == lab for p, lab in zip(preds, labels)) / len(preds)
    invalid = sum(p == INVALID for p in preds) / len(preds)
    return acc, invalid
