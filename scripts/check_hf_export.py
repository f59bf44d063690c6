#!/usr/bin/env python3
"""Checks `dendrite export` against the real transformers library.

For a small GPT-2, a small Llama (GQA, untied and tied heads) and small
members of the Llama family (Llama 3's and linear rope scaling, Mistral with a
sliding window as long as the sequence, Qwen2's q/k/v biases, Qwen3's per-head
q/k norms with a head_dim other than width / heads) it trains a
few steps with Dendrite on the KJV text, exports the checkpoint with
`dendrite export --hf`, loads the folder with transformers'
AutoModelForCausalLM and AutoTokenizer, and compares the logits transformers
computes on fixed tokens with the ones `dendrite score` computes from the
checkpoint: the largest difference over (|Dendrite's| + rms) must stay under
1e-4. Prints one line per model and the library versions; exits 1 on any miss.

Run it with a Python that has torch, transformers, sentencepiece and protobuf
(AutoTokenizer converts the SentencePiece model with them; none is a Dendrite
dependency), after building Dendrite:
    /opt/hfref-venv/bin/python scripts/check_hf_export.py [--build build]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

MODELS = {
    "gpt2": {"arch": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 32},
    "llama": {"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
              "ffn_hidden": 96, "block_size": 32, "rope_theta": 50000.0},
    "llama-tied": {"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
                   "ffn_hidden": 96, "block_size": 32, "tie_embeddings": True},
    "llama3": {"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
               "ffn_hidden": 96, "block_size": 32, "tie_embeddings": True,
               "rope_theta": 500000.0, "rope_scaling": "llama3", "rope_factor": 8.0,
               "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0,
               "rope_original_max_positions": 8},
    "llama-linear": {"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
                     "ffn_hidden": 96, "block_size": 32, "rope_scaling": "linear",
                     "rope_factor": 2.0},
    "mistral": {"arch": "mistral", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
                "ffn_hidden": 96, "block_size": 32, "sliding_window": 32},
    "qwen2": {"arch": "qwen2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
              "ffn_hidden": 96, "block_size": 32, "tie_embeddings": True},
    "qwen3": {"arch": "qwen3", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2,
              "ffn_hidden": 96, "block_size": 32, "tie_embeddings": True, "head_dim": 32},
}


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"check_hf_export: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="Dendrite's build folder")
    args = ap.parse_args()
    dendrite = os.path.abspath(os.path.join(args.build, "dendrite"))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "exodus.txt")
        with open(text, "w") as f:
            f.write(run(["bible", "-l10000", "Exo1:1-Exo40:38"]))
        data = os.path.join(tmp, "data")
        run([dendrite, "tokenize", "--input", text, "--vocab-size", "512", "--out", data], env)
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, 512, size=(2, 24)).tolist()
        tokens_file = os.path.join(tmp, "tokens.json")
        with open(tokens_file, "w") as f:
            json.dump({"tokens": tokens}, f)
        for name, model in MODELS.items():
            cfg = os.path.join(tmp, name + ".json")
            with open(cfg, "w") as f:
                json.dump(model, f)
            out = os.path.join(tmp, "run-" + name)
            run([dendrite, "train", "--model", cfg, "--data", data, "--steps", "10",
                 "--batch", "4", "--seq", "32", "--eval-every", "0", "--out", out], env)
            hf = os.path.join(tmp, "hf-" + name)
            run([dendrite, "export", "--checkpoint", out, "--hf", hf], env)
            logits_file = os.path.join(tmp, name + ".bin")
            run([dendrite, "score", "--checkpoint", out, "--tokens", tokens_file, "--out",
                 logits_file, "--device", "cpu"], env)
            mine = np.fromfile(logits_file, dtype=np.float32).reshape(2, 24, -1)
            m = transformers.AutoModelForCausalLM.from_pretrained(
                hf, dtype=torch.float32, attn_implementation="eager").eval()
            with torch.no_grad():
                theirs = m(torch.tensor(tokens)).logits.numpy()
            rms = float(np.sqrt(np.mean(mine.astype(np.float64) ** 2)))
            err = float(np.max(np.abs(theirs - mine) / (np.abs(mine) + rms)))
            if m.config.model_type == "qwen2":
                # transformers 5's AutoTokenizer ignores tokenizer_class for qwen2
                # (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS) and builds Qwen2's byte-level
                # BPE from Dendrite's SentencePiece model: load the class the export names.
                with open(os.path.join(hf, "tokenizer_config.json")) as f:
                    cls = json.load(f)["tokenizer_class"]
                tok = getattr(transformers, cls).from_pretrained(hf)
            else:
                tok = transformers.AutoTokenizer.from_pretrained(hf)
            sample = "And Moses said unto the people, Fear ye not."
            ids = tok(sample, add_special_tokens=False)["input_ids"]
            back = tok.decode(ids)
            ok = err < 1e-4 and back == sample
            failed |= not ok
            print(f"{name:12s} {type(m).__name__}: logits max rel diff {err:.2e} "
                  f"({'ok' if err < 1e-4 else 'MISS'}); {type(tok).__name__} "
                  f"round trip {'ok' if back == sample else 'MISS: ' + repr(back)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
