"""The conversation under construction for the realistic development set: sessions with their
dates, blocks of turns, the questions asked about them, and the facts that questions across
stories combine (memory/proving/dialogues.py assembles; memory/proving/dialogue_stories.py tells).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TypeVar

from memory.proving import dialogue_pools as pools
from memory.proving import dialogue_says as says

T = TypeVar("T")

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def day(value: date) -> str:
    """`4 March 2023`, the way the answers state dates."""
    return f"{value.day} {value:%B %Y}"


@dataclass(frozen=True)
class Line:
    speaker: str
    text: str
    key: int  # names the turn to questions until it has a document id


@dataclass
class Question:
    category: str
    text: str
    evidence: list[int]
    answer: str
    change: bool = False  # asks about a plan that changed (the set's tests want some)


@dataclass(frozen=True)
class Fact:
    """Something a person did, kept for the questions that combine stories."""

    kind: str  # "trip", "book", "activity", "concert", "event"
    who: str
    value: str
    key: int
    when: date | None = None  # the event's own date, when it was said


@dataclass
class Chat:
    rng: random.Random
    people: tuple[str, str]
    dates: list[datetime]
    blocks: list[list[list[Line]]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    said: set[str] = field(default_factory=set)
    session_of: dict[int, int] = field(default_factory=dict)
    _next_key: int = 0
    _drawn: dict[int, list[object]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.blocks = [[] for _ in self.dates]

    def friend(self, who: str) -> str:
        return self.people[1] if who == self.people[0] else self.people[0]

    def take(self, pool: Sequence[T]) -> T:
        """The next item of a pool in this conversation's shuffled order, so details differ from
        one story to the next; a pool used up starts over."""
        left = self._drawn.get(id(pool))
        if not left:
            left = list(pool)
            self.rng.shuffle(left)
            self._drawn[id(pool)] = left
        return left.pop()  # type: ignore[return-value] # the list holds the pool's own items

    def fresh(self, pool: Sequence[str], **slots: str) -> str | None:
        """A line of the pool not said yet in this conversation, or None when all were."""
        unused = [text for text in pool if text.format(**slots) not in self.said]
        return self.rng.choice(unused).format(**slots) if unused else None

    def on(self, session: int) -> date:
        return self.dates[session].date()

    def block(
        self, teller: str | None, session: int, lines: Sequence[tuple[str, str] | None]
    ) -> list[int]:
        """Turns said together in a session, in order; their keys (None lines are skipped).
        The teller's short turns may gain an aside, the listener's a follow-up; small talk (no
        teller) stays as it is."""
        made = []
        for speaker, short in (item for item in lines if item is not None):
            text = short
            if teller is not None:
                text = self.lengthen(short, pools.ASIDES if speaker == teller else pools.FOLLOW_UPS)
            self.said.add(text)
            self.session_of[self._next_key] = session
            made.append(Line(speaker, text, self._next_key))
            self._next_key += 1
        self.blocks[session].append(made)
        return [line.key for line in made]

    def lengthen(self, text: str, pool: Sequence[str]) -> str:
        """A short turn, sometimes with a second sentence, as people type in a chat."""
        if len(text.split()) >= 18 or self.rng.random() < 0.2:
            return text
        more = self.fresh(pool)
        if more is None:
            return text
        self.said.add(more)  # a second sentence is said once too
        return f"{text} {more}"

    def say(self, key: str, **slots: str) -> str:
        """One of the ways to say a story's small turn, the next in this conversation's order."""
        return self.take(says.SAY[key]).format(**slots)

    def react(self, who: str) -> tuple[str, str] | None:
        """A reaction by `who` that only makes sense after the turn before it."""
        text = self.fresh(pools.REACTIONS)
        if text is None:
            return None
        more = self.fresh(pools.FOLLOW_UPS)
        if more is None:
            return (who, text)
        self.said.add(more)
        return (who, f"{text} {more}")

    def ask(self, category: str, variants: Sequence[str], evidence: list[int], answer: str) -> None:
        """One question, worded as one of its variants (some reuse the turn's words, some
        don't)."""
        self.questions.append(Question(category, self.rng.choice(variants), evidence, answer))

    def ask_change(
        self, category: str, variants: Sequence[str], evidence: list[int], answer: str
    ) -> None:
        self.ask(category, variants, evidence, answer)
        self.questions[-1].change = True

    def later_mention(
        self, teller: str, after: int, lines: Sequence[tuple[str, str] | None]
    ) -> None:
        """Talk that comes back to a story in a later session without saying anything new: a
        reader (or a search) finds the story's words there but not its answers."""
        if after + 1 < len(self.dates):
            self.block(teller, self.rng.randrange(after + 1, len(self.dates)), lines)

    def sessions(self, count: int, *, gap: int = 1) -> list[int] | None:
        """`count` session indexes at least `gap` apart, starting where there is least said; None
        when the conversation is too short for them."""
        last_start = len(self.dates) - 1 - gap * (count - 1)
        if last_start < 0:
            return None
        starts = list(range(last_start + 1))
        self.rng.shuffle(starts)
        start = min(starts, key=lambda s: sum(len(b) for b in self.blocks[s]))
        picked = [start]
        for _ in range(count - 1):
            room = len(self.dates) - 1 - gap * (count - len(picked) - 1)
            picked.append(
                self.rng.randint(
                    picked[-1] + gap, max(picked[-1] + gap, min(room, picked[-1] + 3 * gap))
                )
            )
        return picked

    # --- relative dates: the phrase said in a session and the date it means ---------------------

    def past(self, session: int) -> tuple[str, str, date]:
        """(phrase, answer, date) for something done shortly before the session."""
        today = self.on(session)
        choice = self.rng.randrange(6)
        if choice == 0:
            then = today - timedelta(days=1)
            return "yesterday", day(then), then
        if choice in (1, 2):
            weekday = 5 if choice == 1 else 6
            back = (today.weekday() - weekday) % 7 or 7
            then = today - timedelta(days=back)
            return f"last {WEEKDAYS[weekday]}", day(then), then
        if choice == 3:
            then = today - timedelta(days=14)
            return "two weeks ago", f"two weeks before {day(today)}", then
        if choice == 4:
            then = today - timedelta(days=7)
            return "last week", f"the week before {day(today)}", then
        back = (today.weekday() - 5) % 7 or 7
        then = today - timedelta(days=back)
        return "last weekend", f"the weekend before {day(today)}", then

    def later(self, session: int, weeks: int) -> tuple[str, date]:
        """(phrase, date) for a plan about `weeks` weeks after the session."""
        today = self.on(session)
        then = today + timedelta(weeks=weeks)
        if weeks <= 3:
            return ("next week" if weeks == 1 else f"in {weeks} weeks"), then
        if then.month == today.month % 12 + 1:
            return "next month", then
        return f"in {then:%B}", then
