#!/usr/bin/python3
"""Reference data for the whole-model test: two tiny models checked against PyTorch.

For each model (gpt2_tiny, llama_tiny) writes tests/data/reference/<name>/:
  config.json            model shape and training settings
  model.safetensors      initial weights, Hugging Face names and layouts, F32
  reference.safetensors  inputs/targets [B, T] I32, logits [B, T, V], loss [1],
                         grad.<name> (gradient of the mean loss at the initial
                         weights, unclipped), adamw_losses [steps],
                         adamw_grad_norms [steps] (before clipping), final.<name>
                         (weights after `steps` AdamW updates on the same batch)

Everything is computed in float64 from the float32 initial weights, then saved
as float32, so the file holds the exact answer rounded once.
Dimension letters: B batch, T sequence, C model width, V vocabulary,
NH query heads, NKV key/value heads, hs head size, F ffn hidden width.

Run with /usr/bin/python3 (torch 1.13) from the repository root:
  /usr/bin/python3 scripts/make_reference.py
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "reference")

TRAIN = dict(batch=2, seq=16, lr=3e-3, min_lr=3e-4, warmup=2, steps=10,
             beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)

GPT2_TINY = dict(arch="gpt2", vocab_size=96, n_layer=2, n_embd=32, n_head=4, n_kv_head=4,
                 ffn_hidden=128, block_size=16, norm_eps=1e-5, rope_theta=10000.0)
LLAMA_TINY = dict(arch="llama", vocab_size=96, n_layer=2, n_embd=32, n_head=4, n_kv_head=2,
                  ffn_hidden=64, block_size=16, norm_eps=1e-5, rope_theta=10000.0)


# ---------------------------------------------------------------- safetensors

_DTYPES = {np.dtype("float32"): "F32", np.dtype("int32"): "I32"}


def write_safetensors(path, tensors):
    """tensors: list of (name, numpy array), written contiguously in this order."""
    header, offset, blobs = {}, 0, []
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """Strict re-read: returns {name: numpy array}; checks offsets tile the data."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    np_types = {"F32": "<f4", "I32": "<i4"}
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = np.dtype(np_types[e["dtype"]])
        assert end - b == dt.itemsize * int(np.prod(e["shape"], dtype=np.int64)), name
        out[name] = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
        spans.append((b, end))
    spans.sort()
    pos = 0
    for b, end in spans:
        assert b == pos, f"{path}: gap or overlap at {b}"
        pos = end
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return out


# ---------------------------------------------------------------- weights

def gpt2_weight_shapes(c):
    V, C, F_ = c["vocab_size"], c["n_embd"], c["ffn_hidden"]
    shapes = [("transformer.wte.weight", [V, C]), ("transformer.wpe.weight", [c["block_size"], C])]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        shapes += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
                   (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
                   (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
                   (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
                   (p + "mlp.c_fc.weight", [C, F_]), (p + "mlp.c_fc.bias", [F_]),
                   (p + "mlp.c_proj.weight", [F_, C]), (p + "mlp.c_proj.bias", [C])]
    shapes += [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    return shapes


def llama_weight_shapes(c):
    V, C, F_ = c["vocab_size"], c["n_embd"], c["ffn_hidden"]
    kv = c["n_kv_head"] * (C // c["n_head"])
    shapes = [("model.embed_tokens.weight", [V, C])]
    for i in range(c["n_layer"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [C]),
                   (p + "self_attn.q_proj.weight", [C, C]),
                   (p + "self_attn.k_proj.weight", [kv, C]),
                   (p + "self_attn.v_proj.weight", [kv, C]),
                   (p + "self_attn.o_proj.weight", [C, C]),
                   (p + "post_attention_layernorm.weight", [C]),
                   (p + "mlp.gate_proj.weight", [F_, C]),
                   (p + "mlp.up_proj.weight", [F_, C]),
                   (p + "mlp.down_proj.weight", [C, F_])]
    shapes += [("model.norm.weight", [C]), ("lm_head.weight", [V, C])]
    return shapes


def is_norm_gain(name):
    return name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight",
                          "norm.weight"))


def init_weights(shapes, gen):
    """Matrices/embeddings N(0, 0.1); norm gains 1 + 0.1 N; biases 0.1 N. Rounded to f32."""
    weights = {}
    for name, shape in shapes:
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith(".bias"):
            w = 0.1 * z
        elif is_norm_gain(name):
            w = 1.0 + 0.1 * z
        else:
            assert len(shape) == 2, name
            w = 0.02 * 5 * z
        weights[name] = w.to(torch.float32)
    return weights


# ---------------------------------------------------------------- models

def gpt2_forward(w, c, idx):
    """idx [B, T] -> logits [B, T, V]. Weights in HF GPT2 layouts (Conv1D = in x out)."""
    B, T = idx.shape
    C, NH, eps = c["n_embd"], c["n_head"], c["norm_eps"]
    hs = C // NH
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:T]  # [B, T, C]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # [B, T, 3C]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))  # [B, NH, T, hs]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].t()


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, theta):
    """x [B, H, T, hs], HF 'rotate half': pairs (i, i + hs/2) rotated by t * theta^(-2i/hs)."""
    T, hs = x.shape[2], x.shape[3]
    freqs = theta ** (-torch.arange(0, hs // 2, dtype=x.dtype) * 2.0 / hs)  # [hs/2]
    ang = torch.arange(T, dtype=x.dtype)[:, None] * freqs[None, :]  # [T, hs/2]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def llama_forward(w, c, idx):
    """idx [B, T] -> logits [B, T, V]. Weights in HF Llama layouts ([out, in])."""
    B, T = idx.shape
    C, NH, NKV, eps = c["n_embd"], c["n_head"], c["n_kv_head"], c["norm_eps"]
    hs = C // NH
    group = NH // NKV
    x = w["model.embed_tokens.weight"][idx]  # [B, T, C]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c["n_layer"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].t()).view(B, T, NH, hs).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].t()).view(B, T, NKV, hs).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(B, T, NKV, hs).transpose(1, 2)
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = F.silu(h @ w[p + "mlp.gate_proj.weight"].t())
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].t())) @ w[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].t()


# ---------------------------------------------------------------- training

def lr_at(step, lr, min_lr, warmup, total):
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def loss_of(forward, params, c, inputs, targets):
    logits = forward(params, c, inputs)
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(name, cfg, seed):
    c = dict(cfg, **TRAIN)
    forward = gpt2_forward if c["arch"] == "gpt2" else llama_forward
    shapes = gpt2_weight_shapes(c) if c["arch"] == "gpt2" else llama_weight_shapes(c)
    gen = torch.Generator().manual_seed(seed)
    init = init_weights(shapes, gen)
    B, T, V = c["batch"], c["seq"], c["vocab_size"]
    seq = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    inputs, targets = seq[:, :T], seq[:, 1:]

    params = {n: init[n].to(torch.float64).clone().requires_grad_(True) for n, _ in shapes}
    logits, loss = loss_of(forward, params, c, inputs, targets)
    loss.backward()
    grads = {n: params[n].grad.detach().clone() for n, _ in shapes}
    logits0, loss0 = logits.detach().clone(), loss.detach().clone()

    decay = [params[n] for n, _ in shapes if params[n].dim() >= 2]
    no_decay = [params[n] for n, _ in shapes if params[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    losses, norms = [], []
    for step in range(c["steps"]):
        opt.zero_grad(set_to_none=True)
        _, loss = loss_of(forward, params, c, inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), c["grad_clip"])
        lr = lr_at(step, c["lr"], c["min_lr"], c["warmup"], c["steps"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"{name} step {step}: loss {loss.item():.6f} grad_norm {norm.item():.4f} lr {lr:.6g}")

    f32 = lambda t: t.detach().to(torch.float32).numpy()
    ref = [("inputs", inputs.to(torch.int32).numpy()), ("targets", targets.to(torch.int32).numpy()),
           ("logits", f32(logits0)), ("loss", f32(loss0.reshape(1)))]
    ref += [("grad." + n, f32(grads[n])) for n, _ in shapes]
    ref += [("adamw_losses", np.array(losses, dtype=np.float32)),
            ("adamw_grad_norms", np.array(norms, dtype=np.float32))]
    ref += [("final." + n, f32(params[n])) for n, _ in shapes]
    model = [(n, init[n].numpy()) for n, _ in shapes]
    return c, model, ref


def main():
    torch.manual_seed(0)
    for name, cfg, seed in (("gpt2_tiny", GPT2_TINY, 1234), ("llama_tiny", LLAMA_TINY, 5678)):
        c, model, ref = build(name, cfg, seed)
        folder = os.path.join(OUT_DIR, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
            f.write("\n")
        for fname, tensors in (("model.safetensors", model), ("reference.safetensors", ref)):
            path = os.path.join(folder, fname)
            write_safetensors(path, tensors)
            back = read_safetensors(path)
            assert list(back) == [n for n, _ in tensors], path
            for n, arr in tensors:
                assert back[n].dtype == arr.dtype and np.array_equal(back[n], arr), (path, n)
        print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
