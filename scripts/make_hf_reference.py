#!/opt/hfref-venv/bin/python
"""Hugging Face interoperability reference data: tiny checkpoints and tokenizers
written by the real `transformers`, `tokenizers` and `sentencepiece` libraries.

Writes under tests/data/hf/ (about 2.5 MB in all):

  versions.json              exact library versions used (and the Debian text packages)
  gpt2-tiny/                 random GPT2LMHeadModel, float32, one model.safetensors
                             (vocab 320, 64 positions, width 64, 2 layers, 4 heads,
                             gelu_new, tied embeddings; LayerNorm weights and every
                             bias perturbed so that a wrong mapping shows)
  gpt2-tiny-bf16/            the same weights cast to bfloat16 (config dtype bfloat16)
  llama-tiny/                random LlamaForCausalLM, float32, SHARDED
                             (model-0000N-of-0000M.safetensors + model.safetensors.index.json;
                             width 64, ffn 176, 2 layers, 4 query heads, 2 kv heads (GQA),
                             rope_theta 50000, untied lm_head, RMSNorm weights perturbed)
  llama-tiny-fp16/           another random Llama with tied embeddings, float16, one file
  The Llama family's other members, each its published config (Llama 3.2 1B, Mistral 7B
  v0.3, Qwen2.5 0.5B, Qwen3 0.6B) shrunk to vocab 128, width 32, ffn 64, 2 layers,
  4 query heads, 2 kv heads, max_position_embeddings 64, keeping its structural keys:
  llama3-tiny/               LlamaForCausalLM, rope_type llama3 (rope_theta 500000, factor 8,
                             low/high_freq_factor 1/4, original_max_position_embeddings 16,
                             so that the test's positions meet kept, smoothed and divided
                             frequencies), tied embeddings (as Llama 3.2), float32
  llama-linear-tiny/         LlamaForCausalLM, rope linear (factor 4), 1 layer, bfloat16, its
                             config.json rewritten in transformers 4's form (top-level
                             rope_theta, rope_scaling {"type": "linear", "factor": 4.0})
  mistral-tiny/              MistralForCausalLM, untied lm_head, head_dim 8 given,
                             sliding_window 48 (longer than every sequence the tests run),
                             rope_theta 1e6, bfloat16
  qwen2-tiny/                Qwen2ForCausalLM: q, k, v biases (perturbed), tied embeddings,
                             use_sliding_window false, rope_theta 1e6, float32
  qwen3-tiny/                Qwen3ForCausalLM: per-head q_norm / k_norm (perturbed), head_dim 16
                             (not hidden_size / heads = 8), tied embeddings, bfloat16
    each model folder holds the library's config.json, generation_config.json,
    safetensors file(s), plus
      reference.json         {"tokens": [[24 ids], [24 ids]], "logits_file": "logits.bin",
                              "shape": [2, 24, 320], "dtype": "float32"}
      logits.bin             logits [2, 24, 320], little-endian float32, from the folder
                             loaded back with from_pretrained(dtype=float32,
                             attn_implementation="eager") (so bf16/fp16 folders give the
                             logits of their rounded weights, upcast to float32)
    the Llama family's others have vocab 128 (logits [2, 24, 128]) and their reference.json
    also holds "generation": {"prompt": [8 ids], "tokens": [32 ids], "min_margin"}, the
    greedy continuation by generate(do_sample=False, max_new_tokens=32) of the folder
    loaded in float32 with eager attention; min_margin is the smallest gap between the
    best and second-best logit over its steps (a prompt is chosen whose gap is never
    below 1e-3, so that rounding cannot change the tokens, and whose continuation has at
    least 8 distinct tokens). Weights are drawn with initializer_range 0.2 (not 0.02),
    so that the continuations vary rather than repeat the prompt's last token.
  exports/NAME/              transformers' reading of Dendrite's export of the folder NAME
                             (gpt2-tiny, llama-tiny and the five above): the export that
                             hf_test makes (the folder loaded into a Dendrite model, saved as
                             a checkpoint, exported; made twice here by the test program
                             hf_export and checked byte-identical), loaded back with
                             AutoModelForCausalLM.from_pretrained(dtype=float32,
                             attn_implementation="eager"), which must choose the folder's
                             architecture:
      reference.json         {"tokens", "logits_file", "shape", "dtype"} as a model folder's
                             (the tokens NAME's own), "transformers_class", and "export":
                             {"source": NAME, "sha256": {file name: hex digest}} of every
                             file of the export
      logits.bin             transformers' logits of the export on those tokens
    hf_test makes the same export, checks its files' digests and its own logits of it
    against these (within 1e-5, as the folders' own).
  bpe/                       byte-level BPE (GPT-2 style: ByteLevel pre-tokenizer, decoder
                             and post-processor, vocab 512, special "<|endoftext|>"),
                             trained by `tokenizers`: vocab.json, merges.txt, tokenizer.json
  sp/tokenizer.model         SentencePiece BPE, vocab 512, byte_fallback, Llama-style
                             settings (identity normalization, add_dummy_prefix,
                             remove_extra_whitespaces=false, split_digits,
                             allow_whitespace_only_pieces), trained by `sentencepiece`
  bpe/reference.json, sp/reference.json
                             [{"text", "ids", "decoded"}] on held-out texts: BPE ids from
                             tokenizers.Tokenizer.from_file("tokenizer.json").encode(text,
                             add_special_tokens=False), decoded with
                             decode(ids, skip_special_tokens=False); SentencePiece ids from
                             SentencePieceProcessor.encode(text, out_type=int) and decode(ids).

Tokenizer training text: KJV Genesis, Exodus and Matthew (Debian bible-kjv, via the
`bible` command, verse references stripped) and the Jargon File 4.4.7 up to the
entries for M (Debian jargon-text, /usr/share/doc/jargon-text/jargon.txt.gz).
Held-out texts: verses from Psalms, John and Revelation, Jargon entries from the Y
section, and hand-written edge cases (accents, emoji, runs of spaces, tabs,
newlines, leading/trailing spaces, an empty string, the special token in text).

Made with (versions.json records them; the script prints them):
  torch 2.15.0 (PyPI wheel, +cu132, run on CPU), transformers 5.24.0,
  tokenizers 0.23.3, sentencepiece 0.2.3, safetensors 0.8.0, numpy 2.4.6, Python 3.11.

How to run (from the repository root; needs the Debian packages bible-kjv and
jargon-text, and a venv outside the repository):
  python3 -m venv /opt/hfref-venv
  /opt/hfref-venv/bin/pip install torch transformers tokenizers sentencepiece safetensors numpy
  cmake --build build --target hf_export
  /opt/hfref-venv/bin/python scripts/make_hf_reference.py --hf-export build/tests/hf_export \
      [FOLDER ...]
With folder names (e.g. qwen3-tiny), only those folders (and versions.json) are rewritten;
--hf-export (Dendrite's test program that writes the export) is needed for `exports`, which
a change to the model folders or to Dendrite's export calls for again.

Deterministic: fixed seeds, one CPU thread, single-threaded tokenizer training and
sorted-key JSON, so a rerun with the same library versions rewrites byte-identical files.
"""
import os

# Before any library import: no hub access, single-threaded everything.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import gzip
import hashlib
import io
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import sentencepiece as spm
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "hf")

VOCAB = 320
SEQS, SEQ_LEN = 2, 24
TOKEN_SEED = 1234

JARGON_GZ = "/usr/share/doc/jargon-text/jargon.txt.gz"
KJV_TRAIN_RANGES = ["Gen1:1-Gen50:26", "Exo1:1-Exo40:38", "Mat1:1-Mat28:20"]
KJV_HELDOUT = ["Psa23:1", "Psa23:4", "John1:1", "Rev21:4"]
JARGON_TRAIN_END = "   :M: pref."      # training text is the file up to this line
JARGON_HELDOUT = ["   :yak shaving:", "   :YAUN: /yawn/, n."]


# ---------------------------------------------------------------- helpers

def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True))
        f.write("\n")


def fresh_dir(name):
    path = os.path.join(OUT, name)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def deb_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "sentencepiece": spm.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "debian_bible_kjv_text": deb_version("bible-kjv-text"),
        "debian_jargon_text": deb_version("jargon-text"),
    }


# ---------------------------------------------------------------- models

def perturb(model, seed, pred):
    """Adds small seeded noise to the parameters selected by pred(name):
    norm weights get 1 + 0.1*N(0,1) (init is 1), biases 0.05*N(0,1) (init is 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not pred(name):
                continue
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(p + 0.05 * noise)
            else:
                p.copy_(p + 0.1 * noise)


def reference_tokens():
    g = torch.Generator().manual_seed(TOKEN_SEED)
    return torch.randint(0, VOCAB, (SEQS, SEQ_LEN), generator=g, dtype=torch.long)


def write_reference(folder, cls, tokens, generation=None):
    """Loads the folder back through from_pretrained in float32 with eager attention
    and writes reference.json + logits.bin (and, given, the greedy generation)."""
    model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    assert logits.dtype == torch.float32 and tuple(logits.shape) == (SEQS, SEQ_LEN, vocab)
    arr = logits.numpy().astype("<f4", copy=False)
    with open(os.path.join(folder, "logits.bin"), "wb") as f:
        f.write(arr.tobytes(order="C"))
    ref = {
        "tokens": tokens.tolist(),
        "logits_file": "logits.bin",
        "shape": [SEQS, SEQ_LEN, vocab],
        "dtype": "float32",
    }
    if generation:
        ref["generation"] = greedy_generation(model, generation)
    write_json(os.path.join(folder, "reference.json"), ref)
    return logits


GEN_PROMPT, GEN_NEW = 8, 32


def greedy_generation(model, seed):
    """The first prompt (from seeds seed, seed+1, ...) whose greedy continuation never
    has its two best logits closer than 1e-3 and holds at least 8 distinct tokens (a
    tiny random model tends to repeat one), with that continuation."""
    vocab = model.config.vocab_size
    for attempt in range(50):
        g = torch.Generator().manual_seed(seed + attempt)
        prompt = torch.randint(0, vocab, (1, GEN_PROMPT), generator=g, dtype=torch.long)
        with torch.no_grad():
            out = model.generate(prompt, do_sample=False, max_new_tokens=GEN_NEW,
                                 min_new_tokens=GEN_NEW, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)
        new = out.sequences[0, GEN_PROMPT:]
        assert new.numel() == GEN_NEW
        margin = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores)
        if margin >= 1e-3 and len(set(new.tolist())) >= 8:
            return {"prompt": prompt[0].tolist(), "tokens": new.tolist(),
                    "min_margin": round(margin, 6)}
    raise RuntimeError("no prompt with a clear greedy continuation")


def make_gpt2(tokens):
    torch.manual_seed(1)
    config = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        tie_word_embeddings=True)
    model = GPT2LMHeadModel(config).to(torch.float32)
    perturb(model, 11, lambda n: n.endswith("bias") or ".ln_" in n)
    model.eval()

    d32 = fresh_dir("gpt2-tiny")
    model.save_pretrained(d32, safe_serialization=True)
    write_reference(d32, GPT2LMHeadModel, tokens)

    d16 = fresh_dir("gpt2-tiny-bf16")
    model.to(torch.bfloat16).save_pretrained(d16, safe_serialization=True)
    write_reference(d16, GPT2LMHeadModel, tokens)


def llama_config(tied):
    return LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=176,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       rms_norm_eps=1e-5, rope_theta=50000.0, max_position_embeddings=64,
                       tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
                       hidden_act="silu")


def make_llama(tokens):
    is_norm = lambda n: n.endswith("layernorm.weight") or n == "model.norm.weight"

    torch.manual_seed(2)
    model = LlamaForCausalLM(llama_config(tied=False)).to(torch.float32)
    perturb(model, 22, is_norm)
    model.eval()
    d = fresh_dir("llama-tiny")
    # ~535 kB of float32 weights: 200 kB shards give at least 2 files.
    model.save_pretrained(d, safe_serialization=True, max_shard_size="200KB")
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json")), "not sharded"
    write_reference(d, LlamaForCausalLM, tokens)

    torch.manual_seed(3)
    model = LlamaForCausalLM(llama_config(tied=True)).to(torch.float32)
    perturb(model, 33, is_norm)
    model.eval()
    d = fresh_dir("llama-tiny-fp16")
    model.to(torch.float16).save_pretrained(d, safe_serialization=True,
                                            max_shard_size="100MB")
    assert os.path.exists(os.path.join(d, "model.safetensors"))
    write_reference(d, LlamaForCausalLM, tokens)


# The Llama family's others: published configs shrunk (module docstring).
FAMILY_VOCAB = 128
FAMILY_TOKEN_SEED = 4321


def family_tokens():
    g = torch.Generator().manual_seed(FAMILY_TOKEN_SEED)
    return torch.randint(0, FAMILY_VOCAB, (SEQS, SEQ_LEN), generator=g, dtype=torch.long)


def tiny(**kw):
    base = dict(vocab_size=FAMILY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                hidden_act="silu", bos_token_id=None, eos_token_id=None,
                initializer_range=0.2)
    base.update(kw)
    return base


def family_folder(name, model, seed, perturbed, dtype, tokens, edit_config=None):
    perturb(model, seed, perturbed)
    model.eval()
    d = fresh_dir(name)
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    if edit_config:
        path = os.path.join(d, "config.json")
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
        edit_config(c)
        write_json(path, c)
    write_reference(d, type(model), tokens, generation=seed)


def is_norm(n):
    return n.endswith("norm.weight")


def make_llama3(tokens):
    torch.manual_seed(4)
    config = LlamaConfig(**tiny(rms_norm_eps=1e-5, tie_word_embeddings=True, head_dim=8,
                                attention_bias=False, mlp_bias=False,
                                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                 "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 16}))
    family_folder("llama3-tiny", LlamaForCausalLM(config), 44, is_norm, torch.float32, tokens)


def make_llama_linear(tokens):
    torch.manual_seed(5)
    config = LlamaConfig(**tiny(num_hidden_layers=1, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                 "factor": 4.0}))

    def transformers4_form(c):
        r = c.pop("rope_parameters")
        c["rope_theta"] = r["rope_theta"]
        c["rope_scaling"] = {"type": r["rope_type"], "factor": r["factor"]}

    family_folder("llama-linear-tiny", LlamaForCausalLM(config), 55, is_norm, torch.bfloat16,
                  tokens, edit_config=transformers4_form)


def make_mistral(tokens):
    torch.manual_seed(6)
    config = MistralConfig(**tiny(head_dim=8, rms_norm_eps=1e-5, rope_theta=1e6,
                                  sliding_window=48, tie_word_embeddings=False))
    family_folder("mistral-tiny", MistralForCausalLM(config), 66, is_norm, torch.bfloat16, tokens)


def make_qwen2(tokens):
    torch.manual_seed(7)
    config = Qwen2Config(**tiny(rms_norm_eps=1e-6, rope_theta=1e6, use_sliding_window=False,
                                sliding_window=64, max_window_layers=2, tie_word_embeddings=True))
    family_folder("qwen2-tiny", Qwen2ForCausalLM(config), 77,
                  lambda n: is_norm(n) or n.endswith("bias"), torch.float32, tokens)


def make_qwen3(tokens):
    torch.manual_seed(8)
    config = Qwen3Config(**tiny(head_dim=16, rms_norm_eps=1e-6, rope_theta=1e6,
                                attention_bias=False, use_sliding_window=False,
                                sliding_window=None, max_window_layers=2,
                                tie_word_embeddings=True))
    family_folder("qwen3-tiny", Qwen3ForCausalLM(config), 88, is_norm, torch.bfloat16, tokens)


# ---------------------------------------------------------------- tokenizers

VERSE_REF = re.compile(r"^\S+?\d+:\d+ ")


def bible(ref):
    out = subprocess.run(["bible", "-f", ref], check=True, capture_output=True,
                         text=True, encoding="utf-8").stdout
    verses = []
    for line in out.splitlines():
        m = VERSE_REF.match(line)
        if m:
            verses.append(line[m.end():])
    assert verses, f"bible printed no verses for {ref}"
    return verses


def jargon_lines():
    with gzip.open(JARGON_GZ, "rt", encoding="utf-8") as f:
        return f.read().split("\n")


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
    """Training lines (each a verse or a Jargon File line, no newline) and held-out texts."""
    train = []
    for r in KJV_TRAIN_RANGES:
        train.extend(bible(r))
    jl = jargon_lines()
    end = jl.index(JARGON_TRAIN_END)
    train.extend(line.rstrip() for line in jl[:end] if line.strip())

    heldout = [bible(r)[0] for r in KJV_HELDOUT]
    heldout += [jargon_entry(jl, h) for h in JARGON_HELDOUT]
    heldout += [
        "café naïve Ångström",
        "🙂🚀 ok",
        "a    b",
        "line1\n\n  line2\t\tend",
        "   leading and trailing spaces   ",
        " ",
        "",
        "hello<|endoftext|>world",
        "In 1611, 42 hackers paid $3.50 for 1,000 MIPS (ca. 99.9%).",
        "Ünïcödé — “quotes” ‘and’ ·dots· 日本語 Ελληνικά",
    ]
    joined = "\n".join(train)
    for t in heldout:
        # every held-out text that is long enough to mean anything is absent from training
        assert len(t) < 20 or t not in joined, f"held-out text is in the training text: {t!r}"
    return train, heldout


def make_bpe(train, heldout):
    d = fresh_dir("bpe")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([line + "\n" for line in train], trainer=trainer)
    assert tok.get_vocab_size() == 512, tok.get_vocab_size()
    tok.save(os.path.join(d, "tokenizer.json"))
    tok.model.save(d)  # vocab.json, merges.txt

    loaded = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    ref = []
    for text in heldout:
        ids = loaded.encode(text, add_special_tokens=False).ids
        ref.append({"text": text, "ids": ids,
                    "decoded": loaded.decode(ids, skip_special_tokens=False)})
    write_json(os.path.join(d, "reference.json"), ref)


def make_sp(train, heldout):
    d = fresh_dir("sp")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train), model_writer=buf,
        model_type="bpe", vocab_size=512, byte_fallback=True,
        character_coverage=0.9995, normalization_rule_name="identity",
        add_dummy_prefix=True, remove_extra_whitespaces=False, split_digits=True,
        allow_whitespace_only_pieces=True, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, minloglevel=2)
    with open(os.path.join(d, "tokenizer.model"), "wb") as f:
        f.write(buf.getvalue())

    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
    assert sp.get_piece_size() == 512, sp.get_piece_size()
    ref = []
    for text in heldout:
        ids = sp.encode(text, out_type=int)
        ref.append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    write_json(os.path.join(d, "reference.json"), ref)


# ---------------------------------------------------------------- exports

EXPORTED = ["gpt2-tiny", "llama-tiny", "llama3-tiny", "llama-linear-tiny", "mistral-tiny",
            "qwen2-tiny", "qwen3-tiny"]


def sha256_files(folder):
    digests = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            digests[name] = hashlib.sha256(f.read()).hexdigest()
    return digests


def make_exports(hf_export):
    """Dendrite's export of each folder of EXPORTED (module docstring), as transformers reads it."""
    root = fresh_dir("exports")
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXPORTED:
            src = os.path.join(OUT, name)
            made = []
            for attempt in range(2):
                out = os.path.join(tmp, f"{name}-{attempt}")
                subprocess.run([hf_export, src, out], check=True)
                made.append(sha256_files(out))
            assert made[0] == made[1], f"{name}: two exports of one folder differ: {made}"
            with open(os.path.join(src, "reference.json"), encoding="utf-8") as f:
                source_ref = json.load(f)
            with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
                arch = json.load(f)["architectures"][0]
            model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                         attn_implementation="eager")
            model.eval()
            assert type(model).__name__ == arch, f"{name}: {type(model).__name__}, not {arch}"
            tokens = torch.tensor(source_ref["tokens"], dtype=torch.long)
            with torch.no_grad():
                logits = model(input_ids=tokens).logits
            shape = list(logits.shape)
            assert logits.dtype == torch.float32 and shape == source_ref["shape"], shape
            d = os.path.join(root, name)
            os.makedirs(d)
            with open(os.path.join(d, "logits.bin"), "wb") as f:
                f.write(logits.numpy().astype("<f4", copy=False).tobytes(order="C"))
            write_json(os.path.join(d, "reference.json"), {
                "tokens": source_ref["tokens"], "logits_file": "logits.bin", "shape": shape,
                "dtype": "float32", "transformers_class": arch,
                "export": {"source": name, "sha256": made[0]}})
            source = np.fromfile(os.path.join(src, "logits.bin"), dtype="<f4").reshape(shape)
            diff = float(np.max(np.abs(logits.numpy() - source)))
            print(f"exports/{name}: {arch}; transformers' logits of the export differ from its "
                  f"logits of {name} by {diff:.2e} at most")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", metavar="FOLDER", help="only these (default: all)")
    ap.add_argument("--hf-export", help="Dendrite's test program hf_export (for exports)")
    args = ap.parse_args()
    only = args.folders
    if (not only or "exports" in only) and not args.hf_export:
        ap.error("exports needs --hf-export BUILD/tests/hf_export")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    os.makedirs(OUT, exist_ok=True)

    v = versions()
    for k, val in v.items():
        print(f"{k:22s} {val}")
    write_json(os.path.join(OUT, "versions.json"), v)

    family = family_tokens()
    makers = {
        "gpt2-tiny": lambda: make_gpt2(reference_tokens()),  # and gpt2-tiny-bf16
        "llama-tiny": lambda: make_llama(reference_tokens()),  # and llama-tiny-fp16
        "llama3-tiny": lambda: make_llama3(family),
        "llama-linear-tiny": lambda: make_llama_linear(family),
        "mistral-tiny": lambda: make_mistral(family),
        "qwen2-tiny": lambda: make_qwen2(family),
        "qwen3-tiny": lambda: make_qwen3(family),
        "tokenizers": lambda: (make_bpe(*corpus()), make_sp(*corpus())),
        "exports": lambda: make_exports(os.path.abspath(args.hf_export)),  # after the models
    }
    unknown = [n for n in only if n not in makers]
    assert not unknown, f"unknown folders {unknown}; known: {sorted(makers)}"
    for name, make in makers.items():
        if not only or name in only:
            make()

    total = 0
    for dirpath, _, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            size = os.path.getsize(p)
            total += size
            print(f"{size:9d}  {os.path.relpath(p, ROOT)}")
    print(f"{total:9d}  total")


if __name__ == "__main__":
    sys.exit(main())
