"""The stories of the realistic development set: each tells one thread of a person's life over
one to three sessions (a trip, a book, a job offer…) and asks about it as people would.

A maker takes the chat and the person the story is about, places its turns, asks its questions
and records the facts that questions across stories combine. It returns False when the
conversation has no room for it.
"""

from __future__ import annotations

from datetime import timedelta

from memory.proving import dialogue_pools as pools
from memory.proving.dialogue_chat import Chat, Fact, day


def trip(chat: Chat, who: str) -> bool:
    """A holiday planned, sometimes moved to another city, then told about."""
    picked = chat.sessions(3, gap=2)
    if picked is None:
        return False
    plan_at, change_at, back_at = picked
    f = chat.friend(who)
    city, country = chat.take(pools.CITIES)
    goal, goal_country = city, country
    companion = chat.take(pools.FRIENDS)
    phrase, answer, then = chat.past(back_at)
    month = f"{then:%B}" if then.month != chat.on(plan_at).month else "a few weeks"
    when = f"in {month}" if month != "a few weeks" else "in a few weeks"
    changed = chat.rng.random() < 0.5
    plan = chat.block(who, plan_at, [
        (who, f"Guess what, {companion} and I finally booked a trip! {city} {when}, five days."),
        (f, f"Oh nice! Have you been to {city} before?"),
        (who, "Never, that's the whole point. I mostly want to eat and walk around with no plan."),
    ])  # fmt: skip
    change = []
    if changed:
        goal, goal_country = chat.take(pools.CITIES)
        reason = chat.take(pools.TRIP_REASONS)
        change = chat.block(who, change_at, [
            (who, f"Small change of plans, {city} is off. {reason.capitalize()}."),
            chat.react(f),
            (who, f"So we're doing {goal} instead, same dates. {companion} is thrilled actually."),
        ])  # fmt: skip
        change = [change[0], change[-1]]
    highlight = chat.take(pools.HIGHLIGHTS)
    reaction = chat.react(f)
    asked = chat.fresh(pools.TRIP_QUESTIONS, city=goal)
    detail = chat.fresh(pools.TRIP_DETAILS, city=goal)
    back = chat.block(who, back_at, [
        (who, f"We got back from {goal} {phrase}! Honestly {highlight} was the best bit."),
        reaction,
        (who, f"{companion} already wants to go back. I'm still tired though, five days of walking."),  # noqa: E501
        (f, asked) if asked else None,
        (who, detail) if detail else None,
    ])  # fmt: skip
    back = back[: 3 if reaction else 2]
    chat.ask("single-hop", [
        f"What was the best part of {who}'s trip to {goal}?",
        f"What did {who} enjoy most on the holiday with {companion}?",
    ], [back[0]], highlight)  # fmt: skip
    chat.ask("single-hop", [
        f"Who did {who} go to {goal} with?",
        f"Who went on the {goal} trip with {who}?",
    ], [plan[0], *change[-1:], back[-1]], companion)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} come back from {goal}?",
        f"When did {who} return from the trip with {companion}?",
    ], [back[0]], answer)  # fmt: skip
    chat.ask("open-domain", [
        f"Which country did {who} visit with {companion}?",
        f"What country was {who}'s holiday with {companion} in?",
    ], [*(change[-1:] or plan[:1]), back[0]], goal_country)  # fmt: skip
    if changed:
        chat.ask_change("temporal", [
            f"Where did {who} plan to go before changing the trip?",
            f"Which city was {who}'s holiday with {companion} meant to be in at first?",
        ], [plan[0], change[0]], f"{city}, before switching to {goal}")  # fmt: skip
        chat.ask("single-hop", [
            f"Why did {who} cancel the {city} trip?",
            f"What made {who} change the holiday plans?",
        ], [change[0]], reason)  # fmt: skip
    chat.later_mention(who, back_at, [
        (f, f"Have you finished sorting the {goal} photos yet? I still want to see them."),
        (who, "Not even close, there are about eight hundred. I'll pick the best ten for you."),
    ])  # fmt: skip
    chat.facts.append(Fact("trip", who, goal, back[0], then))
    return True


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
        (f, "Ooh, is it good so far? I keep seeing it everywhere."),
        (who, "So good. I missed my stop yesterday because I was reading, no joke."),
    ])  # fmt: skip
    end = chat.block(who, picked[1], [
        (f, "Did you ever finish that book you were obsessed with?"),
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
        (who, "Ha, tell her to stick with it past the first hundred pages."),
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
        (who, f"Look what I {verb} {phrase}: {piece}! First one I'm actually proud of."),
        (f, "Stop, that's gorgeous. How long did it take you?"),
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
        (who, "Still the favourite. The newer ones are fine but that one feels special."),
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
        (f, "Attempt three?? What happened to the first two?"),
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


def job_offer(chat: Chat, who: str) -> bool:
    """A job offer accepted, then declined."""
    picked = chat.sessions(2, gap=1)
    if picked is None:
        return False
    f = chat.friend(who)
    company = chat.take(pools.COMPANIES)
    role = chat.take(pools.ROLES)
    offer = chat.block(who, picked[0], [
        (who, f"Big news: {company} offered me the {role} job! I said yes on the spot."),
        (f, "WHAT. Congratulations!! When do you start?"),
        (who, "Start of next quarter, if the paperwork goes through. I'm terrified and excited."),
    ])  # fmt: skip
    back = chat.block(who, picked[1], [
        (who, f"So, I pulled out of the {company} thing. They want everyone in the office five days a week now."),  # noqa: E501
        (f, "Oh no, after all that? Honestly, that's a dealbreaker, you'd hate the commute."),
        (who, "Exactly. I'm staying where I am for now and I feel weirdly calm about it."),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"Which company offered {who} a job as {role}?",
        f"Who offered {who} a new position?",
    ], [offer[0], back[0]], company)  # fmt: skip
    chat.ask_change("temporal", [
        f"Did {who} end up joining {company}?",
        f"Is {who} still planning to take the new job?",
    ], [offer[0], back[0]], "No: accepted at first, then declined the offer")  # fmt: skip
    chat.ask("single-hop", [
        f"Why did {who} turn down the job at {company}?",
        f"What made {who} change their mind about the new role?",
    ], [back[0]], "they required five days a week in the office")  # fmt: skip
    chat.ask("single-hop", [
        f"What role was {who} offered at {company}?",
        f"What position did {who} say yes to before backing out?",
    ], [offer[0]], role)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} get the job offer from {company}?",
        f"When did {who} tell {f} about the new job offer?",
    ], [offer[0]], f"around {day(chat.on(picked[0]))}")  # fmt: skip
    chat.facts.append(
        Fact("event", who, f"{who} getting the offer from {company}", offer[0], chat.on(picked[0]))
    )
    return True


def move(chat: Chat, who: str) -> bool:
    """A move to another city, delayed, then done."""
    picked = chat.sessions(3, gap=2)
    if picked is None:
        return False
    f = chat.friend(who)
    city = chat.take(pools.HOME_CITIES)
    arrived, best = chat.take(pools.ARRIVED)
    reason, because = chat.take(pools.DELAYS)
    first, first_date = chat.later(picked[0], 6)
    second = chat.on(picked[2])
    plan = chat.block(who, picked[0], [
        (who, f"We signed for a flat in {city}! Moving {first}, if everything goes to plan."),
        chat.react(f),
        (who, "Mostly for the job, but also we wanted a bit more space and a garden."),
    ])  # fmt: skip
    delay = chat.block(who, picked[1], [
        (who, f"Move update: it's pushed back to {second:%B}, {reason}."),
        (f, "Annoying, but better than moving into a building site I guess."),
    ])  # fmt: skip
    done = chat.block(who, picked[2], [
        (f, "So?? Are you in the new place yet?"),
        (who, arrived),
    ])  # fmt: skip
    chat.ask_change(
        "temporal",
        [
            f"When did {who} first plan to move to {city}?",
            f"When was {who}'s move originally supposed to happen?",
        ],
        [plan[0], delay[0]],
        f"{first_date:%B %Y}, before it was pushed back to {second:%B}",
    )
    chat.ask("temporal", [
        f"When did {who} actually move to {city}?",
        f"In which month did {who} finally get into the new flat?",
    ], [delay[0], done[1]], f"{second:%B %Y}")  # fmt: skip
    chat.ask("single-hop", [
        f"Why was {who}'s move to {city} delayed?",
        f"What held up {who}'s move?",
    ], [delay[0]], because)  # fmt: skip
    chat.ask("single-hop", [
        f"What does {who} like about the flat in {city}?",
        f"What's the best thing about {who}'s new home?",
    ], [done[1]], best)  # fmt: skip
    chat.later_mention(who, picked[2], [
        (f, f"How's {city} treating you these days? Found a favourite pub yet?"),
        (who, "Getting there, still getting lost on the way back from the station though."),
    ])  # fmt: skip
    chat.facts.append(Fact("event", who, f"{who}'s move to {city}", done[1], second))
    return True


def pet(chat: Chat, who: str) -> bool:
    """A pet refused, then adopted."""
    picked = chat.sessions(2, gap=2)
    if picked is None:
        return False
    f = chat.friend(who)
    partner = chat.take(pools.PARTNERS)
    breed = chat.take(pools.BREEDS)
    name = chat.take(pools.PET_NAMES)
    phrase, answer, then = chat.past(picked[1])
    animal = "cat" if "cat" in breed else "dog"
    no = chat.block(who, picked[0], [
        (who, f"{partner} keeps sending me shelter photos but no, we are not getting a {animal}, not in this flat."),  # noqa: E501
        (f, "Famous last words. I give it three months."),
    ])  # fmt: skip
    yes = chat.block(who, picked[1], [
        (who, f"Don't laugh. We adopted a {breed} {phrase}. Her name is {name}."),
        (f, "HAHA I knew it! How is she settling in?"),
        (who, "She slept on my feet all night and I've already bought her three toys."),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What's the name of {who}'s {animal}?",
        f"What did {who} and {partner} call their new pet?",
    ], [yes[0]], name)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} adopt {name}?",
        f"When did {who}'s household get the {breed}?",
    ], [yes[0]], answer)  # fmt: skip
    chat.ask_change(
        "temporal",
        [
            f"Was {who} keen on getting a {animal} at first?",
            f"What did {who} say before the adoption, when {partner} wanted a pet?",
        ],
        [no[0], yes[0]],
        f"No, said they would not get one in that flat, then adopted {name}",
    )
    chat.ask("open-domain", [
        f"Is {name} a dog or a cat?",
        f"What kind of animal did {who} adopt?",
    ], [yes[0]], f"a {animal} ({breed})")  # fmt: skip
    chat.ask("single-hop", [
        f"Who in {who}'s home wanted a pet first?",
        f"Who kept sending {who} shelter photos?",
    ], [no[0]], partner)  # fmt: skip
    chat.later_mention(who, picked[1], [
        (f, f"How's {name} doing? Still stealing socks?"),
        (who, f"Worse, she's moved on to shoes. {partner} thinks it's hilarious, I don't."),
    ])  # fmt: skip
    chat.facts.append(Fact("event", who, f"{who} adopting {name}", yes[0], then))
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
        (who, f"Saw {band} at {venue} {phrase} with {companion}. My ears are still ringing."),
        (f, "Jealous! Did they play the old stuff?"),
        (who, "Only two old songs, but the encore was twenty minutes, we lost our voices."),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"Which band did {who} see with {companion}?",
        f"Who was playing at the gig {who} went to with {companion}?",
    ], [seen[0]], band)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} see {band} live?",
        f"When was the concert where {who} lost their voice?",
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
        (who, "Ha, I've had their songs on repeat since that night, it's a problem."),
    ])  # fmt: skip
    chat.facts.append(Fact("concert", who, band, seen[0], then))
    return True


def family(chat: Chat, who: str) -> bool:
    """Family news, and how someone took it: the answer is in a turn without the keyword."""
    picked = chat.sessions(1)
    if picked is None:
        return False
    f = chat.friend(who)
    relation, name = chat.take(pools.RELATIVES)
    if relation == "mom":
        relation, name = "cousin", "Marco"
    news, noun, reaction = chat.take(pools.FAMILY_NEWS)
    phrase, answer, then = chat.past(picked[0])
    told = chat.block(who, picked[0], [
        (who, f"Family news: my {relation} {name} {news}! We found out {phrase}."),
        (f, "Oh wow, that's huge! How did your mom take it?"),
        (who, reaction),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"How did {who}'s mom react to {name}'s news?",
        f"What did {who}'s mother do after hearing about the {noun}?",
    ], [told[2]], reaction)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who}'s family hear about {name}'s {noun}?",
        f"When did {who} learn that their {relation} {news}?",
    ], [told[0]], answer)  # fmt: skip
    chat.ask("single-hop", [
        f"What is the name of {who}'s {relation}?",
        f"Who in {who}'s family {news}?",
    ], [told[0]], name)  # fmt: skip
    chat.later_mention(who, picked[0], [
        (f, f"Any news from {name}? I keep wondering how it's all going."),
        (who, "All calm for now, the whole family has finally stopped talking about it."),
    ])  # fmt: skip
    chat.facts.append(
        Fact("event", who, f"{who}'s family hearing of {name}'s {noun}", told[0], then)
    )
    return True


def research(chat: Chat, who: str) -> bool:
    """Research, then a course: the inference question asks about a career."""
    picked = chat.sessions(2, gap=3)
    if picked is None:
        return False
    f = chat.friend(who)
    topic, career = chat.take(pools.FIELDS)
    first = chat.block(who, picked[0], [
        (who, f"I've spent every evening this week reading up on {topic}. I think I'm onto something."),  # noqa: E501
        (f, "Ooh, mysterious. Is this a new chapter or a new hobby?"),
        (who, "Not sure yet. It just feels like the first thing in years that really excites me."),
    ])  # fmt: skip
    second = chat.block(who, picked[1], [
        (who, f"Okay it's official, I signed up for an evening course in {career}. Twelve weeks."),
        chat.react(f),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What did {who} research?",
        f"What was {who} reading about every evening?",
    ], [first[0]], topic)  # fmt: skip
    chat.ask(
        "open-domain",
        [
            f"Would {who} likely pursue {career} as a career option?",
            f"Is {who} considering a change of career, and into what?",
        ],
        [first[0], second[0]],
        f"Likely yes: researched {topic}, then took a {career} course",
    )
    chat.ask("temporal", [
        f"When did {who} sign up for the {career} course?",
        f"When did {who} enrol in evening classes?",
    ], [second[0]], f"around {day(chat.on(picked[1]))}")  # fmt: skip
    chat.facts.append(Fact("activity", who, f"a {career} course", second[0], chat.on(picked[1])))
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
        (who, f"I signed up for the {city} half marathon. Training starts tomorrow, wish me luck."),
        (f, "You're mad. I can barely run for a bus."),
    ])  # fmt: skip
    ran = chat.block(who, picked[1], [
        (who, f"Did it! Crossed the line {phrase} in {time}, my legs are destroyed."),
        chat.react(f),
    ])  # fmt: skip
    chat.ask("single-hop", [
        f"What was {who}'s finishing time in the {city} half marathon?",
        f"How long did {who} take to finish the race?",
    ], [ran[0]], time)  # fmt: skip
    chat.ask("temporal", [
        f"When did {who} run the {city} half marathon?",
        f"When did {who} finish the race they trained for?",
    ], [ran[0]], answer)  # fmt: skip
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
        (f, "Did you do anything fun this week or was it all work?"),
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
        (who, "And?? Please tell me you liked it, otherwise we can't be friends."),
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
    first = chat.block(who, picked[0], [
        (who, chat.take(pools.OUTDOORS)),
        (f, "You and your mud. I need a sunbed and a book."),
    ])  # fmt: skip
    second = chat.block(who, picked[1], [
        (who, f"Did {trail} on Sunday, twenty kilometres. Legs are dead, soul is happy."),
        chat.react(f),
    ])  # fmt: skip
    chat.ask("open-domain", [
        f"Would {who} enjoy a hiking holiday?",
        f"Would {who} prefer a walking trip or a beach resort?",
    ], [first[0], second[0]], "Yes, prefers mountains and long walks to beaches")  # fmt: skip
    chat.ask("single-hop", [
        f"How far did {who} walk on {trail}?",
        f"How long was {who}'s Sunday walk?",
    ], [second[0]], "twenty kilometres")  # fmt: skip
    today = chat.on(picked[1])
    sunday = today - timedelta(days=(today.weekday() - 6) % 7 or 7)
    chat.ask("temporal", [
        f"When did {who} walk {trail}?",
        f"When did {who} do the twenty kilometre walk?",
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
        (f, f"Are you still doing your {weekday} thing?"),
        (who, f"Yes, {activity} at {place} every {weekday}, it's the only thing keeping me sane."),
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
