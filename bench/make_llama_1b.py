#!/usr/bin/env python3
"""A Llama 3.2 1B-shaped Hugging Face folder with random weights, for the scale
run of bench/scale_llama_1b.sh: the published config of Llama 3.2 1B (16 layers,
width 2048, 32 query and 8 key/value heads of 64, MLP 8192, vocabulary 128256,
tied embeddings, rope_theta 500000 with the llama3 scaling of factor 32), its
weights drawn by transformers' own initialisation (seed 0) and saved in
bfloat16 with save_pretrained, about 2.5 GB.

Needs transformers and torch in a virtual environment outside the repository
(scripts/make_hf_reference.py says how to make one):
  /opt/hfref-venv/bin/python bench/make_llama_1b.py OUT_DIR
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=True,
        bos_token_id=128000,
        eos_token_id=128001,
        initializer_range=0.02,
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"make_llama_1b: {n / 1e9:.3f}B parameters, bfloat16, written to {out}")


if __name__ == "__main__":
    main()
