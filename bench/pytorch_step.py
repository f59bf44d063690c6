#!/usr/bin/python3
"""PyTorch side of the training-speed comparison: GPT-2 training steps, on the CPU or a GPU.

Model: V=50257, C=768, L=12, NH=12 (hs=64), block 1024, the same GPT-2 semantics as
Dendrite (pre-LayerNorm blocks, causal attention, tanh-GELU MLP of width 4C, tied
wte/lm_head). A step is forward, backward, global-norm clip at 1.0 and AdamW
(betas 0.9/0.95, weight decay 0.1 on matrices and embeddings only). Random tokens.
Dimension letters: B batch, T sequence, C width, V vocabulary, NH heads, hs head size.

Run it with the BLAS kernel pinned and OpenMP threads equal to --threads, e.g.
  OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch_step.py --threads 2
(Debian's OpenBLAS otherwise picks a slow generic kernel on this CPU.)
torch here calls whatever libblas.so.3 the Debian alternatives system provides:
- netlib reference BLAS (no OpenBLAS installed): steps are tens of times slower; the
  script warns on stderr.
- libopenblas0-openmp: shares torch's libgomp thread pool; this is the variant to use
  (about 130 tokens/s at the defaults with 2 threads).
- libopenblas0-pthread: its own threads fight torch's spinning OpenMP threads for the
  cores, about 1.5x slower here; the script warns on stderr.
Without root, extract the .deb (apt-get download libopenblas0-openmp; dpkg-deb -x)
and put its .../openblas-openmp folder on LD_LIBRARY_PATH for the run.
On a GPU (--device cuda) it runs as PyTorch users train there: bf16 autocast
(--precision bf16) or TF32 (fp32), scaled_dot_product_attention (flash), fused
AdamW, and optionally torch.compile (--compile); --model gpt2-350m for the 350M
model (C=1024, L=24, NH=16).
Prints one JSON line:
  {"framework":"pytorch","torch":...,"batch","seq","threads","tokens_per_s","step_ms",...}
The first --warmup steps are not timed; tokens_per_s = batch*seq*steps / timed seconds.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attn(self, x):  # x [B, T, C]
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))  # [B, NH, T, hs]
        if x.is_cuda:  # flash attention, as GPU users run it
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # [B, NH, T, T]
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT2(nn.Module):
    def __init__(self, V=50257, C=768, L=12, NH=12, block_size=1024):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(block_size, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):  # idx, targets [B, T]
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # [B, T, V], tied
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def loaded_blas():
    """Path of the BLAS library this process mapped (Linux), or None if unknown."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line and "/" in line}
    except OSError:
        return None
    return ", ".join(sorted(paths)) or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: autocast (GPU only)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--model", default="gpt2-124m", choices=["gpt2-124m", "gpt2-350m"])
    args = ap.parse_args()
    if min(args.batch, args.seq, args.steps, args.threads) < 1 or args.warmup < 0:
        ap.error("--batch, --seq, --steps and --threads must be >= 1, --warmup >= 0")
    if args.seq > 1024:
        ap.error(f"--seq {args.seq} exceeds the block size 1024")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif args.precision != "fp32":
        ap.error("--precision bf16 needs --device cuda here")
    sizes = {"gpt2-124m": {}, "gpt2-350m": {"C": 1024, "L": 24, "NH": 16}}[args.model]
    model = GPT2(**sizes).to(args.device)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if cuda else {}))
    run = torch.compile(model) if args.compile else model
    blas = None if cuda else loaded_blas()
    if blas and "openblas" not in blas:
        print(f"pytorch_step: warning: BLAS is {blas}, not OpenBLAS; timings will be far too "
              "slow (see the docstring for how to load OpenBLAS)", file=sys.stderr)
    elif blas and "pthread" in blas:
        print(f"pytorch_step: warning: BLAS is {blas}; the pthread OpenBLAS competes with "
              "torch's OpenMP threads, use the openmp variant (see the docstring)",
              file=sys.stderr)
    V = model.wte.weight.shape[0]
    idx = torch.randint(0, V, (args.batch, args.seq + 1), device=args.device)
    inputs, targets = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        if args.precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(inputs, targets)
        else:
            loss = run(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()  # .item() waits for the GPU
    seconds = time.perf_counter() - t0
    assert math.isfinite(loss), f"pytorch_step: loss is {loss}"
    out = {"framework": "pytorch", "torch": torch.__version__, "model": args.model,
           "device": args.device, "precision": args.precision, "compile": args.compile,
           "batch": args.batch, "seq": args.seq, "threads": args.threads,
           "tokens_per_s": round(args.batch * args.seq * args.steps / seconds, 2),
           "step_ms": round(1000.0 * seconds / args.steps, 2)}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
        out["peak_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
