"""The small turns around a story's facts in the realistic development set, several ways each:
two people telling the same kind of story (or one person telling it twice) never say them the
same way (memory/proving/dialogue_chat.py takes them in a shuffled order per conversation)."""

from __future__ import annotations

SAY: dict[str, list[str]] = {
    "trip_asked": [
        "Oh nice! Have you been to {city} before?",
        "{city}! Whose idea was that?",
        "Ooh, {city} in {when}? What's the plan there?",
        "Wait, {city}? I didn't know that was on your list.",
    ],
    "trip_why": [
        "Never, that's the whole point. I mostly want to eat and walk around with no plan.",
        "Mostly for the food, if I'm honest, and to switch my phone off for a bit.",
        "It was a cheap flight at two in the morning, and we just went for it.",
        "We both needed a break from everything, and it looked beautiful in the photos.",
    ],
    "photos": [
        "Not even close, there are about eight hundred. I'll pick the best ten for you.",
        "Half of them are blurry, but I'll send the good ones at the weekend.",
        "I keep meaning to, but every time I start I just end up missing it.",
        "Nearly! I'm making a little album, it's taking forever.",
    ],
    "book_ask": [
        "Ooh, is it good so far? I keep seeing it everywhere.",
        "Is that the one everyone on the train seems to be reading?",
        "I've heard mixed things about that one, what do you think so far?",
        "Oh, my cousin loved that one. Is it worth the hype?",
    ],
    "book_hooked": [
        "So good. I missed my stop yesterday because I was reading, no joke.",
        "It's slow at first, but I'm properly hooked now.",
        "I stayed up until one last night, that's how good it is.",
        "Not sure yet, the first chapters are strange, but I'm curious.",
    ],
    "book_done_ask": [
        "Did you ever finish that book you were obsessed with?",
        "So how did the book end?",
        "Are you still reading that novel you kept telling me about?",
        "Any verdict on the book yet?",
    ],
    "book_borrow_reply": [
        "Ha, tell her to stick with it past the first hundred pages.",
        "She'll love it, or at least she'll have opinions about it.",
        "Tell her the middle drags a bit but it's worth it.",
        "Oh no, the pressure! Tell her I said sorry in advance.",
    ],
    "craft_ask": [
        "Stop, that's gorgeous. How long did it take you?",
        "Wow, you made that? How long did it take?",
        "That's seriously good. Was it hard?",
        "No way that's your first proper one. How long did it take?",
    ],
    "craft_again": [
        "Still the favourite. The newer ones are fine but that one feels special.",
        "It's hanging by the door, everyone who visits asks about it.",
        "I gave it to my mum in the end, she wouldn't stop hinting.",
        "Honestly I've made better since, but that one's the sentimental one.",
    ],
    "offer_ask": [
        "WHAT. Congratulations!! When do you start?",
        "That's amazing news! When's the first day?",
    ],
    "offer_reply": [
        "Start of next quarter, if the paperwork goes through. I'm terrified and excited.",
        "In about six weeks, once I've worked my notice. Still sinking in.",
    ],
    "offer_sorry": [
        "Oh no, after all that? Honestly, that's a dealbreaker, you'd hate the commute.",
        "What a shame, but that's a good reason, you'd have been miserable.",
    ],
    "offer_calm": [
        "Exactly. I'm staying where I am for now and I feel weirdly calm about it.",
        "Yep. My current job isn't perfect, but it's fine for now.",
    ],
    "move_why": [
        "Mostly for the job, but also we wanted a bit more space and a garden.",
        "We wanted to be closer to family, and rent there is actually cheaper.",
    ],
    "move_hope": ["if everything goes to plan", "fingers crossed", "if the paperwork behaves"],
    "move_delay_reply": [
        "Annoying, but better than moving into a building site I guess.",
        "Ugh, the waiting is the worst part, but at least you have more time to pack.",
    ],
    "move_done_ask": ["So?? Are you in the new place yet?", "Did the move finally happen?"],
    "move_later": [
        "Getting there, still getting lost on the way back from the station though.",
        "Loving it, there's a market on Saturdays that I'm already addicted to.",
    ],
    "pet_doubt": [
        "Famous last words. I give it three months.",
        "Sure, sure. I'll believe it when I see it.",
    ],
    "pet_ask": [
        "HAHA I knew it! How is she settling in?",
        "I KNEW IT. Okay, how's she doing so far?",
    ],
    "pet_settled": [
        "She slept on my feet all night and I've already bought her three toys.",
        "She's hiding under the sofa mostly, but she ate her dinner, so that's progress.",
    ],
    "pet_later": [
        "Worse, she's moved on to shoes. {partner} thinks it's hilarious, I don't.",
        "She's perfect, apart from waking us up at five every single morning.",
    ],
    "family_later": [
        "All calm for now, the whole family has finally stopped talking about it.",
        "Everyone's fine, we're having a big dinner about it next month.",
    ],
    "research_ask": [
        "Ooh, mysterious. Is this a new chapter or a new hobby?",
        "Oh interesting, where did that come from all of a sudden?",
    ],
    "research_hope": [
        "Not sure yet. It just feels like the first thing in years that really excites me.",
        "I don't know, I just can't stop thinking about it, which is new for me.",
    ],
    "research_start": ["I think I'm onto something.", "It's taken over my evenings."],
    "cooking_ask": [
        "Attempt three?? What happened to the first two?",
        "Third try? Tell me about the first two.",
    ],
    "gig_ask": [
        "Jealous! Did they play the old stuff?",
        "Ah, I'm so jealous. Were they good live?",
    ],
    "gig_reply": [
        "Only two old songs, but the encore was twenty minutes, we lost our voices.",
        "Even better than I hoped, the whole crowd was singing.",
    ],
    "gig_later": [
        "Ha, I've had their songs on repeat since that night, it's a problem.",
        "Don't, I still get goosebumps thinking about that night.",
    ],
    "race_start": [
        "Training starts tomorrow, wish me luck.",
        "I have three months to get fit, wish me luck.",
    ],
    "race_reply": [
        "You're mad. I can barely run for a bus.",
        "Who are you and what did you do with my friend?",
    ],
    "film_ask": [
        "Did you do anything fun this week or was it all work?",
        "Did you get out at all this weekend?",
        "What have you been watching lately? I need ideas.",
        "Any good films lately?",
    ],
    "film_later": [
        "And?? Please tell me you liked it, otherwise we can't be friends.",
        "Finally! I've been waiting for your verdict for weeks.",
        "Ha, and? Did you cry too?",
        "Okay, I need your full review, now.",
    ],
    "outdoors_reply": [
        "You and your mud. I need a sunbed and a book.",
        "Not me, I'd be in a hammock with a cocktail.",
    ],
    "weekly_ask": ["Are you still doing your {day} thing?", "Do you still go out every {day}?"],
}
