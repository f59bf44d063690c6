#!/opt/hfref-venv/bin/python
"""Reference data for tokenizer.json pipelines beyond GPT-2's: tokenizers built and
trained with the real `tokenizers` library from each family's published definition,
with the library's ids and decodings on held-out and random texts.

Writes under tests/data/hf/tokenizers/ (about 0.5 MB in all), one folder per kind:

  llama3/    Llama 3: Split(Llama 3's pattern, isolated) + ByteLevel(use_regex false),
             BPE with ignore_merges, ByteLevel decoder, post-processor Sequence[ByteLevel,
             TemplateProcessing "<|begin_of_text|> $A"], special tokens appended after the
             vocabulary (<|begin_of_text|>, <|end_of_text|>, <|start_header_id|>, ...)
  qwen2/     Qwen2: NFC normalizer, Split(Qwen2's pattern) + ByteLevel(use_regex false),
             ByteLevel decoder and post-processor (no BOS), special <|endoftext|>,
             <|im_start|>, <|im_end|> and the non-special added token <tool_call>
  mistral/   Mistral / Llama 2 as converted by transformers today: no normalizer,
             Metaspace(prepend_scheme first, split false), BPE with byte_fallback (the
             256 <0xXX> tokens at ids 3..258), fuse_unk, unk <unk>, decoder Sequence[
             Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)], template "<s> $A"
  llama2/    the older Llama 2 form of the same model: normalizer Sequence[Prepend("▁"),
             Replace(" ", "▁")] and no pre-tokenizer
  each holding
    tokenizer.json         saved by the library
    tokenizer_config.json  bos_token, eos_token, add_bos_token (hand-written, as a model's)
    reference.json         [{"text", "ids", "ids_special", "decoded", "raw_hex"?}] on held-out
                           texts: ids = encode(text, add_special_tokens=False).ids,
                           ids_special = encode(text).ids (add_special_tokens=True),
                           decoded = decode(ids, skip_special_tokens=False); "raw_hex", when
                           present, is a byte string that is not UTF-8 and text its
                           bytes.decode("utf-8", errors="replace")
    random.json            {"seed", "count", "max_items", "classes", "data"}: texts made by
                           the generator below from the character classes stored in the
                           file, and the library's results as base64 of, per text, little-
                           endian uint16 n, n uint16 ids (add_special_tokens=False), uint32
                           FNV-1a of the UTF-8 decode(ids, skip_special_tokens=False)

The random generator (tests/hf_tokenizer_json_test.cpp runs the same one): splitmix64
from `seed`; each text is 1 + next() % max_items items, each item
classes[c][next() % len(classes[c])] with c = next() % len(classes); an item is a short
string (a character, a contraction, a special token's text).

Tokenizer training text: KJV Genesis, Exodus and Matthew (Debian bible-kjv, via the
`bible` command, verse references stripped) and the Jargon File 4.4.7 up to the entries
for M (Debian jargon-text, /usr/share/doc/jargon-text/jargon.txt.gz); vocabularies of
1000 (BPE trainer, min_frequency 2, one thread). Characters new in Unicode 16 are left
out of the random texts: PCRE2 10.42 and ICU 72 (Unicode 15) do not know them.

Made with tokenizers 0.23.3 (versions.json in the folder records the versions).
How to run (from the repository root; the Debian packages bible-kjv and jargon-text,
and a venv outside the repository with `pip install tokenizers`):
  /opt/hfref-venv/bin/python scripts/make_tokenizer_reference.py

Deterministic: single-threaded training, fixed seeds and sorted-key JSON, so a rerun with
the same library versions rewrites byte-identical files.
"""
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import base64
import gzip
import json
import platform
import re
import shutil
import struct
import subprocess

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "hf", "tokenizers")
VOCAB = 1000

# The published pre-tokenizer patterns (Llama 3's tokenizer.json; Qwen2's differs in \p{N}).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

JARGON_GZ = "/usr/share/doc/jargon-text/jargon.txt.gz"
KJV_TRAIN_RANGES = ["Gen1:1-Gen50:26", "Exo1:1-Exo40:38", "Mat1:1-Mat28:20"]
KJV_HELDOUT = ["Psa23:1", "John1:1", "Rev21:4"]
JARGON_TRAIN_END = "   :M: pref."
JARGON_HELDOUT = ["   :yak shaving:"]
VERSE_REF = re.compile(r"^\S+?\d+:\d+ ")

RANDOM_SEED, RANDOM_COUNT, RANDOM_MAX_ITEMS = 20261203, 2000, 10
# Character classes of the random texts (each item one string).
RANDOM_CLASSES = [
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    list("0123456789") + ["\u0663", "\u00b2", "\u00bd", "\u2162", "\uff13"],
    list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["\u00b7", "\u2014", "\u201c", "\u2026"],
    [" ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2009", "\u0085",
     "\u000b", "\u000c", "\u2028", "\u1680"],
    ["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d",
     "'D", "'x", "\u017f", "\u212a", "'\u017f"],
    list("日本語中文字한국어のテキスト"),
    ["\U0001f642", "\U0001f680", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469",
     "\u2764\ufe0f", "\U0001f1fa\U0001f1f8"],
    ["\u0301", "\u0308", "\u0323", "e\u0301", "A\u030a", "n\u0303", "\u00e9", "\u00c5",
     "\u1e69", "s\u0323\u0307", "\ufb01", "\u2126"],
    list("\u0928\u092e\u0938\u094d\u0924\u0947\u0627\u0644\u0639\u0631\u0628\u0649"
         "\u043f\u0440\u0438\u0432\u0435\u0442\u03b1\u03b2\u03a3\u00df\u0130\u0131"),
    ["\u2581", "\u2581\u2581", "<0x41>", "<s>", "</s>", "<unk>", "<|endoftext|>",
     "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<tool_call>", "<|end", "|>"],
]


# ---------------------------------------------------------------- text

def bible(ref):
    out = subprocess.run(["bible", "-f", ref], check=True, capture_output=True,
                         text=True, encoding="utf-8").stdout
    verses = [line[m.end():] for line in out.splitlines() if (m := VERSE_REF.match(line))]
    assert verses, f"bible printed no verses for {ref}"
    return verses


def jargon_entry(lines, head):
    """The first paragraph of an entry, its wrapped lines joined by single spaces."""
    i = lines.index(head) + 1
    while not lines[i].strip():
        i += 1
    para = []
    while lines[i].strip():
        para.append(lines[i].strip())
        i += 1
    return " ".join(para)


def corpus():
    train = []
    for r in KJV_TRAIN_RANGES:
        train.extend(bible(r))
    with gzip.open(JARGON_GZ, "rt", encoding="utf-8") as f:
        jl = f.read().split("\n")
    end = jl.index(JARGON_TRAIN_END)
    train.extend(line.rstrip() for line in jl[:end] if line.strip())
    heldout = [bible(r)[0] for r in KJV_HELDOUT] + [jargon_entry(jl, h) for h in JARGON_HELDOUT]
    heldout += [
        "In 1611, 42 hackers paid $3.50 for 1,000,000 MIPS (ca. 99.9%) on 2026-12-03.",
        "1234567890 \u0663\u0664\u0665 \u00b2\u00bd \u2162\u2163 12\uff13",
        "Wait!!! What??? ...--- ((((x)))) ;;\n!!\n\n:-) <<>> \"'\"",
        "a    b\t\t\tc \n\n\n  d  \r\n\r\n e\u00a0\u00a0f\u3000g \u2009 ",
        "   leading and trailing spaces   ",
        " ",
        "",
        "\n",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4",
        "\U0001f642\U0001f680 ok \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f",
        "cafe\u0301 vs caf\u00e9, A\u030angstr\u00f6m, n\u0303, s\u0323\u0307, \ufb01ne \u2126",
        "I'M SURE THEY'RE HERE. DON'T! WE'LL SEE, YOU'VE SAID SHE'D... It'S JOHN'S",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627 \u043f\u0440\u0438\u0432\u0435\u0442 \u0391\u0398\u0397\u039d\u0391 \u03a3\u039f\u03a6\u039f\u03a3 stra\u00dfe \u0130stanbul",
        "<|begin_of_text|>Hello<|eot_id|><|end_of_text|> <s>[INST] hi [/INST]</s>",
        "<|im_start|>user\nhi<|im_end|>\n<tool_call>{\"a\": 1}</tool_call>",
        "\u2581already\u2581spaced <0x41> <unk>",
        "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    ]
    return train, heldout


RAW_HELDOUT = [b"caf\xc3 ok \xff\xfe end \xe2\x82", b"\xf0\x9f\x99 smile \xed\xa0\x80 x\xc0\xaf"]


# ---------------------------------------------------------------- tokenizers

def trained_bpe(train, pre_tokenizer, normalizer=None, vocab_size=VOCAB, alphabet=None,
                specials=()):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(specials),
                                  initial_alphabet=alphabet or [])
    tok.train_from_iterator([line + "\n" for line in train], trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m) for m in model["merges"]]


def byte_level_kind(train, pattern, normalizer, specials, ignore_merges):
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                          use_regex=False)
    pre = pre_tokenizers.Sequence([split, byte_level])
    vocab, merges = trained_bpe(train, pre, normalizer,
                                alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def make_llama3(train):
    tok = byte_level_kind(train, LLAMA3_PATTERN, None, LLAMA3_SPECIALS, ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A:0",
            pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def make_qwen2(train):
    tok = byte_level_kind(train, QWEN2_PATTERN, normalizers.NFC(), QWEN2_SPECIALS,
                          ignore_merges=False)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    config = {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "tokenizer_class": "Qwen2Tokenizer"}
    return tok, config


def sentencepiece_style_model(train):
    """Llama 2 / Mistral: <unk> <s> </s>, the 256 byte tokens, then the learned ones."""
    pre = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    learned, merges = trained_bpe(train, pre, vocab_size=VOCAB - 256,
                                  specials=["<unk>", "<s>", "</s>"])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for token, _ in sorted(learned.items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    return models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)


def sentencepiece_style_kind(train, old_form):
    tok = Tokenizer(sentencepiece_style_model(train))
    if old_form:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                     prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<unk>", "<s>", "</s>"]])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "add_bos_token": True, "add_eos_token": False,
              "tokenizer_class": "LlamaTokenizerFast"}
    return tok, config


# ---------------------------------------------------------------- reference data

def write_json(path, obj, indent=1):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(obj, indent=indent, ensure_ascii=False, sort_keys=True))
        f.write("\n")


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def random_texts():
    state, texts = RANDOM_SEED, []
    for _ in range(RANDOM_COUNT):
        state, r = splitmix64(state)
        items = []
        for _ in range(1 + r % RANDOM_MAX_ITEMS):
            state, c = splitmix64(state)
            cls = RANDOM_CLASSES[c % len(RANDOM_CLASSES)]
            state, k = splitmix64(state)
            items.append(cls[k % len(cls)])
        texts.append("".join(items))
    return texts


def fnv1a32(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def write_reference(d, tok, heldout):
    ref = []
    texts = [(t, None) for t in heldout]
    texts += [(raw.decode("utf-8", errors="replace"), raw.hex()) for raw in RAW_HELDOUT]
    for text, raw in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        entry = {"text": text, "ids": ids, "ids_special": tok.encode(text).ids,
                 "decoded": tok.decode(ids, skip_special_tokens=False)}
        if raw is not None:
            entry["raw_hex"] = raw
        ref.append(entry)
    write_json(os.path.join(d, "reference.json"), ref, indent=None)
    blob = bytearray()
    for text in random_texts():
        ids = tok.encode(text, add_special_tokens=False).ids
        assert len(ids) < 65536 and all(i < 65536 for i in ids)
        blob += struct.pack(f"<H{len(ids)}H", len(ids), *ids)
        decoded = tok.decode(ids, skip_special_tokens=False)
        blob += struct.pack("<I", fnv1a32(decoded.encode("utf-8")))
    write_json(os.path.join(d, "random.json"),
               {"seed": RANDOM_SEED, "count": RANDOM_COUNT, "max_items": RANDOM_MAX_ITEMS,
                "classes": RANDOM_CLASSES, "data": base64.b64encode(bytes(blob)).decode()},
               indent=None)


def main():
    train, heldout = corpus()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    kinds = {"llama3": make_llama3(train), "qwen2": make_qwen2(train),
             "mistral": sentencepiece_style_kind(train, old_form=False),
             "llama2": sentencepiece_style_kind(train, old_form=True)}
    for name, (tok, config) in kinds.items():
        d = os.path.join(OUT, name)
        os.makedirs(d)
        tok.save(os.path.join(d, "tokenizer.json"))
        write_json(os.path.join(d, "tokenizer_config.json"), config, indent=2)
        loaded = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        write_reference(d, loaded, heldout)
        print(f"{name}: vocab {loaded.get_vocab_size()}")
    write_json(os.path.join(OUT, "versions.json"),
               {"python": platform.python_version(), "tokenizers": tokenizers.__version__},
               indent=2)


if __name__ == "__main__":
    main()
