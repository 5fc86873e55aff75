#!/usr/bin/env python3
"""Build the tokenizer oracle data in tests/data/tokenizers/.

How it was run (once, by hand; CI does NOT need this script, Python, or any of
these packages -- the C++ tests only read the committed outputs):

    python3 -m venv /tmp/hfvenv
    /tmp/hfvenv/bin/pip install tokenizers==0.23.3 sentencepiece==0.2.3 \
        transformers==5.24.0 protobuf==7.36.2 jinja2   # (torch was also present; unused)
    /tmp/hfvenv/bin/python tests/data/tokenizers/make_tokenizer_golden.py

Everything is trained locally from corpus.txt (written by this script from the
sentences and word lists in corpus_text.py + a seeded RNG); nothing is downloaded.
Runtime: about 2 seconds. The script is deterministic: running it twice gives
byte-identical files (it prints one sha256 over all outputs; compare two runs).
It writes, for each kind (gpt2 llama3 qwen2 smollm llama2 mistral gemma spm_only),
a Hugging Face model-style directory <kind>/ with tokenizer.json and/or
tokenizer.model, tokenizer_config.json, and <kind>/golden.json with ids produced
by the reference libraries:

  * tokenizer.json kinds: `tokenizers` (the Rust library) via Tokenizer.from_file
  * spm_only:             `sentencepiece` (SentencePieceProcessor)

Never edit golden ids by hand; rerun this script instead.
"""

import os

# Single-threaded trainers/encoders: deterministic and identical to what a
# 1-thread peer would do. Must be set before tokenizers is imported.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import copy
import hashlib
import io
import json
import random
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path

import sentencepiece as spm
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # keep __pycache__ out of the data folder
sys.path.insert(0, str(HERE))
import corpus_text as C  # noqa: E402

SEED = 20261203
BYTE_LEVEL_VOCAB = 2000   # trained tokens (bytes + merges), before added/special tokens
SPM_VOCAB = 2000          # sentencepiece vocab (incl. control, user-defined and 256 byte pieces)
SPM_ONLY_VOCAB = 1000

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ----------------------------------------------------------------------------
# Chat templates (reconstructed from the public model repos' tokenizer_config.json
# as remembered; they are what later chat-template work should render, and
# golden.json carries a rendered sample + ids for each).
# ----------------------------------------------------------------------------
TEMPLATES = {
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
    ),
    "qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "smollm": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
        " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
    ),
    "gemma": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
        "{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
    ),
}
CHAT_SAMPLE = [
    {"role": "user", "content": "Hi! What's 2+2?"},
    {"role": "assistant", "content": "2+2 = 4."},
    {"role": "user", "content": "Thanks, and in French?"},
]

# ----------------------------------------------------------------------------
# Held-out test strings. The same list is run through every kind; strings with
# another family's special tokens are plain text for that kind.
# ----------------------------------------------------------------------------
CASES = [
    # plain English
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers split text into pieces; models only ever see the ids.",
    # leading / trailing / runs of whitespace
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "multiple    spaces   inside",
    "tab\tseparated\tvalues",
    "\tleading tab",
    "line one\nline two",
    "para one\n\n\npara two",
    "windows\r\nline endings\r\n",
    "space before newline \nnext",
    "trailing newline\n",
    "",
    "\n",
    "   ",
    "\n\n",
    "a\n\nb\n \n c",
    " \t \n \r\n  x",
    # digits
    "1234567",
    "3.14159",
    "2026-12-03",
    "Call 555-0123 or +1 (800) 123-4567, ext. 89.",
    "x1 y22 z333 w4444 v55555",
    # contractions
    "don't",
    "I'LL be there, we've got it, she's done, they'd know.",
    "Don't DON'T don\u2019t",
    # Unicode: accents, NFC vs NFD, scripts
    "caf\u00e9 r\u00e9sum\u00e9 na\u00efve",
    "e\u0301",
    "caf\u00e9 vs cafe\u0301",
    "A\u030angstro\u0308m",
    "\u00c0\u00c9\u00ce\u00d5\u00dc upper accents",
    "Gr\u00fc\u00dfe aus M\u00fcnchen, die Stra\u00dfe",
    "Le tokeniseur transforme le texte, n'est-ce pas ?",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\uc548\ub155\ud558\uc138\uc694",
    "Mixed \u4e2d\u6587 and English 123abc",
    "tokenization tokenization tokenizations",
    # emoji and rare characters (byte fallback / byte-level)
    "\U0001f600",
    "\U0001f44d\U0001f3fd thumbs up",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f1eb\U0001f1f7\U0001f1ef\U0001f1f5 flags",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 math",
    "\ua66e",
    "zero\u200bwidth and\u00a0nbsp",
    "a\u0000b",
    "\u2581already\u2581has\u2581metaspace",
    "<unk> literal",
    # code with indentation
    "def f(x):\n    return x * 2\n",
    "int main() {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "    indented = True\n        deeper = False",
    "x=1;y=2;if(x<y){z=x+y;}",
    "https://example.com/path?query=1&b=2#frag",
    "!!!???...,,,;;;",
    # special / added tokens of the various families embedded in text
    "Hello<|endoftext|>world",
    " <|endoftext|> spaced <|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "<s>hi</s>",
    "<s> [INST] hi [/INST]",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|reserved_special_token_0|> and <repo_name>x<file_sep>",
    # a longer paragraph
    "In 2024, the team trained a 7B-parameter model on 2.5T tokens; it's "
    "\u201cgood enough\u201d, they said \u2014 but the tokenizer (32,000 pieces) "
    "still splits \u201cDonaudampfschifffahrt\u201d into 9 pieces!",
]


# ----------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------
def build_corpus() -> str:
    rng = random.Random(SEED)
    W = C.EN_WORDS

    def en_sentence():
        t = rng.choice(C.EN_TEMPLATES)
        a, b = rng.randrange(1, 100), rng.randrange(1, 1000)
        return t.format(
            adj=rng.choice(W["adj"]), adj2=rng.choice(W["adj"]),
            noun=rng.choice(W["noun"]), noun2=rng.choice(W["noun"]),
            verb=rng.choice(W["verb"]), verb2=rng.choice(W["verb"])[:-1],
            adv=rng.choice(W["adv"]), name=rng.choice(W["name"]), name2=rng.choice(W["name"]),
            num=a, num2=b, total=a + b, float=f"{rng.uniform(0, 100):.2f}",
        )

    def numbers_line():
        kinds = [
            lambda: f"{rng.randrange(1990, 2030)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
            lambda: f"{rng.randrange(0, 24):02d}:{rng.randrange(0, 60):02d}",
            lambda: f"{rng.randrange(0, 10**rng.randrange(1, 8))}",
            lambda: f"{rng.uniform(-1000, 1000):.{rng.randrange(1, 6)}f}",
            lambda: f"{rng.randrange(1, 100)}%",
            lambda: f"${rng.randrange(1, 10000):,}.{rng.randrange(0, 100):02d}",
            lambda: f"{rng.randrange(1, 10)}e-{rng.randrange(1, 9)}",
            lambda: f"v{rng.randrange(0, 5)}.{rng.randrange(0, 20)}.{rng.randrange(0, 10)}",
            lambda: f"({rng.randrange(100, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
        ]
        return ", ".join(rng.choice(kinds)() for _ in range(rng.randrange(4, 10))) + "."

    blocks = []
    for _ in range(3):
        blocks.extend(C.EN_PARAGRAPHS)
    for _ in range(260):
        blocks.append(" ".join(en_sentence() for _ in range(rng.randrange(2, 6))))
    for _ in range(40):
        blocks.append(numbers_line())
    for lang in (C.FR, C.DE, C.ZH, C.JA, C.RU, C.AR):
        for _ in range(6):
            sents = list(lang)
            rng.shuffle(sents)
            sep = "" if lang in (C.ZH, C.JA) else " "
            blocks.append(sep.join(sents[: rng.randrange(3, len(sents) + 1)]))
    for _ in range(3):
        blocks.extend(C.CODE)
    rng.shuffle(blocks)
    # Paragraphs separated by blank lines; code blocks keep their own newlines.
    return "\n\n".join(b.rstrip("\n") for b in blocks) + "\n"


def corpus_documents(text: str):
    """Documents for the tokenizers trainer: paragraphs with their separators kept,
    so newline runs are learned like in real pre-training data."""
    parts = text.split("\n\n")
    return [p + "\n\n" for p in parts[:-1]] + [parts[-1]]


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------
def write_json(path: Path, obj, compact_cases=False):
    if not compact_cases:
        path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        return
    head = {k: v for k, v in obj.items() if k != "cases"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    lines.append('  "cases": [')
    cases = obj["cases"]
    for i, c in enumerate(cases):
        lines.append("    " + json.dumps(c, ensure_ascii=False) + ("," if i + 1 < len(cases) else ""))
    lines.append("  ]")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def save_tokenizer_json(tok: Tokenizer, path: Path):
    # tokenizers' own serializer (pretty), as save_pretrained would write it.
    tok.save(str(path), pretty=True)


def edit_tokenizer_json(path: Path, fn):
    d = json.loads(path.read_text(encoding="utf-8"))
    fn(d)
    path.write_text(json.dumps(d, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    # Round-trip through the library so the file is exactly what it serializes.
    tok = Tokenizer.from_file(str(path))
    save_tokenizer_json(tok, path)


def layout_of(path: Path):
    d = json.loads(path.read_text(encoding="utf-8"))
    model = {k: v for k, v in d["model"].items() if k not in ("vocab", "merges")}
    model["vocab_entries"] = len(d["model"]["vocab"])
    model["merges_entries"] = len(d["model"].get("merges", []))
    added = [
        {k: t[k] for k in ("id", "content", "special", "normalized", "lstrip", "rstrip", "single_word")}
        for t in d["added_tokens"]
    ]
    return {
        "normalizer": d["normalizer"],
        "pre_tokenizer": d["pre_tokenizer"],
        "model": model,
        "post_processor": d["post_processor"],
        "decoder": d["decoder"],
        "added_tokens": added,
    }


def byte_level_train(normalizer, pre_tokenizer, trainer_specials, docs):
    tok = Tokenizer(BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = BpeTrainer(
        vocab_size=BYTE_LEVEL_VOCAB + len(trainer_specials),
        min_frequency=2,
        special_tokens=trainer_specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def special(content):
    return AddedToken(content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False)


# ----------------------------------------------------------------------------
# Byte-level BPE kinds
# ----------------------------------------------------------------------------
def build_gpt2(out: Path, docs):
    tok = byte_level_train(None, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True), [], docs)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([special("<|endoftext|>")])
    p = out / "tokenizer.json"
    save_tokenizer_json(tok, p)
    eot = tok.token_to_id("<|endoftext|>")

    def fix(d):
        # GPT-2 keeps <|endoftext|> (last id) in the model vocab as well.
        d["model"]["vocab"]["<|endoftext|>"] = eot
    edit_tokenizer_json(p, fix)
    # GPT-2's hub file predates the pair form of merges and stores each merge as one
    # "left right" string; keep that (older) form here so a reader must accept both.
    pairs = Tokenizer.from_file(str(p))
    d = json.loads(p.read_text(encoding="utf-8"))
    assert all(" " not in a and " " not in b for a, b in d["model"]["merges"])
    d["model"]["merges"] = [f"{a} {b}" for a, b in d["model"]["merges"]]
    p.write_text(json.dumps(d, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    strings = Tokenizer.from_file(str(p))
    for text in CASES:
        assert strings.encode(text).ids == pairs.encode(text).ids
    cfg = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": 1024,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
    }
    return cfg, {"bos": "<|endoftext|>", "eos": "<|endoftext|>"}


LLAMA3_SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>",
]


# byte-level forms of " tokenization" and "Привет"
LLAMA3_VOCAB_ONLY = ["\u0120tokenization", "\u00d0\u0141\u00d1\u0122\u00d0\u00b8\u00d0\u00b2\u00d0\u00b5\u00d1\u0124"]


def build_llama3(out: Path, docs):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok = byte_level_train(None, pre, [], docs)
    # Llama-3's BPE sets ignore_merges: a pre-token that is itself in the vocab is emitted
    # whole, without running merges. A trained vocab reaches every token through its own
    # merges, so that would never show; Llama-3's real vocab (converted from tiktoken) has
    # tokens the merge ranks would not produce. Add a few such vocab-only tokens (no merge
    # creates them) so the golden ids depend on ignore_merges (see "differs_from").
    d = json.loads(tok.to_str())
    d["model"]["ignore_merges"] = True
    v = d["model"]["vocab"]
    for t in LLAMA3_VOCAB_ONLY:
        assert t not in v
        v[t] = len(v)
    tok = Tokenizer.from_str(json.dumps(d))
    tok.add_special_tokens([special(s) for s in LLAMA3_SPECIALS])
    bot = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A:0",
            pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bot)],
        ),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    save_tokenizer_json(tok, out / "tokenizer.json")
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "pad_token": None,
        "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"],
        "chat_template": TEMPLATES["llama3"],
    }
    return cfg, {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"}


def build_qwen2(out: Path, docs):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok = byte_level_train(normalizers.NFC(), pre, [], docs)
    tok.add_special_tokens([special(s) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    save_tokenizer_json(tok, out / "tokenizer.json")

    def fix(d):
        # decoders.ByteLevel() in Python ignores its keyword arguments; write Qwen2's flags
        # (the ByteLevel decoder does not read them).
        d["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    edit_tokenizer_json(out / "tokenizer.json", fix)
    cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 32768,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": TEMPLATES["qwen2"],
    }
    return cfg, {"eos": "<|im_end|>", "pad": "<|endoftext|>"}


SMOLLM_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
    "<jupyter_script>", "<empty_output>",
]


def build_smollm(out: Path, docs):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    # Trainer special tokens take ids 0..16 and live in the model vocab too (as SmolLM).
    tok = byte_level_train(None, pre, SMOLLM_SPECIALS, docs)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    save_tokenizer_json(tok, out / "tokenizer.json")
    cfg = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": 2048,
        "add_prefix_space": False,
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "clean_up_tokenization_spaces": False,
        "chat_template": TEMPLATES["smollm"],
    }
    return cfg, {"bos": "<|im_start|>", "eos": "<|im_end|>", "pad": "<|im_end|>"}


# ----------------------------------------------------------------------------
# SentencePiece kinds
# ----------------------------------------------------------------------------
def spm_train(model_prefix: Path, lines, vocab_size, **overrides):
    # Llama-2's trainer_spec as stored in its tokenizer.model (minus sizes/threads).
    opts = dict(
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.99995,
        split_by_unicode_script=True,
        split_by_number=True,
        split_by_whitespace=True,
        split_digits=True,
        treat_whitespace_as_suffix=False,
        allow_whitespace_only_pieces=True,
        byte_fallback=True,
        max_sentencepiece_length=16,
        max_sentence_length=4192,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        unk_surface=" \u2047 ",
        num_threads=1,
        shuffle_input_sentence=False,
        hard_vocab_limit=True,
        minloglevel=2,
    )
    opts.update(overrides)
    # model_writer instead of model_prefix: the prefix (a temp path) would be stored in
    # trainer_spec and make the .model bytes differ between runs.
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, **opts)
    path = Path(str(model_prefix) + ".model")
    path.write_bytes(buf.getvalue())
    return path


def spm_lines(corpus: str):
    # SentencePiece trains on lines; newlines can never be inside a piece.
    return [l for l in corpus.split("\n") if l.strip()]


def _spm_converter(kind, model_file, **attrs):
    """transformers 5's slow->fast converters, driven with a minimal stand-in for the
    removed slow tokenizer class. transformers 5.24's SpmConverter.tokenizer() calls
    `SpmExtractor(vocab_file).extract(vocab_scores)`, which its own extractors no
    longer accept (SentencePieceExtractor.extract wants a model_type and
    GemmaSentencePieceExtractor reads an unset `self.sp`), so we supply an extractor
    with the historical behaviour: merges = generate_merges(vocab, vocab_scores)."""
    import importlib
    cst = importlib.import_module("transformers.convert_slow_tokenizer")
    from transformers.tokenization_utils_base import generate_merges

    class Extractor:
        def __init__(self, model):
            self.sp = spm.SentencePieceProcessor(model_file=model)

        def extract(self, vocab_scores=None):
            sp = self.sp
            vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
            return vocab, generate_merges(vocab, vocab_scores)

    base = {"llama": cst.LlamaConverter, "gemma": cst.GemmaConverter}[kind]
    conv_cls = type(base.__name__ + "Shim", (base,), {"SpmExtractor": Extractor})
    sp = spm.SentencePieceProcessor(model_file=str(model_file))

    class Orig:
        vocab_file = str(model_file)

        def convert_ids_to_tokens(self, i):
            return sp.id_to_piece(i)

    o = Orig()
    for k, v in attrs.items():
        setattr(o, k, v)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return conv_cls(o).converted()


def _complete_spm_added_tokens(tok: Tokenizer, sp):
    # Real Llama-2 / Gemma tokenizer.json list <unk> among the special added tokens
    # (the converter adds only control/user-defined pieces); add it the same way.
    unk = sp.id_to_piece(sp.unk_id())
    tok.add_special_tokens([special(unk)])


def build_llama2_family(out: Path, model_file: Path, legacy: bool):
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    tok = _spm_converter("llama", model_file, legacy=legacy, add_prefix_space=True)
    _complete_spm_added_tokens(tok, sp)
    bos, eos = sp.id_to_piece(sp.bos_id()), sp.id_to_piece(sp.eos_id())
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
        special_tokens=[(bos, sp.bos_id())],
    )
    save_tokenizer_json(tok, out / "tokenizer.json")
    shutil.copyfile(model_file, out / "tokenizer.model")
    cfg = {
        "tokenizer_class": "LlamaTokenizer",
        "model_max_length": 4096 if legacy else 32768,
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": legacy,
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": sp.id_to_piece(sp.unk_id()),
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "use_default_system_prompt": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": TEMPLATES["llama2" if legacy else "mistral"],
    }
    return cfg, {"bos": bos, "eos": eos, "unk": cfg["unk_token"]}


GEMMA_USER_DEFINED = ["<start_of_turn>", "<end_of_turn>", "\n", "\n\n", "\t\t", "<h1>", "</h1>"]


def build_gemma(out: Path, lines, tmp: Path):
    model_file = spm_train(
        tmp / "gemma", lines, SPM_VOCAB,
        add_dummy_prefix=False,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        control_symbols=["<mask>"],
        user_defined_symbols=GEMMA_USER_DEFINED,
    )
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    assert "\t" in {sp.id_to_piece(i) for i in range(sp.get_piece_size())}, "want a real tab piece"
    tok = _spm_converter("gemma", model_file, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    _complete_spm_added_tokens(tok, sp)
    # transformers 5 adds pre_tokenizer Split(" ", merged_with_previous); it is a no-op after
    # the Replace(" ", "▁") normalizer (transformers PR #43106), and Gemma's hub files carry
    # pre_tokenizer null. Drop it, and check below that ids do not change.
    with_split = Tokenizer.from_str(tok.to_str())
    tok.pre_tokenizer = None
    tok.post_processor = processors.TemplateProcessing(
        single="<bos>:0 $A:0", pair="<bos>:0 $A:0 <bos>:1 $B:1", special_tokens=[("<bos>", sp.bos_id())]
    )
    with_split.post_processor = tok.post_processor
    save_tokenizer_json(tok, out / "tokenizer.json")
    shutil.copyfile(model_file, out / "tokenizer.model")
    cfg = {
        "tokenizer_class": "GemmaTokenizer",
        "model_max_length": 8192,
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "use_default_system_prompt": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": TEMPLATES["gemma"],
    }
    return cfg, {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>", "unk": "<unk>"}, with_split


# ----------------------------------------------------------------------------
# Golden generation
# ----------------------------------------------------------------------------
def golden_from_tokenizers(kind, out: Path, specials, roundtrip_policy, sp=None, alt=None):
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    cases = []
    notes = {}
    for text in CASES:
        enc = tok.encode(text, add_special_tokens=False)
        enc_sp = tok.encode(text, add_special_tokens=True)
        ids = enc.ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        case = {
            "text": text,
            "ids": ids,
            "tokens": enc.tokens,
            "ids_special": enc_sp.ids,
            "decoded": decoded,
            "decoded_skip": tok.decode(enc_sp.ids, skip_special_tokens=True),
            "roundtrip": decoded == text,
        }
        if roundtrip_policy == "always":
            assert decoded == text, (kind, text, decoded)
        elif roundtrip_policy == "nfc":
            assert decoded == unicodedata.normalize("NFC", text), (kind, text, decoded)
            assert case["roundtrip"] == (unicodedata.normalize("NFC", text) == text)
        if sp is not None:
            spm_ids = sp.encode(text)
            case["spm_ids"] = spm_ids
            case["spm_match"] = spm_ids == ids
        if alt is not None:
            for name, alt_tok in alt.items():
                alt_ids = alt_tok.encode(text, add_special_tokens=False).ids
                if alt_ids != ids:
                    case.setdefault("differs_from", {})[name] = alt_ids
        cases.append(case)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    g = {
        "kind": kind,
        "source": f"tokenizers {tokenizers.__version__}",
        "vocab_size": vocab_size,
        "model_vocab_size": tok.get_vocab_size(with_added_tokens=False),
    }
    for role in ("bos", "eos", "pad", "unk"):
        if role in specials:
            g[f"{role}_token"] = specials[role]
            g[f"{role}_id"] = tok.token_to_id(specials[role])
    g["roundtrip_policy"] = roundtrip_policy
    g["fields"] = {
        "ids": "Tokenizer.encode(text, add_special_tokens=False).ids",
        "tokens": "the token strings of ids",
        "ids_special": "Tokenizer.encode(text, add_special_tokens=True).ids (post_processor applied)",
        "decoded": "Tokenizer.decode(ids, skip_special_tokens=False)",
        "decoded_skip": "Tokenizer.decode(ids_special, skip_special_tokens=True)",
        "roundtrip": "decoded == text",
        "roundtrip_policy": "always: asserted for every case; nfc: decoded == NFC(text) asserted; "
                            "record: only recorded (SentencePiece-style dummy prefix / Strip decoder)",
    }
    if sp is not None:
        g["fields"]["spm_ids"] = ("sentencepiece SentencePieceProcessor.encode(text) with this folder's "
                                  "tokenizer.model (informative: special tokens are plain text to it)")
        g["fields"]["spm_match"] = "spm_ids == ids"
    if alt is not None:
        g["fields"]["differs_from"] = ("ids the same tokenizer.json gives with the named change, present only "
                                       "when they differ from ids")
    g["layout"] = layout_of(out / "tokenizer.json")
    if kind in TEMPLATES:
        rendered = render_chat(kind, specials)
        g["chat"] = {
            "messages": CHAT_SAMPLE,
            "add_generation_prompt": True,
            "rendered": rendered,
            # The templates emit bos themselves, so encode without the post-processor.
            "ids": tok.encode(rendered, add_special_tokens=False).ids,
        }
    g.update(notes)
    g["cases"] = cases
    return g


def render_chat(kind, specials):
    from transformers.utils.chat_template_utils import render_jinja_template
    rendered, _ = render_jinja_template(
        conversations=[CHAT_SAMPLE], chat_template=TEMPLATES[kind], add_generation_prompt=True,
        bos_token=specials.get("bos", ""), eos_token=specials.get("eos", ""),
    )
    return rendered[0]


def golden_from_spm(kind, model_file: Path):
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    cases = []
    for text in CASES:
        ids = sp.encode(text)
        ids_special = sp.encode(text, add_bos=True)
        decoded = sp.decode(ids)
        cases.append({
            "text": text,
            "ids": ids,
            "tokens": [sp.id_to_piece(i) for i in ids],
            "ids_special": ids_special,
            "decoded": decoded,
            "decoded_skip": sp.decode(ids_special),
            "roundtrip": decoded == text,
        })
    return {
        "kind": kind,
        "source": f"sentencepiece {spm.__version__}",
        "vocab_size": sp.get_piece_size(),
        "bos_token": sp.id_to_piece(sp.bos_id()), "bos_id": sp.bos_id(),
        "eos_token": sp.id_to_piece(sp.eos_id()), "eos_id": sp.eos_id(),
        "unk_token": sp.id_to_piece(sp.unk_id()), "unk_id": sp.unk_id(),
        "pad_id": sp.pad_id(),
        "ids_special_means": "sp.encode(text, add_bos=True) (tokenizer_config add_bos_token=true)",
        "decoded_means": "sp.decode(ids); decoded_skip = sp.decode(ids_special) (control pieces decode to '')",
        "cases": cases,
    }


def main():
    out_root = HERE
    corpus = build_corpus()
    (out_root / "corpus.txt").write_text(corpus, encoding="utf-8")
    docs = corpus_documents(corpus)
    lines = spm_lines(corpus)

    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        kinds = {}

        def kind_dir(k):
            d = out_root / k
            if d.exists():
                shutil.rmtree(d)
            d.mkdir()
            return d

        # byte-level kinds
        for kind, builder, policy in (
            ("gpt2", build_gpt2, "always"),
            ("llama3", build_llama3, "always"),
            ("qwen2", build_qwen2, "nfc"),
            ("smollm", build_smollm, "always"),
        ):
            d = kind_dir(kind)
            cfg, specials = builder(d, docs)
            write_json(d / "tokenizer_config.json", cfg)
            alt = None
            if kind == "llama3":
                def no_ignore(dd):
                    dd["model"]["ignore_merges"] = False
                j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
                no_ignore(j)
                alt = {"ignore_merges=false": Tokenizer.from_str(json.dumps(j))}
            g = golden_from_tokenizers(kind, d, specials, policy, alt=alt)
            write_json(d / "golden.json", g, compact_cases=True)
            kinds[kind] = g

        # SentencePiece BPE shared by llama2 / mistral (Llama-2 trainer options)
        llama_model = spm_train(tmp / "llama", lines, SPM_VOCAB)
        sp_llama = spm.SentencePieceProcessor(model_file=str(llama_model))
        for kind, legacy in (("llama2", True), ("mistral", False)):
            d = kind_dir(kind)
            cfg, specials = build_llama2_family(d, llama_model, legacy)
            write_json(d / "tokenizer_config.json", cfg)
            g = golden_from_tokenizers(kind, d, specials, "record", sp=sp_llama)
            write_json(d / "golden.json", g, compact_cases=True)
            kinds[kind] = g

        d = kind_dir("gemma")
        cfg, specials, with_split = build_gemma(d, lines, tmp)
        write_json(d / "tokenizer_config.json", cfg)
        sp_gemma = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
        g = golden_from_tokenizers("gemma", d, specials, "record", sp=sp_gemma,
                                   alt={"pre_tokenizer Split(' ', merged_with_previous)": with_split})
        assert not any("differs_from" in c for c in g["cases"]), "Split pre-tokenizer changed Gemma ids"
        write_json(d / "golden.json", g, compact_cases=True)
        kinds["gemma"] = g

        # tokenizer.model only, for the libsentencepiece path
        d = kind_dir("spm_only")
        m = spm_train(tmp / "spm_only", lines, SPM_ONLY_VOCAB)
        shutil.copyfile(m, d / "tokenizer.model")
        write_json(d / "tokenizer_config.json", {
            "tokenizer_class": "LlamaTokenizer",
            "model_max_length": 4096,
            "add_bos_token": True,
            "add_eos_token": False,
            "legacy": True,
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": None,
            "clean_up_tokenization_spaces": False,
        })
        g = golden_from_spm("spm_only", d / "tokenizer.model")
        write_json(d / "golden.json", g, compact_cases=True)
        kinds["spm_only"] = g

    # summary to stdout
    for k, g in kinds.items():
        n_rt = sum(c["roundtrip"] for c in g["cases"])
        extra = ""
        if "spm_ids" in g["cases"][0]:
            extra = f", spm_match {sum(c['spm_match'] for c in g['cases'])}/{len(g['cases'])}"
        diff = sum("differs_from" in c for c in g["cases"])
        print(f"{k:9s} vocab={g['vocab_size']:5d} cases={len(g['cases'])} roundtrip={n_rt}{extra}"
              + (f", differs_from_alt={diff}" if diff else ""))
    h = hashlib.sha256()
    for p in sorted(out_root.rglob("*")):
        if p.is_file() and p.suffix in (".json", ".model", ".txt"):
            h.update(p.relative_to(out_root).as_posix().encode())
            h.update(p.read_bytes())
    print("sha256 of outputs:", h.hexdigest())


if __name__ == "__main__":
    main()
