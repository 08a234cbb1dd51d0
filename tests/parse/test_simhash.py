"""Simhash fingerprints of page text."""

from __future__ import annotations

import random

from drumbeat.parse.simhash import MIN_FEATURES, distance, simhash, simhashes

WORDS = [f"w{i}x" for i in range(5000)]


def _text(rng: random.Random, n: int) -> list[str]:
    return rng.choices(WORDS, k=n)


def test_same_text_same_fingerprint_whatever_the_spacing_case_and_punctuation() -> None:
    words = _text(random.Random(1), 800)
    a = simhash(" ".join(words))
    assert a is not None
    assert simhash("\n  ".join(w.upper() for w in words) + " ...") == a
    assert simhash(", ".join(words)) == a


def test_near_copies_are_close_and_others_far() -> None:
    rng = random.Random(2)
    close, far = [], []
    for _ in range(40):
        words = _text(rng, 3000)
        changed = list(words)
        changed[rng.randrange(3000)] = "changed"  # a date, say
        original = simhash(" ".join(words))
        assert original is not None
        near = simhash(" ".join(changed))
        other = simhash(" ".join(_text(rng, 3000)))
        assert near is not None and other is not None
        close.append(distance(original, near))
        far.append(distance(original, other))
    assert sum(d <= 3 for d in close) >= 36
    assert min(far) > 10


def test_short_texts_have_none() -> None:
    assert simhash("") is None
    assert simhash(" ".join(WORDS[: MIN_FEATURES - 1])) is None
    assert simhash(" ".join(WORDS[:100])) is not None


def test_any_text_is_harmless() -> None:
    rng = random.Random(3)
    for n in (0, 1, 7, 8, 9, 100, 5000):
        text = "".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(n))
        fingerprint = simhash(text)
        assert fingerprint is None or 0 <= fingerprint < 1 << 64
    assert simhash("\ud800 broken surrogate " * 50) is not None


def test_a_batch_gives_what_each_text_gives_alone() -> None:
    rng = random.Random(4)
    texts = [" ".join(_text(rng, n)) for n in (0, 5, 17, 18, 300, 3000, 9000)] + ["x"] * 3
    rng.shuffle(texts)
    assert simhashes(texts) == [simhash(t) for t in texts]
    assert simhashes([]) == []
