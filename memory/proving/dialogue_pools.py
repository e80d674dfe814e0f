"""Word pools and small knowledge tables for the realistic development set
(memory/proving/dialogues.py): people, places, works, food, and the chat around the facts.

The tables carry the common knowledge an open-domain question needs (a city's country, a dish's
cuisine, an author's nationality, a genre).
"""

from __future__ import annotations

PEOPLE = [
    "Melanie", "Caroline", "Jon", "Gina", "Maya", "Jonas", "Priya", "Tomas", "Aisha", "Lukas",
    "Sofia", "Mateo", "Hana", "Oliver", "Leila", "Noah", "Ines", "Kofi", "Elena", "Ravi",
]  # fmt: skip
RELATIVES = [
    ("sister", "Rosa"), ("brother", "Emil"), ("mom", "Carmen"), ("dad", "Viktor"),
    ("cousin", "Nora"), ("aunt", "Greta"), ("grandma", "Alma"), ("uncle", "Pavel"),
    ("sister", "Iris"), ("brother", "Teo"), ("cousin", "Bruno"), ("niece", "Ada"),
]  # fmt: skip
FRIENDS = [
    "Dana", "Felix", "Marta", "Sam", "Yusuf", "Lotte", "Andre", "Bea", "Chloe", "Karim",
    "Wren", "Imogen", "Tobias", "Nell", "Rafa", "June",
]  # fmt: skip
PARTNERS = ["Alex", "Jamie", "Robin", "Charlie", "Sasha", "Morgan", "Kai", "Jordan"]
COMPANIES = [
    "Brightwell Analytics", "Norrland Foods", "Quillstone Media", "Harbor & Finch",
    "Castellan Health", "Tidewater Logistics", "Pinecrest Studio", "Orbit Lane Software",
    "Meridian Bank", "Kestrel Robotics", "Greyhaven Architects", "Lumen Games",
]  # fmt: skip
ROLES = [
    "team lead", "senior designer", "project manager", "data analyst", "head of content",
    "product owner", "operations manager", "research assistant",
]  # fmt: skip
# City, country: where a trip goes, where someone moves.
CITIES = [
    ("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Krakow", "Poland"), ("Valencia", "Spain"),
    ("Seville", "Spain"), ("Lyon", "France"), ("Bologna", "Italy"), ("Naples", "Italy"),
    ("Edinburgh", "Scotland"), ("Tallinn", "Estonia"), ("Ljubljana", "Slovenia"),
    ("Ghent", "Belgium"), ("Bergen", "Norway"), ("Vienna", "Austria"), ("Prague", "Czechia"),
    ("Budapest", "Hungary"), ("Athens", "Greece"), ("Copenhagen", "Denmark"),
    ("Reykjavik", "Iceland"), ("Kyoto", "Japan"), ("Marrakesh", "Morocco"), ("Dublin", "Ireland"),
]  # fmt: skip
HOME_CITIES = ["Leeds", "Bristol", "Manchester", "Glasgow", "Utrecht", "Hamburg", "Cardiff", "York"]
HIGHLIGHTS = [
    "the food market by the river", "a sunset boat tour", "the tiny jazz bar near our hotel",
    "a day trip along the coast", "the old town at night", "a cooking class with a local chef",
    "the street art tour", "the castle at the top of the hill", "the hot springs outside town",
    "a bike ride through the vineyards", "the flea market on Sunday morning",
]  # fmt: skip
TRIP_REASONS = [
    "the flights doubled in price overnight", "the hotel cancelled our booking",
    "there's a rail strike planned for that week", "my friend there can't host us anymore",
    "it turns out the festival is the same week and everything is booked",
]  # fmt: skip
# Title, author, the author's nationality, genre, what it is about.
BOOKS = [
    ("Americanah", "Adichie", "Nigerian", "literary fiction", "a couple split between Lagos and the US"),  # noqa: E501 -- one row per book
    ("Kafka on the Shore", "Murakami", "Japanese", "magical realism", "a runaway boy and a man who talks to cats"),  # noqa: E501
    ("My Brilliant Friend", "Ferrante", "Italian", "literary fiction", "two girls growing up in Naples"),  # noqa: E501
    ("The Remains of the Day", "Ishiguro", "British", "literary fiction", "an old butler looking back on his life"),  # noqa: E501
    ("The Vegetarian", "Han Kang", "South Korean", "literary fiction", "a woman who stops eating meat"),  # noqa: E501
    ("Project Hail Mary", "Andy Weir", "American", "science fiction", "a teacher who wakes up alone on a spaceship"),  # noqa: E501
    ("The Girl with the Dragon Tattoo", "Stieg Larsson", "Swedish", "crime", "a journalist and a hacker chasing a missing girl"),  # noqa: E501
    ("Dune", "Frank Herbert", "American", "science fiction", "noble families fighting over a desert planet"),  # noqa: E501
    ("The Shadow of the Wind", "Zafon", "Spanish", "mystery", "a boy in Barcelona obsessed with a forgotten novel"),  # noqa: E501
    ("Educated", "Tara Westover", "American", "memoir", "a woman who grew up without school and ended up at Cambridge"),  # noqa: E501
    ("Piranesi", "Susanna Clarke", "British", "fantasy", "a man living alone in an endless house of statues"),  # noqa: E501
    ("The Name of the Rose", "Umberto Eco", "Italian", "mystery", "monks being murdered in a medieval abbey"),  # noqa: E501
]  # fmt: skip
BOOK_VERDICTS = [
    "completely wrecked me", "was a bit rushed honestly", "made me call my mom",
    "was perfect, no notes", "left me staring at the ceiling for an hour",
]  # fmt: skip
# Dish, cuisine (the country's adjective).
DISHES = [
    ("pierogi", "Polish"), ("paella", "Spanish"), ("moussaka", "Greek"), ("pho", "Vietnamese"),
    ("feijoada", "Brazilian"), ("goulash", "Hungarian"), ("bibimbap", "Korean"),
    ("tagine", "Moroccan"), ("ramen", "Japanese"), ("mole", "Mexican"), ("risotto", "Italian"),
    ("dal makhani", "Indian"), ("khachapuri", "Georgian"), ("pad thai", "Thai"),
]  # fmt: skip
# What someone made, and the craft.
PIECES = [
    ("a sunrise over the lake", "painting"), ("a portrait of my grandma", "painting"),
    ("a set of four mugs", "pottery"), ("a wonky but lovely fruit bowl", "pottery"),
    ("a quilt for my niece", "sewing"), ("a bookshelf out of old pallets", "woodwork"),
    ("a linocut of our street", "printmaking"), ("a little watercolour of the harbour", "painting"),
    ("a scarf in three colours", "knitting"), ("a bird feeder for the balcony", "woodwork"),
]  # fmt: skip
ACTIVITIES = [
    ("bouldering", "the climbing gym"), ("salsa", "the dance studio on Mill Street"),
    ("swimming", "the outdoor pool"), ("choir", "the community centre"),
    ("yoga", "the studio by the park"), ("volunteering", "the food bank"),
    ("running", "the running club"), ("pottery", "the ceramics studio"),
    ("chess", "the cafe on the corner"), ("photography", "the camera club"),
]  # fmt: skip
# Band, genre.
BANDS = [
    ("the Lumineers", "folk"), ("Arctic Monkeys", "rock"), ("Florence and the Machine", "indie"),
    ("Khruangbin", "psychedelic funk"), ("Muse", "rock"), ("Bon Iver", "folk"),
    ("Kamasi Washington", "jazz"), ("Phoebe Bridgers", "indie folk"), ("Daft Punk tribute", "electronic"),  # noqa: E501 -- the pairs read better unbroken
]  # fmt: skip
VENUES = ["the Roundhouse", "a tiny club downtown", "the arena", "an open-air stage in the park"]
# Film, genre.
FILMS = [
    ("Past Lives", "romantic drama"), ("Dune Part Two", "science fiction"),
    ("Everything Everywhere All at Once", "absurd comedy"), ("Oppenheimer", "historical drama"),
    ("Spirited Away", "animation"), ("The Grand Budapest Hotel", "comedy"),
    ("Parasite", "thriller"), ("Aftersun", "drama"), ("Knives Out", "murder mystery"),
]  # fmt: skip
FIELDS = [
    ("adoption agencies", "social work"), ("nursing degrees for adults", "nursing"),
    ("UX design bootcamps", "design"), ("teacher training", "teaching"),
    ("how to get short stories published", "writing"), ("beekeeping courses", "beekeeping"),
    ("counselling certificates", "counselling"), ("coding bootcamps", "software development"),
]  # fmt: skip
BREEDS = ["beagle", "corgi mix", "greyhound", "tabby cat", "black cat", "terrier mix", "labrador"]
PET_NAMES = ["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Olive", "Pixel", "Truffle"]
FAMILY_NEWS = [
    ("got engaged", "engagement", "She cried, obviously. Then she started planning the menu."),
    ("is having a baby", "pregnancy", "She's already knitting things, it's adorable honestly."),
    ("got into medical school", "acceptance", "She told every single neighbour within an hour."),
    ("decided to retire early", "retirement", "She's thrilled, she says it's about time someone slowed down."),  # noqa: E501 -- one row per piece of news
    ("is moving abroad", "move abroad", "Not great, she went very quiet and then cried a bit."),
    ("bought a house", "house purchase", "She's happy but already worried about the mortgage."),
]  # fmt: skip
RACE_TIMES = ["1:52", "2:04", "1:47", "2:11", "1:58", "2:19"]
TRAILS = ["the ridge loop above the reservoir", "the coastal path", "the old railway trail"]

# --- the chat around the facts -----------------------------------------------------------------

GREETINGS = [
    "Hey {Y}! Long week here, finally home with the kettle on. How are things on your end?",
    "Hi {Y}, finally sitting down with a cup of tea after a mad day. How have you been?",
    "Hey you! Sorry I went quiet for a bit, it's been a lot lately. What's going on with you?",
    "Hiii {Y}, got a minute? I have so much to tell you and I don't know where to start.",
    "Evening! The kitchen's clean, the dishes are done and I'm on the sofa, so catch me up.",
    "Hey {Y}, happy weekend! Slow morning here, coffee in bed. What have you been up to?",
]  # fmt: skip
GREETING_REPLIES = [
    "Hey! All good here, just tired from the week. What's new with you, anything exciting?",
    "Hi! I was literally about to text you, that's spooky. Go on, tell me everything.",
    "Hey {Y}! Busy but good, can't complain really. You first though, how are you?",
    "Oh perfect timing, I just got home and kicked my shoes off. How are you doing?",
]  # fmt: skip
GOODBYES = [
    "Okay I need to get dinner going before everyone starts complaining, talk soon!",
    "I should sleep, early start tomorrow and I'm already yawning. Night {Y}!",
    "Right, the laundry is calling me and it won't fold itself. Speak later this week?",
    "Gotta run, but this was so nice, I needed a proper catch up. Talk soon!",
]  # fmt: skip
GOODBYE_REPLIES = [
    "Night! Say hi to everyone for me and get some proper rest.",
    "Talk soon, and keep me posted on everything, I want all the updates!",
    "Bye! Let's not leave it so long next time, okay? Love you.",
]  # fmt: skip
READING_PLACES = [
    "on the train", "in bed every night", "on my lunch breaks", "in the bath",
    "at the laundrette", "on the plane",
]  # fmt: skip
# What someone forgot while making something: (the turn, the answer).
FORGOT = [
    ("Most of the day, I forgot to eat lunch. Totally worth it though.", "eat lunch"),
    ("All afternoon, I completely forgot to call my dad back, oops.", "call their dad back"),
    ("Hours! I forgot the oven was on and burnt the bread, no regrets.", "the bread in the oven"),
    ("Ages. I missed my yoga class because I lost track of time.", "their yoga class"),
    ("A whole Sunday, I didn't even get dressed until four in the afternoon.", "getting dressed"),
]  # fmt: skip
ARRIVED = [
    ("Yes, first week done! The flat is tiny but the light in the mornings is amazing.", "the morning light"),  # noqa: E501 -- (turn, answer) pairs
    ("We are! Boxes everywhere still, but the garden already has tomatoes in it.", "the garden"),
    ("Yep, moved in on Saturday. The neighbours brought us a cake, can you believe it?", "the friendly neighbours"),  # noqa: E501
    ("Finally! The kitchen is twice the size of the old one, I keep cooking for no reason.", "the big kitchen"),  # noqa: E501
]  # fmt: skip
FAILURES = [
    ("The first one stuck to the pan and the second one was basically soup, don't ask.", "it came out like soup"),  # noqa: E501
    ("The first was raw in the middle and the second I burnt while on the phone.", "it burnt"),
    ("First time I forgot the salt, second time I dropped the whole tray on the floor.", "it got dropped on the floor"),  # noqa: E501
]  # fmt: skip
OUTDOORS = [
    "I'd take a tent in the mountains over a beach resort any day, give me mud and views.",
    "Honestly my dream weekend is a long walk up a hill with a flask of soup at the top.",
    "Lying on a beach bores me to tears, I need a trail and a map or I go mad.",
]  # fmt: skip

# Reactions in context: they make sense only after the turn they answer.
REACTIONS = [
    "Oh wow, that's huge! How are you feeling about it?",
    "No way. I did not see that coming at all, tell me more.",
    "That sounds amazing, honestly. I'm a bit jealous.",
    "Ha, of course it did. That's so typical.",
    "Wait, really? Since when?",
    "Good for you, seriously. You've been talking about it forever.",
    "Oof. That's a lot to deal with, are you okay?",
    "I love that for you. Send pictures please!",
    "Okay that made me laugh out loud on the bus.",
    "Hmm, honestly I think that's the right call.",
    "That's so lovely. It sounds like you really needed it.",
    "Ugh, I'm sorry. That's really annoying after all the planning.",
    "Oh nice, I remember you mentioning that ages ago!",
    "How did everyone else take it?",
    "Wait, is that the one you told me about before?",
    "You never stop surprising me, you know that?",
    "Okay but that's actually brilliant.",
    "That's exactly what I would have done too, honestly.",
    "I want the full story next time we see each other.",
    "Was it as good as you hoped?",
    "Oh no. Did you at least get your money back?",
    "Right? I keep saying the same thing to everyone.",
    "Sounds like it was worth every penny then.",
    "That must have been such a relief.",
]  # fmt: skip
# Small talk: said by anyone, answering nothing, often near the facts' words.
SMALL_TALK = [
    "I really need a holiday, even just a long weekend somewhere warm would do it.",
    "My to-read pile is getting embarrassing, I keep buying books and not reading them.",
    "The weather has been so grey all week, I just want some sun on my face.",
    "Work is fine, just a lot of meetings that could have been emails.",
    "I tried a new recipe last night and it was a disaster, we ordered pizza in the end.",
    "Have you watched anything good lately? I've run out of shows.",
    "I keep meaning to get back into exercise but the sofa keeps winning.",
    "My neighbour has started learning the drums, so that's my evenings sorted.",
    "Honestly the best part of my day was a really good coffee this morning.",
    "I spent the whole afternoon cleaning out the cupboard under the stairs.",
    "Do you ever feel like the weeks are getting shorter? It's already Thursday again.",
    "I found a great little bakery near the station, their cinnamon buns are unreal.",
    "Concert tickets are so expensive now, it's ridiculous.",
    "I was thinking about moving somewhere quieter one day, but not yet.",
    "My phone screen cracked again, third time this year.",
    "We had friends over on Saturday and stayed up way too late playing cards.",
    "I started a puzzle, a thousand pieces, and I regret everything.",
    "The train was delayed again this morning, I almost missed my first meeting.",
    "I keep seeing adverts for dog shelters and it's dangerous for me.",
    "My plants are all dying and I have no idea what I'm doing wrong.",
    "Been sleeping badly, too much screen time before bed I think.",
    "The new cafe downstairs finally opened, it's already always full.",
    "I've been trying to call my parents more often, it's nice.",
    "I want to learn a language properly, not just the app streak.",
    "Someone at work brought homemade cake and now I think about it constantly.",
    "It's been ages since I went to the cinema, I miss it.",
    "The rent went up again, I might need to rethink things at some point.",
    "I'm trying to cook more at home, the takeaway bill was getting silly.",
    "My back hurts from sitting all day, I really need a better chair.",
    "Saw the most beautiful sky on the way home, didn't get a photo of course.",
    "I did nothing at all on Sunday and it was wonderful.",
    "We're thinking about painting the living room but can't agree on a colour.",
    "A friend from school got in touch out of nowhere, it was really sweet.",
    "I've been walking to work instead of taking the bus, it clears my head.",
    "My inbox is a disaster, I've given up on inbox zero.",
    "Does anyone actually enjoy flying? Airports drain me.",
]  # fmt: skip
SMALL_TALK_REPLIES = [
    "Same here, honestly. It's been one of those months.",
    "Ha, I know exactly what you mean.",
    "Oh I feel that, more than you know.",
    "That's so relatable it hurts a little.",
    "Ugh, yes. Let me know if you figure it out.",
    "Honestly you deserve a break more than anyone.",
    "Haha, sounds about right for you.",
    "I'm the same, it's a bit of a curse.",
]  # fmt: skip
# Said after a reaction or a reply, so a turn reads like a person typing, not a template.
FOLLOW_UPS = [
    "I want the whole story next time we grab a coffee, no skipping the good parts.",
    "You have to tell me how it goes, I'll be thinking about it all week now.",
    "Honestly this made my evening, I needed some good news after the day I had.",
    "I told my sister about it earlier and she said the exact same thing.",
    "It reminds me of that time we stayed up until three talking about everything.",
    "I'm going to need photos, lots of them, the blurry ones too.",
    "Let me know if you need a hand with anything, I mean it.",
    "Things like this always seem to happen to you and never to me.",
    "We should celebrate properly when things calm down a bit on my side.",
    "I keep telling people you're the bravest person I know and this proves it.",
    "Anyway, don't overthink it, you always land on your feet somehow.",
    "My week was so boring compared to yours, I just worked and slept.",
    "I can already picture your face when it happened, it's too good.",
    "Okay now I'm a bit emotional, which is ridiculous on a Tuesday evening.",
    "Give it a few weeks and it'll feel completely normal, I promise.",
    "This is exactly why I love our chats, there's always something new.",
    "Sometimes the plans that go sideways end up being the best ones.",
    "I'd have panicked completely, so I'm impressed you stayed so calm.",
    "That's the kind of thing I'd never have the nerve to do myself.",
    "Write it all down somewhere, you'll be glad you did in a year.",
    "I'm a little bit proud of you, is that weird to say over text?",
    "My mum would love this story, can I tell her or is it a secret?",
    "You always find the silver lining, it's honestly a superpower.",
    "We need to catch up in person soon, texting doesn't do it justice.",
    "I laughed so loudly that the cat jumped off the sofa.",
    "Remember when you said this would never happen? Look at you now.",
    "It's funny how things work out when you stop planning every detail.",
    "Keep me posted, I want updates even if they're small ones.",
    "You deserve this more than you'll ever admit, so just enjoy it.",
    "I had a feeling something like this was coming, you've been hinting for weeks.",
    "I'm saving this conversation so I can remind you of it later.",
    "Life's been so quiet here that I'm living through you a bit, sorry.",
    "This calls for a proper dinner out, my treat, once payday comes.",
    "I bet everyone around you has an opinion about it too.",
    "Take it slowly though, you don't have to figure everything out at once.",
    "The more you tell me, the more I want to do something like that too.",
    "Honestly it sounds like a scene from a film, I love it.",
    "I hope you're treating yourself to something nice after all that.",
    "That's going to be a great story for years, you know that, right?",
    "Just don't forget about the rest of us when you're famous.",
]  # fmt: skip
# What the teller adds after a short turn of their own.
ASIDES = [
    "Anyway, that's my news, I've been dying to tell someone all day.",
    "Sorry, I know I'm rambling a bit tonight, it's been a strange week.",
    "I still can't quite believe it when I say it out loud.",
    "Don't tell anyone yet though, I'm not ready for the questions.",
    "My mum thinks I've lost the plot, but she says that about everything.",
    "It's funny, a year ago I'd never have imagined any of this.",
    "I keep replaying it in my head when I'm trying to fall asleep.",
    "Honestly it's the most excited I've been about anything in ages.",
    "Everyone at work has heard about it twice already, poor them.",
    "I'll send you photos later when I'm not on my phone's last bar.",
    "It was one of those days where everything just clicked for once.",
    "It feels like things are finally moving again after a slow winter.",
    "I wrote it all down in my notebook so I don't forget the details.",
    "I told myself I'd be sensible this year and look how that went.",
    "The best part is nobody expected it from me, least of all me.",
    "I'm still smiling about it, it's a bit embarrassing really.",
    "It's been a while since something felt this good, so I'm savouring it.",
    "You know me, I never do anything halfway.",
    "Honestly it's been the talk of the family group chat all week.",
    "I should probably have asked you for advice first, in hindsight.",
    "I'll tell you the rest when we finally see each other.",
    "The whole thing took way longer than I thought it would.",
    "It wasn't perfect, but it was mine and I'm happy with it.",
    "Funny how the small things end up mattering the most.",
    "Can't stop thinking about what comes next, to be honest.",
]  # fmt: skip
DELAYS = [
    ("the landlord needs to redo the bathroom first", "the landlord had to redo the bathroom"),
    ("the sellers on the other end of the chain pulled out", "the chain fell through"),
    ("the mortgage paperwork is stuck at the bank", "the mortgage paperwork was delayed"),
    ("my start date at the new job moved", "the new job's start date moved"),
    ("they found damp in the bedroom and need to fix it", "damp had to be fixed"),
]  # fmt: skip
MORE_SMALL_TALK = [
    "I finally fixed the wobbly kitchen table, only took me two years.",
    "Our street is being dug up again, the drilling starts at seven every morning.",
    "I bought a new pair of running shoes and now I feel obliged to actually run.",
    "The supermarket rearranged everything and I walked around lost for twenty minutes.",
    "My cousin keeps sending voice notes that are ten minutes long, I can't keep up.",
    "Spent my lunch break sitting in the park, it felt like a tiny holiday.",
    "I'm trying to drink less coffee and it's going terribly, as you'd expect.",
    "There was a fox in the garden last night, just sitting there staring at me.",
    "Work gave us a free lunch today so morale is briefly very high.",
    "I've started listening to podcasts on my commute, mostly true crime, it's a problem.",
    "It rained the whole weekend so I rearranged my bookshelf by colour.",
    "My laptop decided to update itself in the middle of a presentation, fun times.",
    "I've been eating way too much toast lately, it's my comfort food apparently.",
    "Someone left a whole box of free plants outside their door, I took three.",
    "I tried meditating for ten minutes and thought about dinner the whole time.",
    "We finally cleared out the spare room, it's a room again instead of a storage unit.",
    "The heating broke for two days, I wore my coat indoors like a madwoman.",
    "I've decided this is the year I learn to make proper bread, wish me luck.",
    "My friend dragged me to a quiz night and we came last, proudly.",
    "I keep forgetting to water the basil and it keeps forgiving me.",
]  # fmt: skip
WEEKNIGHTS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
# What someone said after a film; {c} is who they watched it with.
FILM_OPINIONS = [
    "I cried twice, {c} pretended not to.",
    "{c} fell asleep halfway through, I'm never letting that go.",
    "We argued about the ending all the way home, in a good way.",
    "Best thing I've seen all year, {c} agreed for once.",
    "Bit too long, but the soundtrack has been stuck in my head since.",
    "{c} loved it, I thought it was fine, we're still debating.",
]  # fmt: skip
# The friend's questions about a trip and the traveller's answers: more turns that name the city
# without answering what the trip's questions ask.
TRIP_QUESTIONS = [
    "Okay but how was the food in {city}? That's all I care about.",
    "Was {city} busy? I've heard it's packed with tourists all year now.",
    "Would you go back to {city}, or is it a one-time thing?",
    "How was the weather in {city}? It looked grey in your photos.",
    "Did you manage to speak any of the language in {city}?",
    "Where did you stay in {city}, somewhere central?",
]  # fmt: skip
TRIP_DETAILS = [
    "The food in {city} was unreal, we basically ate our way from one end of town to the other.",
    "We stayed in a tiny flat above a bakery in {city}, woke up to the smell of bread every day.",
    "{city} was rainy for two days, so we hid in museums and cafes, which was lovely anyway.",
    "Public transport in {city} was so easy, we never needed a taxi once.",
    "I tried ordering in the local language in {city} and the waiter answered in perfect English.",
    "Everything in {city} was more expensive than I expected, but we didn't care by day two.",
    "We walked about fifteen kilometres a day around {city}, my feet have filed a complaint.",
    "The people in {city} were so friendly, a stranger walked us ten minutes to a restaurant.",
]  # fmt: skip
# Tails of a story's first turn, so two people telling the same kind of story say it differently.
OFFER_TAILS = [
    "I said yes on the spot.", "I accepted before they could change their minds.",
    "I signed the contract this afternoon.", "I've already told my manager I'm leaving.",
]  # fmt: skip
# Why an accepted offer was turned down: (the turn's sentence, the answer).
DECLINES = [
    ("They want everyone in the office five days a week now.", "five days a week in the office"),
    ("They cut the salary by a fifth once the contract arrived.", "the salary was cut"),
    ("The team I'd have joined is being reorganised out of existence.", "the team was being reorganised"),  # noqa: E501 -- (turn, answer) pairs
    ("They want me to relocate to another city within six months.", "they wanted them to relocate"),
]  # fmt: skip
PROUD = [
    "First one I'm actually proud of.", "Not perfect, but I love it.",
    "Took forever but it's finally done.", "It's going straight on the wall.",
]  # fmt: skip
RINGING = [
    "My ears are still ringing.", "Best night out in ages.", "I'm still humming the songs.",
    "I have no voice left at all.",
]  # fmt: skip
SANE = [
    "it's the only thing keeping me sane", "it's my favourite hour of the week",
    "I'd go every day if I could", "it's the one thing I never skip",
]  # fmt: skip
DISTANCES = [
    "twenty kilometres",
    "fourteen kilometres",
    "twenty-five kilometres",
    "eighteen kilometres",
]
FINISHED = [
    "my legs are destroyed", "I cried at the finish line", "I could barely walk after",
    "I beat my goal by a minute",
]  # fmt: skip
TRIP_LENGTHS = ["five days", "a long weekend", "a whole week", "ten days"]
WALK_TAILS = [
    "Legs are dead, soul is happy.", "Muddy boots, best day of the month.",
    "Saw two deer and not a single person.", "Packed lunch on the top, perfect silence.",
]  # fmt: skip

# Second sentences made of a start and an end, so a long chat has enough of them to say each once.
_ASIDE_STARTS = ["Honestly,", "Anyway,", "To be fair,", "Funny thing is,", "Not going to lie,",
                 "Between us,", "Weirdly,", "I have to say,"]  # fmt: skip
_ASIDE_ENDS = [
    "I've been thinking about it all week.", "it still feels a bit unreal.",
    "I didn't expect to care this much.", "it's been the highlight of my month.",
    "I keep telling everyone about it.", "it made me happier than I expected.",
    "I needed something like this.", "it's all I've talked about at work.",
    "I'd do it all again tomorrow.", "I'm still a little giddy about it.",
]  # fmt: skip
_FOLLOW_STARTS = ["Honestly,", "Seriously,", "Okay but", "Wow,", "Aw,", "Ha,", "Oh man,", "Right,"]
_FOLLOW_ENDS = [
    "I want to hear everything next time.", "that's made my evening.",
    "you have to keep me posted.", "I'm so happy for you.", "that's such a you thing to do.",
    "I'd never have guessed.", "send me pictures when you can.", "I'm impressed.",
    "I'll want the long version over dinner.", "you've earned it.",
]  # fmt: skip
ASIDES += [f"{start} {end}" for start in _ASIDE_STARTS for end in _ASIDE_ENDS]
FOLLOW_UPS += [f"{start} {end}" for start in _FOLLOW_STARTS for end in _FOLLOW_ENDS]
