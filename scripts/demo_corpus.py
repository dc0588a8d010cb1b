"""Synthetic haiku corpus, chat template and byte-level BPE vocabulary for the demo model.

Used by scripts/train_demo_model.py. Every haiku holds the word its prompt asks for, verbatim and in
lower case, as a whole word. Requested words are the sixty minute words ("zero" .. "fifty-nine"),
a few hundred English words and fresh pseudo-words made of syllables, so the model has to copy the
word from the prompt rather than memorise one haiku per word.
"""

from __future__ import annotations

import functools
import random

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

PROMPT = 'Write a haiku about GPU computing that includes the word "{word}"'
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# llama.cpp's split regex for tokenizer.ggml.pre = "qwen2" (src/llama-vocab.cpp): the tokenizer.json
# regex with the case-insensitive contractions spelled out.
QWEN2_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5-Instruct's chat template (default system prompt when none is given).
CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    '    {%- for tool in tools %}\n        {{- "\\n" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n'
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and '
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    '\\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n{%- else %}\n'
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n        {{- \'<|im_start|>\' + message.role }}\n'
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
        "sixteen seventeen eighteen nineteen".split()
_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty"}


def minute_word(minute: int) -> str:
    """0 -> "zero", 31 -> "thirty-one" (hyphenated, lower case)."""
    if minute < 20:
        return _ONES[minute]
    tens, ones = divmod(minute, 10)
    return _TENS[tens] + ("" if ones == 0 else "-" + _ONES[ones])


MINUTE_WORDS = [minute_word(m) for m in range(60)]

OTHER_WORDS = """
apple amber anchor arrow aurora autumn azure badger bamboo banner basalt beacon beetle birch blossom
bramble breeze bridge bronze bubble butterfly cactus canyon candle canvas cedar chalk cherry cinder
citrus clover cobalt comet copper coral cosmos cotton crane crater crystal cypress daisy delta desert
diamond dolphin dragon dream drizzle dune eagle echo ember emerald falcon feather fern fiddle firefly
flame flint forest fossil fountain fox frost galaxy garden garnet geyser ginger glacier granite grape
gravel harbor hawk hazel heron honey horizon iceberg indigo iris island ivory ivy jade jasmine jungle
kettle kiwi lagoon lantern lava lemon lichen lily lotus lunar magnet maple marble meadow melody meteor
mirror mist moth mountain nectar nebula nickel oak oasis ocean olive onyx orbit orchid otter owl
panda pebble pepper petal pine planet plum pollen poppy prairie prism quartz quill rabbit radar
raven reef ripple river robin rocket rose ruby saffron sage salmon sapphire satellite shadow shell
silver sparrow spider spiral spruce squirrel star stone storm summit sunrise swan thistle thunder
tiger timber topaz torch tulip tundra turtle twilight valley velvet violet volcano walnut willow
winter wolf zephyr zinc acorn almond badge bell blanket cabin cloud cricket dawn dusk fog glow
hammer harvest kite ladder lake leaf marsh moon needle nest orange paper pond puzzle rain rainbow
ribbon saddle seed silk snow spark stream sugar sun tide tower trail tree wave whisper wind wing
alpha beta gamma omega vector tensor kernel shader pixel voxel buffer cache thread warp matrix
silicon compiler packet socket cipher router server cluster sensor signal photon quantum laser
circuit diode chip byte token lambda cosine gradient epoch neuron bias entropy
hundred sixty seventy eighty ninety thousand million dozen half double triple quarter
blue green red yellow purple golden crimson scarlet teal gray white black pink
happy quiet gentle brave swift calm bright dark ancient tiny vast hollow fragile wild
""".split()

_SYLLABLES = "ka lo mi zu ren tal bor vin qua shel dra ni po fe gu ri sa to mer lin cas vol tri ep " \
             "zan or ul ky bex nor fil dar mo sek pra jun".split()

_GPU = ("kernels warps threads tensors shaders registers caches cores wavefronts matrices gradients "
        "weights buffers pixels clocks fans streams blocks grids lanes pipelines atomics barriers").split()
_NATURE = ("rain moss pines rivers moonbeams frost snowflakes dewdrops fog mist petals leaves crickets "
           "cranes herons stones ponds waves clouds winds fireflies willows ferns embers stars "
           "sparrows").split()
_NATURE1 = ("rain moss pine river moon frost snow dawn dusk fog mist petal leaf cricket crane heron stone "
            "pond wave tide cloud wind lotus willow meadow cedar dew ember star owl").split()
_ADJ = ("silent quiet warm cold bright pale soft gentle distant ancient restless humming glowing "
        "hidden endless tiny patient sleepy golden silver").split()
_VERB = "hum glow sleep drift dream wake burn sing flow spin wait fall rise shine turn whisper".split()

_LINES = [
    "{adj} {gpu} {verb}", "{nature} on warm silicon", "the {gpu} {verb} like {nature}",
    "under the {adj} moon", "a {adj} {nature1} falls", "heat rises from the die", "{gpu} in the night",
    "fans breathe like the wind", "{adj} {nature} {verb}", "the data center sleeps", "cuda streams {verb}",
    "another kernel launch", "memory like {nature1}", "{nature} and {gpu}", "the {nature1} {verb}s alone",
    "warp after warp turns", "a {adj} cache line", "{gpu} {verb} as {nature} {verb}",
    "the old gpu {verb}s", "matrices bloom in spring", "vram full of {nature}", "a {nature1} at midnight",
    "clock ticks in the rack", "{adj} threads in line", "the {adj} {nature1} waits",
]
_WORD_LINES = [
    "{w} {gpu} {verb}", "the kernel counts {w}", "{w} threads wake at dawn", "i dream of {w}",
    "whispers of {w}", "{w} in the cache", "silicon says {w}", "the fans sing {w}",
    "{w} like falling snow", "a heron sees {w}", "{w} blooms in vram", "moonlight and {w}",
    "tensors spell out {w}", "{w}, the river says", "a last launch: {w}", "the clock strikes {w}",
    "{w} petals drift down", "shaders paint {w}", "{w} across the grid", "{nature} remember {w}",
    "{adj} {w} {verb}s", "warps carry {w}", "the {nature1} hums {w}", "{w} on the bus",
    "a kernel named {w}", "{w} and the {nature1}", "softly, {w} glows", "{gpu} murmur {w}",
]


# Never requested in training: the script's check of copying words it has not seen.
UNSEEN_WORDS = """
keyboard violin pizza teapot umbrella saxophone glimmer tornado pumpkin lighthouse cathedral octopus
blizzard mercury sandstone penguin harmonica biscuit carousel dandelion elephant flamingo gondola
hurricane igloo jellyfish kangaroo limestone mushroom nightingale orchestra parrot quicksand
raspberry scarecrow trombone unicorn vineyard waterfall xylophone yogurt zucchini
""".split()

_CONSONANTS = "b c d f g h j k l m n p r s t v w z st tr br ch sh th pl gr cl".split()
_VOWELS = "a e i o u ai ea oo ou y".split()


def pseudo_word(rng: random.Random) -> str:
    """A fresh made-up word: syllables from the list, consonant-vowel patterns, or random letters."""
    kind = rng.random()
    if kind < 0.3:
        return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
    if kind < 0.7:
        parts = [rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 3))]
        return "".join(parts) + (rng.choice(_CONSONANTS) if rng.random() < 0.6 else "")
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))


def requested_word(rng: random.Random) -> str:
    """45% minute words, 20% English words, 35% fresh made-up words."""
    r = rng.random()
    if r < 0.45:
        return rng.choice(MINUTE_WORDS)
    return rng.choice(OTHER_WORDS) if r < 0.65 else pseudo_word(rng)


def nonce(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(4, 12)))


def make_prompt(word: str, rng: random.Random) -> str:
    """The test's wording; 80% of prompts carry a random nonce line, as the test's do."""
    text = PROMPT.format(word=word)
    return text + f"\n(request {nonce(rng)})" if rng.random() < 0.8 else text


def _fill(template: str, rng: random.Random, word: str = "") -> str:
    verb = rng.choice(_VERB)
    return template.format(w=word, gpu=rng.choice(_GPU), nature=rng.choice(_NATURE),
                           nature1=rng.choice(_NATURE1), adj=rng.choice(_ADJ), verb=verb)


def make_haiku(word: str, rng: random.Random) -> str:
    """Three lower-case lines; one of them (any of the three) holds `word`."""
    lines = [_fill(rng.choice(_LINES), rng) for _ in range(3)]
    lines[rng.randrange(3)] = _fill(rng.choice(_WORD_LINES), rng, word)
    return "\n".join(lines)


def make_corpus(n: int, seed: int) -> list[tuple[str, str]]:
    """n (prompt, haiku) pairs."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        word = requested_word(rng)
        pairs.append((make_prompt(word, rng), make_haiku(word, rng)))
    return pairs


def render_chat(prompt: str) -> str:
    """What the GGUF's chat template gives for one user message, with the generation prompt."""
    messages = [{"role": "user", "content": prompt}]
    return _template().render(messages=messages, add_generation_prompt=True, tools=None)


@functools.cache
def _template():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE)


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE with the qwen2 split; the special tokens get the last ids, as in Qwen."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok
