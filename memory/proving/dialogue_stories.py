"""The stories of the realistic development set: each tells one thread of a person's life over
one to three sessions (a trip, a book, a job offer…) and asks about it as people would.

A maker takes the chat and the person the story is about, places its turns, asks its questions
and records the facts that questions across stories combine. It returns False when the
conversation has no room for it.
"""

from __future__ import annotations

from datetime import date, timedelta

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
    length = chat.take(pools.TRIP_LENGTHS)
    plan = chat.block(who, plan_at, [
        (who, f"Guess what, {companion} and I finally booked a trip! {city} {when}, {length}."),
        (f, chat.say("trip_asked", city=city, when=month)),
        (who, chat.say("trip_why")),
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
        (who, f"{companion} already wants to go back. I'm still tired though, {length} of walking."),  # noqa: E501
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
        (who, chat.say("photos")),
    ])  # fmt: skip
    chat.facts.append(Fact("trip", who, goal, back[0], then))
    return True


def job_offer(chat: Chat, who: str) -> bool:
    """A job offer accepted, then declined."""
    picked = chat.sessions(2, gap=1)
    if picked is None:
        return False
    f = chat.friend(who)
    company = chat.take(pools.COMPANIES)
    role = chat.take(pools.ROLES)
    decline, because = chat.take(pools.DECLINES)
    offer = chat.block(who, picked[0], [
        (who, f"Big news: {company} offered me the {role} job! {chat.take(pools.OFFER_TAILS)}"),
        (f, chat.say("offer_ask")),
        (who, chat.say("offer_reply")),
    ])  # fmt: skip
    back = chat.block(who, picked[1], [
        (who, f"So, I pulled out of the {company} thing. {decline}"),
        (f, chat.say("offer_sorry")),
        (who, chat.say("offer_calm")),
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
    ], [back[0]], because)  # fmt: skip
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


def month(value: date) -> int:
    """Months since year 0, to compare months across years."""
    return value.year * 12 + value.month - 1


def move(chat: Chat, who: str) -> bool:
    """A move to another city, delayed, then done."""
    picked = chat.sessions(3, gap=2)
    if picked is None:
        return False
    first, first_date = chat.later(picked[0], 6)
    # Moved in a later month than planned ("first week done" a week after), the delay told in
    # between, in an earlier month than the move.
    later = [
        s
        for s in range(picked[0] + 1, len(chat.dates))
        if month(chat.on(s)) > month(first_date) + 1
    ]
    if not later:
        return False
    arrive_at = later[0] if len(later) == 1 else chat.rng.choice(later[:3])
    second = chat.on(arrive_at) - timedelta(days=7)
    # Said before the first date if the chat allows, else at least before the move's month.
    between = [s for s in range(picked[0] + 1, arrive_at) if chat.on(s) < first_date] or [
        s for s in range(picked[0] + 1, arrive_at) if month(chat.on(s)) < month(second)
    ]
    if not between:
        return False
    picked = [picked[0], chat.rng.choice(between), arrive_at]
    f = chat.friend(who)
    city = chat.take(pools.HOME_CITIES)
    arrived, best = chat.take(pools.ARRIVED)
    reason, because = chat.take(pools.DELAYS)
    plan = chat.block(who, picked[0], [
        (who, f"We signed for a flat in {city}! Moving {first}, {chat.say('move_hope')}."),
        chat.react(f),
        (who, chat.say("move_why")),
    ])  # fmt: skip
    delay = chat.block(who, picked[1], [
        (who, f"Move update: it's pushed back to {second:%B}, {reason}."),
        (f, chat.say("move_delay_reply")),
    ])  # fmt: skip
    done = chat.block(who, picked[2], [
        (f, chat.say("move_done_ask")),
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
        (who, chat.say("move_later")),
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
        (f, chat.say("pet_doubt")),
    ])  # fmt: skip
    yes = chat.block(who, picked[1], [
        (who, f"Don't laugh. We adopted a {breed} {phrase}. Her name is {name}."),
        (f, chat.say("pet_ask")),
        (who, chat.say("pet_settled")),
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
        (who, chat.say("pet_later", partner=partner)),
    ])  # fmt: skip
    chat.facts.append(Fact("event", who, f"{who} adopting {name}", yes[0], then))
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
        (who, chat.say("family_later")),
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
        (who, f"I've spent every evening this week reading up on {topic}. {chat.say('research_start')}"),  # noqa: E501
        (f, chat.say("research_ask")),
        (who, chat.say("research_hope")),
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
