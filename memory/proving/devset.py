"""The memory evaluation's development sets: synthetic long-running chats, in the LoCoMo style.

`python -m memory.proving.devset` regenerates `tests/data/memory_dev.json` (small, run by
`make test`) and `tests/data/memory_dev_large.json` (`make bench-memory`); the same seed gives the
same bytes.

A conversation is two friends chatting over a year or so; each message is a document
(`"Name: text"`, timed by its session). Facts come from stories (a job change, a move, a
puppy…) told in one to three messages, with the questions they answer and their category:

- `single-hop`: one message answers, the question reuses its words;
- `multi-hop`: two messages are needed (at least one of them has to be found);
- `temporal`: when something happened, or what was true before a fact changed;
- `open-domain`: the message plus common knowledge (an author's nationality, a dish's country);
- `paraphrase`: one message answers, but the question says it in other words (a grep for the
  question's words finds only the speaker's name).

Every question lists every message that answers it (a later message that restates an answer is
evidence too) and carries its `answer` for the reader; replies and small talk around the facts
share their words without answering. Nothing here knows how the search works.

Pure Python, no Django: the evaluation's loader (memory/proving/evalsets.py) reads what this writes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 20240611
OUTPUT = Path(__file__).resolve().parents[2] / "tests" / "data"


@dataclass(frozen=True)
class Size:
    name: str
    conversations: int
    stories: int  # per conversation
    documents: int  # per conversation, at least (stories + replies + small talk)


SMALL = Size("memory-dev", conversations=4, stories=9, documents=60)
LARGE = Size("memory-dev-large", conversations=10, stories=22, documents=150)


@dataclass
class Story:
    """Messages placed on the conversation's time line (0 = first session, 1 = last) and the
    questions they answer; evidence indexes into `messages`."""

    messages: list[tuple[float, str]] = field(default_factory=list)
    questions: list[tuple[str, str, list[int], str]] = field(default_factory=list)

    def say(self, at: float, text: str) -> int:
        self.messages.append((at, text))
        return len(self.messages) - 1

    def ask(self, category: str, text: str, evidence: list[int], answer: str) -> None:
        self.questions.append((category, text, evidence, answer))


# --- pools -------------------------------------------------------------------------------------

NAMES = [
    "Maya", "Jonas", "Priya", "Tomas", "Aisha", "Lukas", "Sofia", "Mateo", "Hana", "Oliver",
    "Leila", "Noah", "Ines", "Kofi", "Elena", "Ravi", "Clara", "Diego", "Yuki", "Samir",
    "Freya", "Marco", "Nadia", "Owen", "Zara", "Felix", "Amara", "Hugo", "Lina", "Tariq",
]  # fmt: skip
RELATIVES = [
    "Lena", "Anton", "Rosa", "Emil", "Julia", "Viktor", "Carmen", "Pavel", "Nora", "Iris",
    "Bruno", "Alma", "Teo", "Greta", "Milo", "Ada", "Rafael", "Selma", "Oskar", "Vera",
]  # fmt: skip
JOBS = [
    "data analyst", "product designer", "nurse", "civil engineer", "copywriter",
    "pharmacist", "sous chef", "paralegal", "physiotherapist", "logistics coordinator",
    "software tester", "architect", "veterinary technician", "account manager",
]  # fmt: skip
COMPANIES = [
    "Brightwell Analytics", "Norrland Foods", "Quillstone Media", "Harbor & Finch",
    "Castellan Health", "Tidewater Logistics", "Pinecrest Studio", "Orbit Lane Software",
    "Meridian Bank", "Kestrel Robotics", "Saltmarsh Pharmacy", "Greyhaven Architects",
]  # fmt: skip
CITIES = [
    "Lisbon", "Rotterdam", "Krakow", "Valencia", "Gothenburg", "Lyon", "Porto", "Leipzig",
    "Bologna", "Edinburgh", "Tallinn", "Ljubljana", "Seville", "Ghent", "Bergen", "Graz",
]  # fmt: skip
LANDMARKS = [
    "old harbour", "botanical garden", "central station", "river promenade", "cathedral",
    "university library", "covered market", "city park", "castle hill", "football stadium",
]  # fmt: skip
BREEDS = ["beagle", "corgi", "labrador", "dachshund", "poodle", "whippet", "border collie"]
PETS = ["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Olive", "Pixel", "Truffle"]
TRIPS = [
    ("Kyoto", "the bamboo forest at dawn"), ("Iceland", "the glacier hike"),
    ("Marrakesh", "the night market"), ("the Dolomites", "the via ferrata"),
    ("Crete", "the Samaria gorge"), ("Patagonia", "the Perito Moreno glacier"),
    ("Vietnam", "the boat trip in Ha Long Bay"), ("Scotland", "the ferry to Skye"),
]  # fmt: skip
INSTRUMENTS = [
    ("cello", "strings"), ("trombone", "brass"), ("clarinet", "woodwind"),
    ("viola", "strings"), ("french horn", "brass"), ("oboe", "woodwind"),
]  # fmt: skip
ENSEMBLES = ["community orchestra", "city wind band", "university symphony", "chamber group"]
RACES = [
    ("half marathon", "21.1 km"), ("marathon", "42.2 km"), ("10K", "10 km"),
]  # fmt: skip
INJURIES = [
    ("knee", "ligament"), ("shoulder", "tendon"), ("ankle", "ligament"), ("wrist", "tendon"),
]  # fmt: skip
BOOKS = [
    ("Americanah", "Chimamanda Ngozi Adichie", "Nigerian"),
    ("Kafka on the Shore", "Haruki Murakami", "Japanese"),
    ("One Hundred Years of Solitude", "Gabriel García Márquez", "Colombian"),
    ("My Brilliant Friend", "Elena Ferrante", "Italian"),
    ("The Remains of the Day", "Kazuo Ishiguro", "British"),
    ("Pedro Páramo", "Juan Rulfo", "Mexican"),
    ("The Vegetarian", "Han Kang", "South Korean"),
]  # fmt: skip
DISHES = [
    ("paella", "Spanish"), ("pierogi", "Polish"), ("moussaka", "Greek"),
    ("feijoada", "Brazilian"), ("goulash", "Hungarian"), ("bibimbap", "Korean"),
    ("tagine", "Moroccan"), ("pho", "Vietnamese"),
]  # fmt: skip
LANGUAGES = [
    ("Japanese", "Japan"), ("Finnish", "Finland"), ("Greek", "Greece"),
    ("Korean", "South Korea"), ("Hungarian", "Hungary"), ("Swedish", "Sweden"),
]  # fmt: skip
BANDS = ["the Lumineers", "Arctic Monkeys", "Florence and the Machine", "Khruangbin", "Muse"]
VENUES = ["Ziggo Dome", "Royal Albert Hall", "Olympia", "Roundhouse", "Paradiso"]
SCHOOLS = ["Willow Park Primary", "Riverside School", "St. Anne's Primary", "Oakfield Academy"]
KIDS = ["Leo", "Sami", "Arlo", "Finn", "Nico", "Theo", "Jasper", "Ezra"]
THEMES = ["dinosaur", "pirate", "space", "jungle", "unicorn", "superhero"]
PLACES = ["Santorini", "the Amalfi coast", "Lake Bled", "the Algarve", "Cinque Terre"]

SMALL_TALK = [
    "{X}: The weather has been so grey all week, I just want some sun.",
    "{X}: Did you watch the match last night? What a finish.",
    "{X}: Work is hectic this month, too many meetings and not enough coffee.",
    "{X}: I tried the new bakery around the corner, their cinnamon rolls are dangerous.",
    "{X}: Any series you'd recommend? I finished everything on my list.",
    "{X}: Slept eleven hours on Sunday, no regrets.",
    "{X}: My phone screen cracked again, I should just buy a case.",
    "{X}: Spent the whole weekend cleaning the flat, it finally looks decent.",
    "{X}: Traffic this morning was unreal, the whole city was stuck.",
    "{X}: I'm thinking of getting into running, or at least walking more.",
    "{X}: Happy Friday! Any plans for the weekend?",
    "{X}: My neighbour is learning the drums. Every evening. At nine.",
    "{X}: I made soup for the whole week, very proud of myself.",
    "{X}: We should plan a trip together next month, somewhere warm.",
    "{X}: Just a quiet week here, nothing new to report.",
    "{X}: I finally fixed the bike, the brakes work again.",
    "{X}: Had lunch with an old colleague today, we laughed the whole time.",
    "{X}: The city is full of tourists again, the old town is packed.",
    "{X}: Do you remember the name of that café we liked? I forgot it.",
    "{X}: Long day, I'm going to bed early tonight.",
    "{X}: I bought way too many plants, the windowsill is a jungle now.",
    "{X}: My back hurts from sitting all day, I need a better chair.",
    "{X}: Hope your week is going well! Talk soon.",
    "{X}: The concert in the park got cancelled because of the rain.",
    "{X}: I'm reading the news less, it helps with the stress.",
    "{X}: Tried a yoga class today, I am not flexible at all.",
    "{X}: Our team won the quiz night at the pub!",
    "{X}: I keep forgetting to call the dentist.",
    "{X}: Made pancakes this morning, the first one was a disaster as usual.",
    "{X}: The train was delayed again, I missed the start of the meeting.",
    "{X}: Finally booked a haircut, it has been four months.",
    "{X}: The heating broke again, I'm wearing two jumpers inside.",
    "{X}: I've been cooking a lot more lately, mostly pasta if I'm honest.",
    "{X}: Watched a documentary about octopuses, they are so clever.",
    "{X}: Our landlord says the rent goes up next year, great.",
    "{X}: I'm trying to drink less coffee this week. It's not going well.",
    "{X}: Went for a long walk by the river after work, much needed.",
    "{X}: The power went out for two hours last night, we played cards by candlelight.",
    "{X}: My laptop is so slow, I think it's time for a new one.",
    "{X}: Saw the most beautiful sunset on the way home today.",
]  # fmt: skip
REPLIES = [
    "{Y}: That's wonderful news, {X}! Tell me more next time.",
    "{Y}: Wow, how are you feeling about it?",
    "{Y}: Haha, that sounds like a lot. Keep me posted!",
    "{Y}: I'm so happy for you, {X}.",
    "{Y}: Oh nice, I didn't see that coming!",
    "{Y}: Love that. We need to catch up properly soon.",
    "{Y}: Amazing, send pictures!",
]  # fmt: skip


def _date(day: datetime) -> str:
    return f"{day.day} {day:%B %Y}"


# --- stories -----------------------------------------------------------------------------------
# Each takes the random source, the subject (who the facts are about) and the friend, and
# returns its messages and questions; the placement (0..1) keeps changed facts in order.


class Draw:
    """Picks from the pools without repeating a value within a conversation while others are
    left: two stories sharing a city or a name would make a question ambiguous."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[object] = set()

    def one[T](self, pool: list[T]) -> T:
        fresh = [item for item in pool if item not in self.used] or pool
        item = self.rng.choice(fresh)
        self.used.add(item)
        return item

    def two[T](self, pool: list[T]) -> tuple[T, T]:
        return self.one(pool), self.one(pool)

    def uniform(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high)

    def randint(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


StoryMaker = Callable[[Draw, str, str], Story]


def job_change(rng: Draw, x: str, y: str) -> Story:
    job1, job2 = rng.two(JOBS)
    old, new = rng.two(COMPANIES)
    story = Story()
    first = story.say(
        rng.uniform(0.05, 0.3),
        f"{x}: First week as a {job1} at {old} done! My manager is great and the team is small.",
    )
    last = story.say(
        rng.uniform(0.6, 0.9),
        f"{x}: Today was my last day at {old}. On Monday I start as a {job2} at {new}.",
    )
    story.ask("single-hop", f"What was {x}'s job at {old}?", [first], job1)
    story.ask("temporal", f"Where did {x} work before {new}?", [first, last], old)
    story.ask("paraphrase", f"What position did {x} take on after resigning?", [last], job2)
    return story


def move(rng: Draw, x: str, y: str) -> Story:
    before, after = rng.two(CITIES)
    near1, near2 = rng.two(LANDMARKS)
    story = Story()
    first = story.say(
        rng.uniform(0.0, 0.3),
        f"{x}: I still can't get over the view from my flat in {before}, right by the {near1}.",
    )
    last = story.say(
        rng.uniform(0.55, 0.9),
        f"{x}: The boxes are unpacked, we officially live in {after} now. "
        f"The new place is near the {near2}.",
    )
    story.ask("temporal", f"Where did {x} live before the move to {after}?", [first], before)
    story.ask("paraphrase", f"In which town has {x} settled after relocating?", [last], after)
    return story


def puppy(rng: Draw, x: str, y: str) -> Story:
    breed, pet = rng.one(BREEDS), rng.one(PETS)
    story = Story()
    at = rng.uniform(0.1, 0.6)
    adopted = story.say(
        at, f"{x}: We adopted a {breed} puppy from the shelter on Saturday and named her {pet}!"
    )
    story.say(at + 0.15, f"{x}: {pet} chewed through another shoe today. Send help.")
    story.ask("paraphrase", f"What is {x}'s dog called?", [adopted], pet)
    story.ask("temporal", f"When did {x} adopt {pet}?", [adopted], "the Saturday before {0}")
    return story


def sibling(rng: Draw, x: str, y: str) -> Story:
    relation = rng.one(["sister", "brother"])
    name, job, city = rng.one(RELATIVES), rng.one(JOBS), rng.one(CITIES)
    story = Story()
    at = rng.uniform(0.05, 0.5)
    works = story.say(
        at, f"{x}: My {relation} {name} works as a {job} in {city}, has been there for years."
    )
    visit = story.say(
        at + rng.uniform(0.1, 0.4), f"{x}: Booked my train to see {name} next month, can't wait!"
    )
    story.ask("single-hop", f"What does {x}'s {relation} {name} do for work?", [works], job)
    story.ask("multi-hop", f"Which city is {x} travelling to next month?", [works, visit], city)
    return story


def trip(rng: Draw, x: str, y: str) -> Story:
    place, highlight = rng.one(TRIPS)
    days = rng.randint(5, 14)
    story = Story()
    back = story.say(
        rng.uniform(0.1, 0.9),
        f"{x}: Just got back from {days} days in {place}. {highlight[0].upper()}{highlight[1:]}"
        " was the best part.",
    )
    story.ask("temporal", f"When did {x} come back from {place}?", [back], "on {0}")
    story.ask("single-hop", f"What was the best part of {x}'s {place} trip?", [back], highlight)
    return story


def music(rng: Draw, x: str, y: str) -> Story:
    instrument, family = rng.one(INSTRUMENTS)
    ensemble = rng.one(ENSEMBLES)
    story = Story()
    at = rng.uniform(0.1, 0.6)
    practice = story.say(
        at,
        f"{x}: I've been practising the {instrument} every evening, the audition for the"
        f" {ensemble} is in two weeks.",
    )
    result = story.say(
        at + 0.12, f"{x}: I got the seat in the {ensemble}! First rehearsal on Thursday."
    )
    story.ask(
        "open-domain",
        f"Which section of an orchestra would {x} sit in?",
        [practice],
        f"{family} ({instrument})",
    )
    story.ask("single-hop", f"Did {x} get the seat in the {ensemble}?", [result], "yes")
    return story


def race(rng: Draw, x: str, y: str) -> Story:
    name, distance = rng.one(RACES)
    city = rng.one(CITIES)
    minutes = {"half marathon": 110, "marathon": 235, "10K": 52}[name] + rng.randint(-10, 20)
    story = Story()
    done = story.say(
        rng.uniform(0.2, 0.9),
        f"{x}: Finished the {city} {name} in {minutes // 60}h{minutes % 60:02d}! My legs are"
        " jelly.",
    )
    story.ask("open-domain", f"How many kilometres did {x} run in {city}?", [done], distance)
    return story


def surgery(rng: Draw, x: str, y: str) -> Story:
    part, tissue = rng.one(INJURIES)
    story = Story()
    at = rng.uniform(0.1, 0.8)
    fixed = story.say(
        at,
        f"{x}: The surgeon repaired my torn {part} {tissue} on Tuesday, six weeks of rest now.",
    )
    story.say(at + 0.05, f"{y}: Get well soon, {x}! Do you need anything from the shops?")
    story.ask(
        "paraphrase",
        f"What operation did {x} have?",
        [fixed],
        f"torn {part} {tissue}",
    )
    return story


def engagement(rng: Draw, x: str, y: str) -> Story:
    partner, place, city = rng.one(RELATIVES), rng.one(PLACES), rng.one(CITIES)
    story = Story()
    at = rng.uniform(0.05, 0.5)
    proposal = story.say(at, f"{x}: {partner} proposed on a beach in {place}! I said yes!")
    date = story.say(
        at + rng.uniform(0.1, 0.3),
        f"{x}: We set the wedding date, next June, at a vineyard outside {city}.",
    )
    story.ask("paraphrase", f"Who is {x} going to marry?", [proposal], partner)
    story.ask(
        "single-hop", f"Where will {x}'s wedding take place?", [date], f"a vineyard outside {city}"
    )
    story.ask(
        "multi-hop",
        f"Where did the person {x} marries next June propose?",
        [proposal, date],
        place,
    )
    return story


def book_club(rng: Draw, x: str, y: str) -> Story:
    title, author, nationality = rng.one(BOOKS)
    story = Story()
    picked = story.say(
        rng.uniform(0.1, 0.9),
        f"{x}: Our book club picked {title} by {author} for this month, I'm halfway through.",
    )
    story.ask("single-hop", f"Which book did {x}'s book club pick this month?", [picked], title)
    story.ask(
        "open-domain",
        f"What nationality is the author {x}'s reading group picked?",
        [picked],
        nationality,
    )
    return story


def cooking(rng: Draw, x: str, y: str) -> Story:
    dish, cuisine = rng.one(DISHES)
    story = Story()
    made = story.say(
        rng.uniform(0.05, 0.95),
        f"{x}: Made {dish} from scratch tonight with my grandmother's recipe. Worth the mess.",
    )
    story.ask("open-domain", f"Which country's cuisine did {x} cook from scratch?", [made], cuisine)
    return story


def commute(rng: Draw, x: str, y: str) -> Story:
    minutes = rng.one([50, 60, 75, 90])
    story = Story()
    drive = story.say(
        rng.uniform(0.0, 0.35),
        f"{x}: Stuck in traffic again, the drive to the office took {minutes} minutes.",
    )
    sold = story.say(
        rng.uniform(0.55, 0.95), f"{x}: Sold my car this week! I'm cycling to the office now."
    )
    story.ask(
        "temporal",
        f"How did {x} get to the office before selling the car?",
        [drive, sold],
        "by car",
    )
    story.ask("paraphrase", f"Does {x} still own a vehicle?", [sold], "no")
    return story


def language(rng: Draw, x: str, y: str) -> Story:
    tongue, country = rng.one(LANGUAGES)
    lesson = rng.randint(8, 30)
    story = Story()
    studying = story.say(
        rng.uniform(0.1, 0.9),
        f"{x}: Lesson {lesson} of my {tongue} course today, the grammar is brutal but I love it.",
    )
    story.ask(
        "open-domain",
        f"In which country would {x}'s new language skills help the most?",
        [studying],
        country,
    )
    return story


def concert(rng: Draw, x: str, y: str) -> Story:
    band, venue = rng.one(BANDS), rng.one(VENUES)
    story = Story()
    tickets = story.say(
        rng.uniform(0.05, 0.8), f"{x}: Got tickets to see {band} at the {venue} on Friday!"
    )
    story.ask("temporal", f"When was {x} going to see {band}?", [tickets], "the Friday after {0}")
    story.ask("paraphrase", f"Which gig venue did {x} buy seats for?", [tickets], venue)
    return story


def child(rng: Draw, x: str, y: str) -> Story:
    kid, theme, school = rng.one(KIDS), rng.one(THEMES), rng.one(SCHOOLS)
    age = rng.randint(4, 6)
    story = Story()
    at = rng.uniform(0.05, 0.5)
    party = story.say(
        at, f"{x}: My son {kid} turned {age} today, we threw a {theme} party in the garden."
    )
    school_start = story.say(
        at + rng.uniform(0.1, 0.3),
        f"{x}: {kid} starts at {school} next week, new backpack and everything.",
    )
    story.ask(
        "multi-hop",
        f"How old was {x}'s child who starts at {school} at the {theme} party?",
        [party, school_start],
        str(age),
    )
    story.ask("temporal", f"When did {kid} turn {age}?", [party], "on {0}")
    return story


STORIES: list[StoryMaker] = [
    job_change, move, puppy, sibling, trip, music, race, surgery, engagement, book_club,
    cooking, commute, language, concert, child,
]  # fmt: skip


# --- assembly ----------------------------------------------------------------------------------


def conversation(
    rng: random.Random, number: int, size: Size, speakers: list[str]
) -> dict[str, Any]:
    """One conversation: its stories (each kind told once per subject), replies and small talk
    spread over sessions a few days apart."""
    a, b = speakers
    kinds = [(maker, subject) for maker in STORIES for subject in (a, b)]
    rng.shuffle(kinds)
    chosen = kinds[: size.stories]
    draw = Draw(rng)
    # (placement, text, story index, message index): placements order the messages in time.
    placed: list[tuple[float, str, int, int]] = []
    stories: list[Story] = []
    for index, (maker, subject) in enumerate(chosen):
        friend = b if subject == a else a
        story = maker(draw, subject, friend)
        stories.append(story)
        for message, (at, text) in enumerate(story.messages):
            placed.append((min(at, 0.99), text, index, message))
            if rng.random() < 0.5:
                reply = rng.choice(REPLIES).format(X=subject, Y=friend)
                placed.append((min(at, 0.99) + 1e-4, reply, -1, -1))
    talk: list[str] = []
    while len(placed) < size.documents:
        # Without replacement, then again: a chat repeats itself, but not every other day.
        talk = talk or rng.sample(SMALL_TALK, len(SMALL_TALK))
        placed.append((rng.random(), talk.pop().format(X=rng.choice(speakers)), -1, -1))
    placed.sort(key=lambda item: item[0])

    sessions = max(8, len(placed) // 5)
    start = datetime(2022, 1, 3, tzinfo=UTC) + timedelta(days=rng.randint(0, 365))
    days = [0]
    for _ in range(sessions - 1):
        days.append(days[-1] + rng.randint(3, 14))
    documents: list[dict[str, str]] = []
    ids: dict[tuple[int, int], tuple[str, datetime]] = {}
    turns: dict[int, int] = {}
    for at, text, story_index, message in placed:
        session = min(int(at * sessions), sessions - 1)
        turns[session] = turns.get(session, 0) + 1
        time = start + timedelta(days=days[session], hours=19, minutes=2 * turns[session])
        doc_id = f"D{session + 1}:{turns[session]}"
        documents.append({"id": doc_id, "text": text, "time": time.isoformat()})
        if story_index >= 0:
            ids[(story_index, message)] = (doc_id, time)

    questions: list[dict[str, Any]] = []
    for index, story in enumerate(stories):
        for category, text, evidence, answer in story.questions:
            first_time = ids[(index, evidence[0])][1]
            questions.append(
                {
                    "id": f"q{len(questions) + 1:02d}",
                    "text": text,
                    "evidence": [ids[(index, message)][0] for message in evidence],
                    "category": category,
                    "answer": answer.format(_date(first_time)),
                }
            )
    return {"id": f"conv-{number}", "documents": documents, "questions": questions}


def build(size: Size, seed: int = SEED) -> dict[str, Any]:
    # A data set, not a secret: a seeded generator is the point.
    rng = random.Random(f"{seed}/{size.name}")  # noqa: S311
    names = rng.sample(NAMES, 2 * size.conversations)
    return {
        "name": size.name,
        "conversations": [
            conversation(rng, number + 1, size, names[2 * number : 2 * number + 2])
            for number in range(size.conversations)
        ],
    }


def main() -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for size, filename in ((SMALL, "memory_dev.json"), (LARGE, "memory_dev_large.json")):
        dataset = build(size)
        path = OUTPUT / filename
        path.write_text(json.dumps(dataset, indent=1, ensure_ascii=False) + "\n")
        counts: dict[str, int] = {}
        for conv in dataset["conversations"]:
            for question in conv["questions"]:
                counts[question["category"]] = counts.get(question["category"], 0) + 1
        documents = sum(len(conv["documents"]) for conv in dataset["conversations"])
        print(f"{path}: {documents} documents, {sum(counts.values())} questions {counts}")


if __name__ == "__main__":
    main()
