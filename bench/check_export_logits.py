#!/usr/bin/env python3
"""Loads an exported Hugging Face folder in transformers and compares its
logits with the ones `dendrite score` gave on the same tokens: prints the
largest difference over (|Dendrite's| + rms) and exits 1 above 1e-4.
    check_export_logits.py HF_FOLDER TOKENS_JSON LOGITS_BIN
TOKENS_JSON is score's --tokens file, LOGITS_BIN its --out. Needs torch and
transformers (a venv outside the repository, as scripts/make_hf_reference.py).
"""
import json
import sys

import numpy as np
import torch
import transformers

folder, tokens_file, logits_file = sys.argv[1:4]
tokens = json.load(open(tokens_file))["tokens"]
model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, dtype=torch.float32, attn_implementation="eager").eval()
with torch.no_grad():
    theirs = model(torch.tensor(tokens)).logits.numpy()
mine = np.fromfile(logits_file, dtype=np.float32).reshape(theirs.shape)
rms = float(np.sqrt(np.mean(mine.astype(np.float64) ** 2)))
err = float(np.max(np.abs(theirs - mine) / (np.abs(mine) + rms)))
print(f"  transformers {transformers.__version__} reads the export as {type(model).__name__}: "
      f"logits within {err:.2e} of dendrite score's (allowed 1e-4)")
sys.exit(0 if err < 1e-4 else 1)
