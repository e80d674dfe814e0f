"""The pastimes of the realistic development set (books, films, crafts, cooking, concerts, races,
walks, a weekly habit), told and asked about like the life stories of
memory/proving/dialogue_stories.py.

A maker takes the chat and the person the story is about, places its turns, asks its questions
and records the facts that questions across stories combine. It returns False when the
conversation has no room for it.
"""

from __future__ import annotations

from datetime import timedelta

from memory.proving import dialogue_pools as pools
from memory.proving.dialogue_chat import Chat, Fact, day


def book(chat: Chat, who: str) -> bool:
    """A book started, then finished with a verdict."""
    picked = chat.sessions(2, gap=1)
    if picked is None:
        return False
    f = chat.friend(who)
    title, author, nationality, genre, about = chat.take(pools.BOOKS)
    verdict = chat.take(pools.BOOK_VERDICTS)
    where = chat.take(pools.READING_PLACES)
    phrase, answer, then = chat.past(picked[0])
    start = chat.block(who, picked[0], [
        (who, f"I started {title} {phrase}, reading it {where}. The {author} one, about {about}."),
        (f, chat.say("book_ask")),
        (who, chat.say("book_hooked")),
    ])  # fmt: skip
    end = chat.block(who, picked[1], [
        (f, chat.say("book_done_ask")),
        (who, f"Yes! Finished {title} on Sunday. The ending {verdict}."),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What book was {who} reading {where}?",
        f"Which novel did {who} say was about {about}?",
    ], [start[0]], title)  # fmt: skip
    chat.ask("single-hop", [
        f"What did {who} think of the ending of {title}?",
        f"How did {who} feel about how the {author} novel ended?",
    ], [end[1]], verdict)  # fmt: skip
    chat.ask("open-domain", [
        f"What nationality is the author of the book {who} read {where}?",
        f"Where is the writer of the book {who} started in {chat.dates[picked[0]]:%B} from?",
    ], [start[0]], nationality)  # fmt: skip
    chat.ask("single-hop", [
        f"Who wrote the book {who} was reading {where}?",
        f"Which author's novel did {who} pick up in {then:%B}?",
    ], [start[0]], author)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} start reading {title}?",
        f"When did {who} begin the {author} novel?",
    ], [start[0]], answer)  # fmt: skip
    chat.later_mention(who, picked[1], [
        (f, f"My sister borrowed {title} after I told her you loved it, so blame me if she hates it."),  # noqa: E501
        (who, chat.say("book_borrow_reply")),
    ])  # fmt: skip
    chat.facts.append(Fact("book", who, title, start[0], then))
    chat.facts.append(Fact("genre", who, genre, start[0]))
    return True


def craft(chat: Chat, who: str) -> bool:
    """Something made by hand, said once, asked about by its date."""
    picked = chat.sessions(1)
    if picked is None:
        return False
    f = chat.friend(who)
    piece, kind = chat.take(pools.PIECES)
    forgot, skipped = chat.take(pools.FORGOT)
    phrase, answer, then = chat.past(picked[0])
    verb = {"painting": "painted", "pottery": "made", "sewing": "finished", "woodwork": "built",
            "printmaking": "printed", "knitting": "knitted"}[kind]  # fmt: skip
    made = chat.block(who, picked[0], [
        (who, f"Look what I {verb} {phrase}: {piece}! {chat.take(pools.PROUD)}"),
        (f, chat.say("craft_ask")),
        (who, forgot),
    ])  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} make {piece.replace('my ', 'a ')}?",
        f"On what day did {who} make the {kind} piece, {piece.replace('my ', 'a ')}?",
    ], [made[0]], answer)  # fmt: skip
    chat.ask("single-hop", [
        f"What did {who} forget to do while working on {piece.replace('my ', 'a ')}?",
        f"What did {who} neglect while making {piece.replace('my ', 'a ')}?",
    ], [made[2]], skipped)  # fmt: skip
    chat.later_mention(who, picked[0], [
        (f, f"Is {piece.replace('my ', 'your ')} still your pride and joy, or have you made a better one?"),  # noqa: E501
        (who, chat.say("craft_again")),
    ])  # fmt: skip
    chat.facts.append(Fact("activity", who, kind, made[0], then))
    return True


def cooking(chat: Chat, who: str) -> bool:
    """A relative's dish learned: the cuisine is the open-domain answer."""
    picked = chat.sessions(2, gap=2)
    if picked is None:
        return False
    f = chat.friend(who)
    dish, cuisine = chat.take(pools.DISHES)
    relation, name = chat.take(pools.RELATIVES)
    failed, outcome = chat.take(pools.FAILURES)
    first = chat.block(who, picked[0], [
        (who, f"I'm trying to learn {dish} the way my {relation} {name} makes it. Attempt three tonight."),  # noqa: E501
        (f, chat.say("cooking_ask")),
        (who, failed),
    ])  # fmt: skip
    second = chat.block(who, picked[1], [
        (who, f"Update on the cooking saga: {name} came over and said mine was nearly as good as the original."),  # noqa: E501
        chat.react(f),
    ])  # fmt: skip
    chat.ask("open-domain", [
        f"Which country's cuisine is {who} learning to cook?",
        f"What kind of food is {who} practising with {name}'s recipe?",
    ], [first[0]], f"{cuisine} ({dish})")  # fmt: skip
    chat.ask("single-hop", [
        f"Whose {dish} recipe is {who} trying to copy?",
        f"Which relative taught {who} the dish that went wrong twice?",
    ], [first[0], second[0]], f"{relation} {name}")  # fmt: skip
    chat.ask("single-hop", [
        f"What happened to {who}'s second attempt at {dish}?",
        f"How did the second try at {name}'s recipe turn out for {who}?",
    ], [first[2]], outcome)  # fmt: skip
    return True


def concert(chat: Chat, who: str) -> bool:
    picked = chat.sessions(1)
    if picked is None:
        return False
    f = chat.friend(who)
    band, genre = chat.take(pools.BANDS)
    venue = chat.take(pools.VENUES)
    companion = chat.take(pools.FRIENDS)
    phrase, answer, then = chat.past(picked[0])
    seen = chat.block(who, picked[0], [
        (who, f"Saw {band} at {venue} {phrase} with {companion}. {chat.take(pools.RINGING)}"),
        (f, chat.say("gig_ask")),
        (who, chat.say("gig_reply")),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"Which band did {who} see with {companion}?",
        f"Who was playing at the gig {who} went to with {companion}?",
    ], [seen[0]], band)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} see {band} live?",
        f"When did {who} go to a gig with {companion}?",
    ], [seen[0]], answer)  # fmt: skip
    chat.ask("open-domain", [
        f"What kind of music does {who} listen to, judging by the concert with {companion}?",
        f"Would {who} enjoy a {genre} festival?",
    ], [seen[0]], f"{genre} (saw {band})")  # fmt: skip
    chat.ask("single-hop", [
        f"Where did {who} see {band}?",
        f"What venue was the gig {who} went to with {companion}?",
    ], [seen[0]], venue)  # fmt: skip
    chat.later_mention(who, picked[0], [
        (f, f"Heard {band} on the radio today and thought of you straight away."),
        (who, chat.say("gig_later")),
    ])  # fmt: skip
    chat.facts.append(Fact("concert", who, band, seen[0], then))
    return True


def race(chat: Chat, who: str) -> bool:
    picked = chat.sessions(2, gap=2)
    if picked is None:
        return False
    f = chat.friend(who)
    city = chat.take(pools.HOME_CITIES)
    time = chat.take(pools.RACE_TIMES)
    phrase, answer, then = chat.past(picked[1])
    train = chat.block(who, picked[0], [
        (who, f"I signed up for the {city} half marathon. {chat.say('race_start')}"),
        (f, chat.say("race_reply")),
    ])  # fmt: skip
    ran = chat.block(who, picked[1], [
        (who, f"Did it! Crossed the line {phrase} in {time}, {chat.take(pools.FINISHED)}."),
        chat.react(f),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What was {who}'s finishing time in the {city} half marathon?",
        f"How long did {who} take to finish the race?",
    ], [train[0], ran[0]], time)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} run the {city} half marathon?",
        f"When did {who} finish the race they trained for?",
    ], [train[0], ran[0]], answer)  # fmt: skip
    chat.ask("multi-hop", [
        f"Which race did {who} train for, and what time did they run?",
        f"What race did {who} enter and how did it go?",
    ], [train[0], ran[0]], f"the {city} half marathon, in {time}")  # fmt: skip
    chat.ask("single-hop", [
        f"Which city's half marathon did {who} sign up for?",
        f"Where was the race {who} trained for?",
    ], [train[0]], city)  # fmt: skip
    chat.facts.append(Fact("activity", who, "running", ran[0], then))
    return True


def film(chat: Chat, who: str) -> bool:
    picked = chat.sessions(1)
    if picked is None:
        return False
    f = chat.friend(who)
    title, genre = chat.take(pools.FILMS)
    opinion = chat.take(pools.FILM_OPINIONS)
    companion = chat.take(pools.FRIENDS)
    phrase, answer, then = chat.past(picked[0])
    seen = chat.block(who, picked[0], [
        (f, chat.say("film_ask")),
        (who, f"Watched {title} with {companion} {phrase}. {opinion.format(c=companion)}"),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"Which film did {who} watch with {companion}?",
        f"What did {who} and {companion} watch together?",
    ], [seen[1]], title)  # fmt: skip
    chat.ask("open-domain", [
        f"What genre of film did {who} see with {companion}?",
        f"Would {who} enjoy another {genre}?",
    ], [seen[1]], f"{genre} ({title})")  # fmt: skip
    chat.ask("single-hop", [
        f"Who watched {title} with {who}?",
        f"Who did {who} see {title} with?",
    ], [seen[1]], companion)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} watch {title}?",
        f"When did {who} go to see the film with {companion}?",
    ], [seen[1]], answer)  # fmt: skip
    chat.later_mention(who, picked[0], [
        (f, f"I finally watched {title} because you wouldn't shut up about it."),
        (who, chat.say("film_later")),
    ])  # fmt: skip
    chat.facts.append(Fact("film", who, title, seen[1], then))
    return True


def hiking(chat: Chat, who: str) -> bool:
    """Two hints at loving the outdoors: the inference asks about a hiking holiday."""
    picked = chat.sessions(2, gap=3)
    if picked is None:
        return False
    f = chat.friend(who)
    trail = chat.take(pools.TRAILS)
    distance = chat.take(pools.DISTANCES)
    first = chat.block(who, picked[0], [
        (who, chat.take(pools.OUTDOORS)),
        (f, chat.say("outdoors_reply")),
    ])  # fmt: skip
    second = chat.block(who, picked[1], [
        (who, f"Did {trail} on Sunday, {distance}. {chat.take(pools.WALK_TAILS)}"),
        chat.react(f),
    ])  # fmt: skip
    chat.ask("open-domain", [
        f"Would {who} enjoy a hiking holiday?",
        f"Would {who} prefer a walking trip or a beach resort?",
    ], [first[0], second[0]], "Yes, prefers mountains and long walks to beaches")  # fmt: skip
    chat.ask("single-hop", [
        f"How far did {who} walk on {trail}?",
        f"How long was {who}'s Sunday walk?",
    ], [second[0]], distance)  # fmt: skip
    today = chat.on(picked[1])
    sunday = today - timedelta(days=(today.weekday() - 6) % 7 or 7)
    chat.ask("temporal", [
        f"When did {who} walk {trail}?",
        f"When did {who} do the {distance} walk?",
    ], [second[0]], day(sunday))  # fmt: skip
    chat.facts.append(Fact("activity", who, "hiking", second[0], sunday))
    return True


def regular(chat: Chat, who: str) -> bool:
    """A weekly activity mentioned in passing."""
    picked = chat.sessions(1)
    if picked is None:
        return False
    f = chat.friend(who)
    activity, place = chat.take(pools.ACTIVITIES)
    weekday = chat.take(pools.WEEKNIGHTS)
    said = chat.block(who, picked[0], [
        (f, chat.say("weekly_ask", day=weekday)),
        (who, f"Yes, {activity} at {place} every {weekday}, {chat.take(pools.SANE)}."),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What does {who} do every {weekday}?",
        f"What does {who} do on {weekday} evenings to stay sane?",
    ], [said[1]], f"{activity} at {place}")  # fmt: skip
    chat.ask("single-hop", [
        f"Where does {who} go for {activity}?",
        f"Where does {who} spend {weekday} evenings?",
    ], [said[1]], place)  # fmt: skip
    # Undated: a weekly habit has no "when" to count from.
    chat.facts.append(Fact("activity", who, activity, said[1]))
    return True
