"""A development set for memory search that looks like real use: long chats between the same two
people over months, asked about as people ask.

`python -m memory.proving.dialogues` writes `tests/data/memory_dev_realistic.json`; the same seed
gives the same bytes. Ten conversations of 20 to 30 sessions over 6 to 14 months, each session an
evening or weekend chat with turns a minute or two apart (documents `D<session>:<turn>`, text
`"Name: message"`). Stories (memory/proving/dialogue_stories.py) tell trips, books, moves, offers,
pets…, several of a kind, some plans changing in a later session; small talk and reactions that
only make sense in context sit between them. Relative dates ("last Saturday") resolve against the
session's date, which is how temporal answers are found.

Questions have the four LoCoMo categories, mixed about 45 % single-hop, 20 % multi-hop (turns from
different sessions), 22 % temporal (when, or what was planned before a change), 13 % open-domain
(inference or common knowledge). Each lists every turn that answers it and gives its `answer`.
Nothing here knows how the search works.

Pure Python, no Django: the evaluation's loader (memory/proving/evalsets.py) reads what this writes.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.proving import dialogue_pastimes as pastimes
from memory.proving import dialogue_pools as pools
from memory.proving import dialogue_stories as stories
from memory.proving.dialogue_chat import Chat, Fact, Line, Question

SEED = 20261206
NAME = "memory-dev-realistic"
OUTPUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "memory_dev_realistic.json"
CONVERSATIONS = 10
# The share of each category among a conversation's questions.
MIX = {"single-hop": 0.45, "multi-hop": 0.20, "temporal": 0.22, "open-domain": 0.13}
Maker = Callable[[Chat, str], bool]
# How many of each story a person tells over a conversation: recurring topics, other details.
STORIES: list[tuple[Maker, int]] = [
    (stories.trip, 2), (pastimes.book, 2), (pastimes.craft, 2), (pastimes.cooking, 1),
    (stories.job_offer, 1), (stories.move, 1), (stories.pet, 1), (pastimes.concert, 1),
    (stories.family, 1), (stories.research, 1), (pastimes.race, 1), (pastimes.film, 2),
    (pastimes.hiking, 1), (pastimes.regular, 2),
]  # fmt: skip
SENTENCE = re.compile(r"(?<=[.!?])\s+")
KIND_WORDS = {
    "trip": ("places", "travelled to"),
    "book": ("books", "read"),
    "concert": ("bands", "seen live"),
    "film": ("films", "watched"),
}


def schedule(rng: random.Random) -> list[datetime]:
    """Session start times: evenings on weekdays, daytime at weekends, 6 to 14 months in all."""
    sessions = rng.randint(20, 30)
    days = rng.randint(185, 420)
    start = date(2022, 1, 1) + timedelta(days=rng.randint(0, 700))
    offsets = sorted(rng.sample(range(1, days), sessions - 2))
    times = []
    for offset in [0, *offsets, days]:
        on = start + timedelta(days=offset)
        hour = rng.randint(10, 17) if on.weekday() >= 5 else rng.randint(18, 21)
        times.append(datetime(on.year, on.month, on.day, hour, rng.randrange(0, 60), tzinfo=UTC))
    return times


def small_talk(chat: Chat, session: int) -> None:
    who = chat.rng.choice(chat.people)
    text = chat.fresh(pools.SMALL_TALK + pools.MORE_SMALL_TALK)
    if text is None:
        return
    reply = chat.fresh(pools.SMALL_TALK_REPLIES)
    more = chat.fresh(pools.FOLLOW_UPS) if reply and chat.rng.random() < 0.8 else None
    aside = chat.fresh(pools.ASIDES) if chat.rng.random() < 0.5 else None
    chat.said.update(part for part in (more, aside) if part)
    reply = f"{reply} {more}" if reply and more else reply
    text = f"{text} {aside}" if aside else text
    chat.block(None, session, [(who, text), (chat.friend(who), reply) if reply else None])


def multi_hop(chat: Chat) -> None:
    """Questions that combine stories told in different sessions."""
    by: dict[tuple[str, str], list[Fact]] = defaultdict(list)
    for fact in chat.facts:
        by[(fact.kind, fact.who)].append(fact)
    for who in chat.people:
        activities = by[("activity", who)]
        if len(activities) >= 2:
            chosen = activities[:4]
            chat.ask("multi-hop", [
                f"What activities does {who} partake in?",
                f"What does {who} do in their free time?",
                f"Which hobbies has {who} mentioned over the months?",
            ], [fact.key for fact in chosen], ", ".join(f.value for f in chosen))  # fmt: skip
        for kind, (noun, verb) in KIND_WORDS.items():
            facts = by[(kind, who)]
            if len(facts) >= 2:
                chat.ask("multi-hop", [
                    f"What {noun} has {who} {verb}?",
                    f"Which {noun} has {who} mentioned having {verb}?",
                ], [fact.key for fact in facts], ", ".join(f.value for f in facts))  # fmt: skip
        intervals(chat, who)
    genres = [fact for fact in chat.facts if fact.kind == "genre"]
    for who in chat.people:
        own = [fact for fact in genres if fact.who == who]
        if own:
            kinds = ", ".join(dict.fromkeys(fact.value for fact in own))
            suits = f"{kinds} (so a {own[0].value} book club would likely suit them)"
            chat.ask("open-domain", [
                f"Would {who} enjoy a {own[0].value} book club?",
                f"What kind of books does {who} seem to like?",
            ], [fact.key for fact in own], suits)  # fmt: skip


def intervals(chat: Chat, who: str) -> None:
    """How long between two of a person's dated events, told in different sessions."""
    dated = [(fact.when, fact) for fact in chat.facts if fact.who == who and fact.when]
    pairs: list[tuple[tuple[date, Fact], tuple[date, Fact]]] = []
    for _ in range(2):
        chat.rng.shuffle(dated)
        pairs += zip(dated[::2], dated[1::2], strict=False)
    for first, second in pairs:
        (early_on, early), (late_on, late) = sorted((first, second), key=lambda pair: pair[0])
        # Far enough apart that "how long" has an answer a reader can work out.
        same = chat.session_of[early.key] == chat.session_of[late.key]
        if same or (late_on - early_on).days < 14:
            continue
        weeks = round((late_on - early_on).days / 7)
        span = f"about {weeks} weeks" if weeks < 9 else f"about {round(weeks / 4.35)} months"
        chat.ask("multi-hop", [
            f"How long after {describe(early)} was {describe(late)}?",
            f"How much time passed between {describe(early)} and {describe(late)}?",
        ], [early.key, late.key], span)  # fmt: skip


def describe(fact: Fact) -> str:
    if fact.kind == "trip":
        return f"{fact.who}'s trip to {fact.value}"
    if fact.kind == "book":
        return f"{fact.who} starting {fact.value}"
    if fact.kind == "concert":
        return f"{fact.who} seeing {fact.value}"
    if fact.kind == "film":
        return f"{fact.who} watching {fact.value}"
    if fact.kind == "activity" and fact.value.startswith("a "):
        return f"{fact.who} signing up for {fact.value}"
    if fact.kind == "activity":
        return f"{fact.who}'s {fact.value}"
    return fact.value


def select(rng: random.Random, questions: list[Question], total: int) -> list[Question]:
    """`total` questions in the set's mix, keeping every question about a changed plan."""
    chosen: list[Question] = []
    for category, share in MIX.items():
        pool = [question for question in questions if question.category == category]
        keep = [question for question in pool if question.change]
        rest = [question for question in pool if not question.change]
        rng.shuffle(rest)
        want = round(total * share)
        chosen += (keep + rest)[: max(want, min(len(keep), want))]
    return [question for question in questions if question in chosen]


def conversation(rng: random.Random, number: int, people: tuple[str, str]) -> dict[str, Any]:
    chat = Chat(rng, people, schedule(rng))
    tellings = [(maker, who) for maker, times in STORIES for who in people for _ in range(times)]
    rng.shuffle(tellings)
    for maker, who in tellings:
        if rng.random() < 0.9:
            maker(chat, who)
    multi_hop(chat)
    for session in range(len(chat.dates)):
        while sum(len(block) for block in chat.blocks[session]) < 12:
            before = len(chat.blocks[session])
            small_talk(chat, session)
            if len(chat.blocks[session]) == before:
                break
    for _ in range(20):
        small_talk(chat, rng.randrange(len(chat.dates)))
    questions = select(rng, chat.questions, rng.randint(115, 155))
    documents, ids = turns(chat, {key for question in questions for key in question.evidence})
    return {
        "id": f"conv-{number}",
        "speakers": list(people),
        "documents": documents,
        "questions": [
            {
                "id": f"q{index:03d}",
                "text": question.text,
                "evidence": [ids[key] for key in question.evidence],
                "category": question.category,
                "answer": question.answer,
                **({"about": "changed plan"} if question.change else {}),
            }
            for index, question in enumerate(questions, start=1)
        ],
    }


def turns(chat: Chat, needed: set[int]) -> tuple[list[dict[str, str]], dict[int, str]]:
    """The documents, session by session: a greeting, the blocks in a shuffled order, a goodbye.
    A story's line that repeats a sentence said before in the conversation is left out unless a
    question needs it."""
    documents: list[dict[str, str]] = []
    ids: dict[int, str] = {}
    seen: set[str] = set()  # sentences said so far
    for session, start in enumerate(chat.dates):
        opener = chat.rng.choice(chat.people)
        other = chat.friend(opener)
        blocks = list(chat.blocks[session])
        chat.rng.shuffle(blocks)
        hello = [
            Line(opener, chat.rng.choice(pools.GREETINGS).format(Y=other), -1),
            Line(other, chat.rng.choice(pools.GREETING_REPLIES).format(Y=opener), -1),
        ]
        bye = [
            Line(other, chat.rng.choice(pools.GOODBYES).format(Y=opener), -1),
            Line(opener, chat.rng.choice(pools.GOODBYE_REPLIES).format(Y=other), -1),
        ]
        time = start
        number = 0
        for line in [*hello, *(line for block in blocks for line in block), *bye]:
            parts = sentences(line.text)
            if line.key >= 0 and line.key not in needed and not parts.isdisjoint(seen):
                continue
            seen |= parts
            number += 1
            time += timedelta(minutes=chat.rng.randint(1, 2))
            doc_id = f"D{session + 1}:{number}"
            ids[line.key] = doc_id
            documents.append(
                {"id": doc_id, "text": f"{line.speaker}: {line.text}", "time": time.isoformat()}
            )
    return documents, ids


def sentences(text: str) -> set[str]:
    """The sentences of a turn long enough to sound repeated if said twice."""
    return {part for part in SENTENCE.split(text) if len(part.split()) >= 4} or {text}


def build(seed: int = SEED) -> dict[str, Any]:
    # A data set, not a secret: a seeded generator is the point.
    rng = random.Random(f"{seed}/{NAME}")  # noqa: S311
    names = rng.sample(pools.PEOPLE, 2 * CONVERSATIONS)
    return {
        "name": NAME,
        "conversations": [
            conversation(rng, number + 1, (names[2 * number], names[2 * number + 1]))
            for number in range(CONVERSATIONS)
        ],
    }


def render(dataset: dict[str, Any]) -> str:
    return json.dumps(dataset, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    dataset = build()
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render(dataset), encoding="utf-8")
    counts: dict[str, int] = defaultdict(int)
    for conv in dataset["conversations"]:
        for question in conv["questions"]:
            counts[question["category"]] += 1
    documents = sum(len(conv["documents"]) for conv in dataset["conversations"])
    print(f"{OUTPUT}: {documents} documents, {sum(counts.values())} questions {dict(counts)}")


if __name__ == "__main__":
    main()
