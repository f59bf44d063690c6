#!/usr/bin/python3
"""A roofline model of a training step on an H200 or H100, from the step's anatomy as
the emulated GPU counted it (`dendrite_emulated bench step --anatomy --json`,
docs/cuda.md): every kernel launch, cuBLASLt product, copy, memset and host
synchronisation of the last step counted, by op (the Backend method that
issued it) and part of the step. A model, not a measurement.

Each launch costs max(flops / peak, bytes / bandwidth) plus a fixed launch
overhead; each host synchronisation a fixed round trip; each copy its bytes at
its link's rate plus the overhead. Bytes are the least the kernel as written
must move through HBM (each operand read once, each result written once), and
flops what it computes (a causal attention product counts half of T x T).
Products take their M, N, K and element sizes from the count itself. Every
other kernel needs a formula below, keyed by (op, kernel), in terms of the
op's sizes: an anatomy with a kernel the table lacks is refused, so that the
model cannot drift from the code silently.

MFU is bench step's: model flops per token (ModelConfig::train_flops_per_token:
6 x the weights of the products + 12 L T C of attention, given in the
anatomy) x tokens / (step time x the dense bf16 peak).
Letters: B batch, T sequence, C width, NH heads, NKV key/value heads, hs head
size, V vocabulary (Vp padded), L layers; m rows, n elements.

With --measured PROFILE.json (`dendrite bench step --profile` of the same
model and shape on a GPU: CUPTI's record of what the device ran), the model
at the measured rates is set beside the measurement, part by part.

Usage: bench/step_roofline.py ANATOMY.json [...] [--gpu h200|h100] [--overhead-us 3]
       [--sync-us 10] [--measured PROFILE.json]
"""
import argparse
import json
import sys

# By GPU: (name, dense bf16 tensor flop/s, HBM bytes/s, source); the first of
# each is the datasheet's, the second this workplace's measured rates.
MACHINES = {
    "h200": [
        ("H200 datasheet", 989e12, 4.8e12, "NVIDIA's H200 SXM figures: 989 TFLOP/s dense bf16, "
         "4.8 TB/s HBM3e"),
        ("H200 measured", 788e12, 4.3e12, "this workplace's H200 (2026-10-28): 788 TFLOP/s bf16 "
         "GEMM at 8192^3 through PyTorch, 4.3 TB/s device-to-device copy"),
    ],
    "h100": [
        ("H100 datasheet", 989e12, 3.35e12, "NVIDIA's H100 SXM figures: 989 TFLOP/s dense bf16, "
         "3.35 TB/s HBM3"),
        ("H100 measured", 798e12, 3.0e12, "this workplace's H100 (2026-11-13): 798 TFLOP/s bf16 "
         "GEMM at 8192^3 through PyTorch, 3.0 TB/s device-to-device copy"),
    ],
}
DENSE_PEAK = 989e12  # what MFU divides by: dense bf16 on either GPU's datasheet
SIMT_FP32 = 67e12  # fp32 without tensor cores, H100 or H200 SXM (datasheet): SIMT kernels' flops
TF32_DENSE = 494e12  # dense TF32 on the tensor cores (datasheet): fp32 products
PCIE = 50e9  # host <-> device bytes/s (PCIe Gen5 x16, an assumption for pageable copies)


def f32(n):
    return 4.0 * n


def elem(a, key):
    return 2.0 if a.get(key, 0) else 4.0


def attention(a, products, outputs, reads):
    """Flash attention kernels: `products` T x T x hs products per (b, head), causal (half);
    `reads` tensors of [B, T, NH, hs] read in the operands' type, `outputs` written in fp32."""
    B, T, NH, hs = a["B"], a["T"], a["NH"], a["hs"]
    e = elem(a, "q_bf16")
    rows = B * T * NH * hs
    flops = products * 2.0 * B * NH * T * T * hs / 2
    return reads * rows * e + f32(outputs * rows) + f32(2 * B * NH * T), flops


def rope(a):
    """Rotates [B, T, nheads, hs] in place."""
    n = a["B"] * a["T"] * a["nheads"] * a["hs"]
    return f32(2 * n), 6 * n


def rope_bf16(a):
    """Rotates the heads of B*T rows of `width` fp32 values, writing every value in bf16."""
    n = a["B"] * a["T"] * a["width"]
    return f32(n) + 2.0 * n, 6 * a["B"] * a["T"] * a["nheads"] * a["hs"]


def row_blocks(m):
    """The blocks of rows a column sum over m rows runs on (kernels.h: row_blocks)."""
    return max(1, -(-m // 512))


def partials(m, n):
    """add_row_block_partials: the blocks' partial sums read, the sums read and written."""
    return f32(row_blocks(m) * n + 2 * n), row_blocks(m) * n


def whole_row_blocks(m):
    """The blocks of rows of layernorm_backward_rows_add (norm.cu: whole_rows_per_block)."""
    rows = max(3, -(-m // 1024))
    return -(-m // rows)


def whole_row_partials(a):
    """One sum of layernorm_backward_rows_add's partials: bytes and flops."""
    return f32(whole_row_blocks(a["m"]) * a["c"] + 2 * a["c"]), whole_row_blocks(a["m"]) * a["c"]


def times(k, cost):
    """k sums of the same cost in one launch."""
    return tuple(k * x for x in cost)


def ln_backward_rows(a):
    """norm_backward_rows_kernel for LayerNorm: bytes and flops."""
    return (f32(4 * a["m"] * a["c"] + 2 * a["m"] + a["c"]
                + 2 * whole_row_blocks(a["m"]) * a["c"]) + 16.0 * a["m"],
            13 * a["m"] * a["c"])


def rms_backward_rows(a):
    """norm_backward_rows_kernel for RMSNorm: as LayerNorm's, one row sum and
    no mean, the gain's partials alone."""
    return (f32(4 * a["m"] * a["c"] + a["m"] + a["c"] + whole_row_blocks(a["m"]) * a["c"])
            + 8.0 * a["m"], 9 * a["m"] * a["c"])


def rms_backward_rows_bf16(a):
    """... writing the new residual gradient in bf16 too, with a bias its sums."""
    moved, flops = rms_backward_rows(a)
    extra = 2.0 * a["m"] * a["c"] + (f32(whole_row_blocks(a["m"]) * a["c"]) if a["bias"] else 0.0)
    return moved + extra, flops + 2 * a["m"] * a["c"]


def ln_backward_rows_bf16(a):
    """The same pass writing the new residual gradient in bf16 too, and with a
    bias its column sums as a third set of partials."""
    moved, flops = ln_backward_rows(a)
    extra = 2.0 * a["m"] * a["c"] + (f32(whole_row_blocks(a["m"]) * a["c"]) if a["bias"] else 0.0)
    return moved + extra, flops + 2 * a["m"] * a["c"]


def attention_runs(a):
    """The runs of 64 rows whose bias sums attention_backward_bf16's blocks write."""
    return a["B"] * ((a["T"] + 63) // 64)


def plus_bytes(cost, extra):
    return (cost[0] + extra,) + tuple(cost[1:])


def tensor_attention(fn):
    return lambda a: fn(a) + ("tensor" if a.get("q_bf16", 0) else "simt",)


# (op, kernel) -> f(op's sizes) = (bytes, flops[, engine]); engine "simt" unless given.
KERNELS = {
    ("add", "map4_kernel<Op>"): lambda a: (f32(3 * a["n"]), a["n"]),
    ("add_inplace", "map4_kernel<Op>"): lambda a: (f32(3 * a["n"]), a["n"]),
    ("scale", "map4_kernel<Op>"): lambda a: (f32(2 * a["n"]), a["n"]),
    ("fill", "map4_kernel<Op>"): lambda a: (f32(a["n"]), 0),
    ("gelu_forward", "map4_kernel<Op>"): lambda a: (f32(2 * a["n"]), 10 * a["n"]),
    ("gelu_backward", "map4_kernel<Op>"): lambda a: (f32(3 * a["n"]), 15 * a["n"]),
    ("swiglu_forward", "map4_kernel<Op>"): lambda a: (f32(3 * a["n"]), 6 * a["n"]),
    ("swiglu_backward", "map4_kernel<Op>"): lambda a: (f32(5 * a["n"]), 10 * a["n"]),
    ("swiglu_forward_bf16", "map4_kernel<Op>"): lambda a: (f32(2 * a["n"]) + 2.0 * a["n"], 6 * a["n"]),
    ("swiglu_backward_bf16", "map4_kernel<Op>"):
        lambda a: (f32(3 * a["n"]) + 4.0 * a["n"], 10 * a["n"]),
    ("to_bf16", "map4_kernel<Op>"): lambda a: (6.0 * a["n"], a["n"]),
    ("to_float", "map4_kernel<Op>"): lambda a: (6.0 * a["n"], a["n"]),
    # param, grad, m, v read; param, m, v written; the bf16 copy written
    ("adamw_update", "map4_kernel<Op>"):
        lambda a: (f32(7 * a["n"]) + 2.0 * a["n"] * a.get("bf16_copy", 0), 15 * a["n"]),
    ("add_bias", "add_bias_kernel<4>"): lambda a: (f32(2 * a["m"] * a["n"] + a["n"]),
                                                   a["m"] * a["n"]),
    ("add_bias", "add_bias_kernel<1>"): lambda a: (f32(2 * a["m"] * a["n"] + a["n"]),
                                                   a["m"] * a["n"]),
    # sums over rows in blocks of about 512 rows (kernels.h, row_blocks), then
    # the blocks' partial sums added in block order
    ("add_column_sums", "column_sums_kernel"):
        lambda a: (f32(a["m"] * a["n"] + row_blocks(a["m"]) * a["n"]), a["m"] * a["n"]),
    ("add_column_sums", "add_row_block_partials_kernel"): lambda a: partials(a["m"], a["n"]),
    # the same pass writing dy rounded to bf16 (a layer's output gradient as its GEMM operand)
    ("to_bf16_column_sums", "column_sums_kernel"):
        lambda a: (f32(a["m"] * a["n"] + row_blocks(a["m"]) * a["n"]) + 2.0 * a["m"] * a["n"],
                   a["m"] * a["n"]),
    ("to_bf16_column_sums", "add_row_block_partials_kernel"): lambda a: partials(a["m"], a["n"]),
    # the gain's and the norm bias's sums in one launch (the model gives both)
    ("layernorm_backward_apply", "add_row_block_partials_kernel"):
        lambda a: times(2, partials(a["m"], a["c"])),
    ("layernorm_backward_apply_add", "add_row_block_partials_kernel"):
        lambda a: times(2, partials(a["m"], a["c"])),
    ("rmsnorm_backward_apply", "add_row_block_partials_kernel"): lambda a: partials(a["m"], a["c"]),
    # what cuBLASLt's epilogues leave to kernels (gemm.h): the bias, the bf16
    # rounding of a biased output (counted as that), GELU's backward
    ("linear_forward_fused", "add_bias_kernel<4>"):
        lambda a: (f32(2 * a["m"] * a["n"] + a["n"]), a["m"] * a["n"]),
    ("linear_forward_fused", "add_bias_kernel<1>"):
        lambda a: (f32(2 * a["m"] * a["n"] + a["n"]), a["m"] * a["n"]),
    ("linear_forward_fused", "map4_kernel<Op>"): lambda a: (6.0 * a["m"] * a["n"], a["m"] * a["n"]),
    ("linear_forward_fused", "map1_kernel<Op>"): lambda a: (6.0 * a["m"] * a["n"], a["m"] * a["n"]),
    ("linear_backward_input_dgelu", "map4_kernel<Op>"):
        lambda a: (f32(3 * a["m"] * a["k"]), 15 * a["m"] * a["k"]),
    # norms: row sums in double (two a row for LayerNorm), then the apply
    ("layernorm_row_sums", "row_sums_kernel<NS, Terms>"):
        lambda a: (f32(a["m"] * a["c"]) + 16.0 * a["m"], 3 * a["m"] * a["c"]),
    ("layernorm_apply", "layernorm_apply_kernel<float>"):
        lambda a: (f32(2 * a["m"] * a["c"] + 2 * a["c"] + 2 * a["m"]) + 16.0 * a["m"],
                   4 * a["m"] * a["c"]),
    # whole rows in one pass: x read once (the apply rereads the row the block
    # has just summed, from cache), the row sums, statistics and bf16 output written
    ("layernorm_rows_bf16", "layernorm_rows_kernel"):
        lambda a: (f32(a["m"] * a["c"] + 2 * a["c"] + 2 * a["m"]) + 2.0 * a["m"] * a["c"]
                   + 16.0 * a["m"], 7 * a["m"] * a["c"]),
    # the output written in bf16 only
    ("layernorm_apply_bf16", "layernorm_apply_kernel<bf16>"):
        lambda a: (f32(a["m"] * a["c"] + 2 * a["c"] + 2 * a["m"]) + 2.0 * a["m"] * a["c"]
                   + 16.0 * a["m"], 4 * a["m"] * a["c"]),
    ("layernorm_backward_sums", "row_sums_kernel<NS, Terms>"):
        lambda a: (f32(2 * a["m"] * a["c"] + 2 * a["m"] + a["c"]) + 16.0 * a["m"],
                   6 * a["m"] * a["c"]),
    ("layernorm_backward_apply", "norm_backward_apply_kernel<LnBackwardRows>"):
        lambda a: (f32(3 * a["m"] * a["c"] + 3 * a["m"] + 5 * a["c"]) + 16.0 * a["m"],
                   10 * a["m"] * a["c"]),
    # dx added to the residual's gradient: that read too
    ("layernorm_backward_apply_add", "norm_backward_apply_kernel<LnBackwardRows>"):
        lambda a: (f32(4 * a["m"] * a["c"] + 3 * a["m"] + 5 * a["c"]) + 16.0 * a["m"],
                   11 * a["m"] * a["c"]),
    # whole rows in one pass: dy and x read once (the apply rereads the row
    # the block has just summed, from cache), the residual's gradient read and
    # written, the row sums and each block of rows' gain and bias partials written
    # (<1>: a group of 4 columns a thread, up to 2048 columns; wider, up to 4)
    ("layernorm_backward_rows_add", "norm_backward_rows_kernel<Norm, 1>"): ln_backward_rows,
    ("layernorm_backward_rows_add", "norm_backward_rows_kernel<Norm, kOwnGroups>"):
        ln_backward_rows,
    ("layernorm_backward_rows_add", "add_row_block_partials_kernel"):
        lambda a: times(2, whole_row_partials(a)),
    # ... and the new residual gradient as the bf16 operand of the product
    # below, its bias sums a third set of partials (in the same launch)
    ("layernorm_backward_rows_add_bf16", "norm_backward_rows_kernel<Norm, 1>"):
        ln_backward_rows_bf16,
    ("layernorm_backward_rows_add_bf16", "norm_backward_rows_kernel<Norm, kOwnGroups>"):
        ln_backward_rows_bf16,
    ("layernorm_backward_rows_add_bf16", "add_row_block_partials_kernel"):
        lambda a: times(2 + a["bias"], whole_row_partials(a)),
    # RMSNorm's backward in one pass, as LayerNorm's (the gain's sums alone,
    # and the product's bias sums where it writes the bf16 operand with one)
    ("rmsnorm_backward_rows_add", "norm_backward_rows_kernel<Norm, 1>"): rms_backward_rows,
    ("rmsnorm_backward_rows_add", "norm_backward_rows_kernel<Norm, kOwnGroups>"):
        rms_backward_rows,
    ("rmsnorm_backward_rows_add", "add_row_block_partials_kernel"): whole_row_partials,
    ("rmsnorm_backward_rows_add_bf16", "norm_backward_rows_kernel<Norm, 1>"):
        rms_backward_rows_bf16,
    ("rmsnorm_backward_rows_add_bf16", "norm_backward_rows_kernel<Norm, kOwnGroups>"):
        rms_backward_rows_bf16,
    ("rmsnorm_backward_rows_add_bf16", "add_row_block_partials_kernel"):
        lambda a: times(1 + a["bias"], whole_row_partials(a)),
    ("rmsnorm_row_sums", "row_sums_kernel<NS, Terms>"):
        lambda a: (f32(a["m"] * a["c"]) + 8.0 * a["m"], 2 * a["m"] * a["c"]),
    # whole rows in one pass: x read once, the row sums and rstd, the bf16 output written
    ("rmsnorm_rows_bf16", "rmsnorm_rows_kernel"):
        lambda a: (f32(a["m"] * a["c"] + a["c"] + a["m"]) + 2.0 * a["m"] * a["c"] + 8.0 * a["m"],
                   3 * a["m"] * a["c"]),
    ("rmsnorm_apply", "rmsnorm_apply_kernel"):
        lambda a: (f32(2 * a["m"] * a["c"] + a["c"] + a["m"]) + 8.0 * a["m"], 3 * a["m"] * a["c"]),
    ("rmsnorm_backward_sums", "row_sums_kernel<NS, Terms>"):
        lambda a: (f32(2 * a["m"] * a["c"] + a["c"]) + 8.0 * a["m"], 4 * a["m"] * a["c"]),
    ("rmsnorm_backward_apply", "norm_backward_apply_kernel<RmsBackwardRows>"):
        lambda a: (f32(3 * a["m"] * a["c"] + a["m"] + 3 * a["c"]) + 8.0 * a["m"],
                   8 * a["m"] * a["c"]),
    # attention: q, k, v read; out and lse written (forward: QK^T and PV); the
    # backward's dq kernel recomputes S and dP and forms dq (3 products), its
    # dk/dv kernel recomputes S and dP and forms dv and dk (4)
    ("attention_forward", "forward_kernel<D, Out>"):
        tensor_attention(lambda a: attention(a, 2, 1, 3)),
    # the output written in bf16 (o's operand): half an fp32 output's bytes
    ("attention_forward_bf16", "forward_kernel<D, Out>"):
        tensor_attention(lambda a: attention(a, 2, 0.5, 3)),
    ("attention_forward", "forward_kernel<D, In>"):
        tensor_attention(lambda a: attention(a, 2, 1, 3)),
    # the backward's pre-pass: dO (fp32) and O read once; dO in bf16 and
    # D = rowsum(dO * O) written for both kernels
    ("attention_backward", "prepare_kernel"):
        lambda a: (f32(a["B"] * a["T"] * a["NH"] * a["hs"]) * (1 + elem(a, "out_bf16") / 4 + 0.5)
                   + f32(a["B"] * a["NH"] * a["T"]), 2 * a["B"] * a["T"] * a["NH"] * a["hs"]),
    ("attention_backward", "dq_kernel<D, Out>"): tensor_attention(lambda a: attention(a, 3, 2, 4)),
    ("attention_backward", "dq_kernel<D, In>"): tensor_attention(lambda a: attention(a, 3, 2, 4)),
    ("attention_backward", "dkv_kernel<D, Out>"): tensor_attention(lambda a: attention(a, 4, 3, 4)),
    ("attention_backward", "dkv_kernel<D, In>"): tensor_attention(lambda a: attention(a, 4, 3, 4)),
    # the same with the gradients written in bf16 (half an fp32 output's
    # bytes each) and each block's bias sums; then the runs of 64 rows added
    # in order
    ("attention_backward_bf16", "prepare_kernel"):
        lambda a: KERNELS[("attention_backward", "prepare_kernel")](a),
    ("attention_backward_bf16", "dq_kernel<D, Out>"):
        tensor_attention(lambda a: plus_bytes(attention(a, 3, 1.5, 4), f32(attention_runs(a) * a["NH"] * a["hs"]))),
    ("attention_backward_bf16", "dkv_kernel<D, Out>"):
        tensor_attention(lambda a: plus_bytes(attention(a, 4, 2, 4), f32(2 * attention_runs(a) * a["NKV"] * a["hs"]))),
    ("attention_backward_bf16", "add_run_sums_kernel"):
        lambda a: (f32((attention_runs(a) + 2) * (a["NH"] + 2 * a["NKV"]) * a["hs"]),
                   attention_runs(a) * (a["NH"] + 2 * a["NKV"]) * a["hs"]),
    ("rope_forward", "rope_kernel<Out>"): lambda a: rope(a),
    ("rope_backward", "rope_kernel<Out>"): lambda a: rope(a),
    ("rope_forward_bf16", "rope_kernel<Out>"): lambda a: rope_bf16(a),
    ("rope_backward_bf16", "rope_kernel<Out>"): lambda a: rope_bf16(a),
    # embeddings: rows gathered from the table; the backward adds dout's rows into it
    ("embedding_range_forward", "range_forward_kernel<bf16>"):
        lambda a: (a["m"] * a["C"] * 2.0 + f32(a["m"] * a["C"] + a["m"]), 0),
    ("embedding_range_forward", "range_forward_kernel<float>"):
        lambda a: (f32(2 * a["m"] * a["C"] + a["m"]), 0),
    ("embedding_range_backward", "scatter_rows_kernel"):
        lambda a: (f32(a["m"] * a["C"] + 2 * min(a["m"], a["rows"]) * a["C"] + a["m"]),
                   a["m"] * a["C"]),
    ("position_add", "position_add_kernel<bf16>"):
        lambda a: (f32(2 * a["m"] * a["C"]) + 2.0 * a["T"] * a["C"], a["m"] * a["C"]),
    ("position_add", "position_add_kernel<float>"):
        lambda a: (f32(2 * a["m"] * a["C"] + a["T"] * a["C"]), a["m"] * a["C"]),
    ("position_backward", "position_backward_kernel"):
        lambda a: (f32(a["m"] * a["C"] + 2 * a["T"] * a["C"]), a["m"] * a["C"]),
    # the loss: logits [rows, Vloc] read for the statistics, read and rewritten as dlogits
    ("ce_local_stats", "ce_local_stats_kernel"):
        lambda a: (f32(a["rows"] * a["Vloc"] + 6 * a["rows"]), 4 * a["rows"] * a["V"]),
    ("ce_combine", "ce_combine_kernel"): lambda a: (f32(6 * a["rows"] * a["parts"]), 0),
    ("ce_dlogits", "ce_dlogits_kernel<Out>"):
        lambda a: (f32(2 * a["rows"] * a["Vloc"] + 3 * a["rows"]), 4 * a["rows"] * a["V"]),
    # dlogits written in bf16 only (the head's backward GEMM operand)
    ("ce_dlogits_bf16", "ce_dlogits_kernel<Out>"):
        lambda a: (f32(a["rows"] * a["Vloc"] + 3 * a["rows"]) + 2.0 * a["rows"] * a["Vloc"],
                   4 * a["rows"] * a["V"]),
    # the statistics and the bf16 dlogits in one pass: each row read from memory
    # once (its re-reads hit the caches, as the statistics' two passes assume)
    ("ce_stats_dlogits_bf16", "ce_stats_dlogits_kernel"):
        lambda a: (f32(a["rows"] * a["Vloc"] + 6 * a["rows"]) + 2.0 * a["rows"] * a["Vloc"],
                   8 * a["rows"] * a["V"]),
    # reductions returning a value to the host: a pass over n, then one block
    ("sum_squares_tensors", "sum_squares_tensors_kernel"): lambda a: (f32(a["n"]), 2 * a["n"]),
    ("sum_squares_tensors", "sum_partials_kernel"): lambda a: (8.0 * 1024, 0),
    # AdamW over the table of tensors: as adamw_update, the bf16 copy of the values below
    # low_count (bf16_copy) written too
    ("adamw_update_tensors", "adamw_tensors_kernel"):
        lambda a: (f32(7 * a["n"]) + 2.0 * a.get("bf16_copy", 0), 15 * a["n"]),
    ("sum_squares", "sum_squares_kernel"): lambda a: (f32(a["n"]), 2 * a["n"]),
    ("sum_squares", "sum_partials_kernel"): lambda a: (8.0 * 1024, 0),
    ("count_nonfinite", "count_nonfinite_kernel"): lambda a: (f32(a["n"]), a["n"]),
    ("count_nonfinite", "sum_counts_kernel"): lambda a: (8.0 * 1024, 0),
    ("copy_rows", "copy_rows_kernel<4>"): lambda a: (f32(2 * a["rows"] * a["cols"]), 0),
    ("copy_rows", "copy_rows_kernel<1>"): lambda a: (f32(2 * a["rows"] * a["cols"]), 0),
    ("interleave_vocab_parts", "interleave_vocab_parts_kernel"):
        lambda a: (f32(2 * a["m"] * a["V"]), 0),
}


def rows_fallback(norm, bf16):
    """The separate kernels a norm's one-pass backward falls back to (norm.cu,
    launch_backward_rows: too few rows for its blocks' partials, or rows wider
    than a block keeps), by kernel: the row sums, the apply (added into the
    residual's gradient), the sums of its partials, and with bf16 the
    rounding for the product below, its bias sums where it has one. Two
    launches of one kernel that cost differently count their average."""
    def mean(first, second):
        return tuple((x + y) / 2 for x, y in zip(first, second))

    def to_low(a):  # the new residual gradient rounded to bf16 (no bias to sum)
        return KERNELS[("to_bf16", "map4_kernel<Op>")]({"n": a["m"] * a["c"]})

    def column_sums(a):
        return KERNELS[("to_bf16_column_sums", "column_sums_kernel")]({"m": a["m"], "n": a["c"]})

    if norm == "layernorm":
        def sums_of_partials(a):  # the gain's and bias's, then the product's bias
            two = times(2, partials(a["m"], a["c"]))
            return mean(two, partials(a["m"], a["c"])) if bf16 and a["bias"] else two
        return {
            "row_sums_kernel<NS, Terms>": KERNELS[("layernorm_backward_sums",
                                                   "row_sums_kernel<NS, Terms>")],
            "norm_backward_apply_kernel<LnBackwardRows>": KERNELS[(
                "layernorm_backward_apply_add", "norm_backward_apply_kernel<LnBackwardRows>")],
            "add_row_block_partials_kernel": sums_of_partials,
            "column_sums_kernel": column_sums,
            "map4_kernel<Op>": to_low,
        }

    def maps(a):  # the apply's output added into the residual's gradient, then rounded
        add = KERNELS[("add_inplace", "map4_kernel<Op>")]({"n": a["m"] * a["c"]})
        return mean(add, to_low(a)) if bf16 and not a["bias"] else add
    return {
        "row_sums_kernel<NS, Terms>": KERNELS[("rmsnorm_backward_sums",
                                               "row_sums_kernel<NS, Terms>")],
        "norm_backward_apply_kernel<RmsBackwardRows>": KERNELS[(
            "rmsnorm_backward_apply", "norm_backward_apply_kernel<RmsBackwardRows>")],
        "add_row_block_partials_kernel": lambda a: partials(a["m"], a["c"]),
        "column_sums_kernel": column_sums,
        "map4_kernel<Op>": maps,
    }


ROWS_FALLBACK = {
    "layernorm_backward_rows_add": rows_fallback("layernorm", False),
    "layernorm_backward_rows_add_bf16": rows_fallback("layernorm", True),
    "rmsnorm_backward_rows_add": rows_fallback("rmsnorm", False),
    "rmsnorm_backward_rows_add_bf16": rows_fallback("rmsnorm", True),
}


class Row:
    def __init__(self):
        self.launches = self.bytes = self.flops = self.seconds = 0.0
        self.syncs = 0


def launch_cost(bytes_, flops, engine, peak, bw, overhead):
    rate = {"tensor": peak, "tf32": TF32_DENSE, "simt": SIMT_FP32}[engine]
    return max(flops / rate, bytes_ / bw) + overhead


def family(op, kernel):
    return f"{op}: {kernel}"


def cost_entry(e, rows, peak, bw, o):
    """Adds op entry e's launches, copies and syncs to rows (by family) at the machine's rates."""
    def row(name):
        return rows.setdefault(name, Row())
    args = e["args"]
    # a norm's backward that fell back from its one pass to the separate kernels
    fallback = e["op"] in ROWS_FALLBACK and "row_sums_kernel<NS, Terms>" in e["kernels"]
    for kernel, n in e["kernels"].items():
        f = ROWS_FALLBACK[e["op"]].get(kernel) if fallback else KERNELS.get((e["op"], kernel))
        if f is None:
            sys.exit(f"step_roofline: no formula for kernel '{kernel}' launched by op '{e['op']}' "
                     f"(sizes {args}); add its bytes and flops to KERNELS in {__file__}")
        got = f(args)
        b, fl, engine = got[0], got[1], got[2] if len(got) > 2 else "simt"
        r = row(family(e["op"], kernel))
        r.launches += n
        r.bytes += n * b
        r.flops += n * fl
        r.seconds += n * launch_cost(b, fl, engine, peak, bw, o.overhead_us * 1e-6)
    for m in e["matmuls"]:
        n = m["count"]
        fl = 2.0 * m["m"] * m["n"] * m["k"]
        # an epilogue's aux buffer [m, n]: GELU's input written, or DGELU's read
        b = (m["m"] * m["k"] * m["a"] + m["k"] * m["n"] * m["b"] +
             m["m"] * m["n"] * (m["d"] * (2 if m["accumulate"] else 1) + m.get("aux", 0)))
        engine = "tensor" if m["a"] == 2 else "tf32"
        r = row(family(e["op"], "cuBLASLt"))
        r.launches += n
        r.bytes += n * b
        r.flops += n * fl
        r.seconds += n * launch_cost(b, fl, engine, peak, bw, o.overhead_us * 1e-6)
    for kind, c in e["copies"].items():
        r = row(f"{e['op']}: copy {kind}")
        r.launches += c["count"]
        r.bytes += c["bytes"]
        rate = bw / 2 if kind == "d2d" else PCIE
        r.seconds += c["bytes"] / rate + c["count"] * o.overhead_us * 1e-6
    if e["memsets"]["count"]:
        r = row(f"{e['op']}: memset")
        r.launches += e["memsets"]["count"]
        r.bytes += e["memsets"]["bytes"]
        r.seconds += e["memsets"]["bytes"] / bw + e["memsets"]["count"] * o.overhead_us * 1e-6
    syncs = sum(e["syncs"].values())
    if syncs:
        r = row(f"{e['op']}: host synchronisations")
        r.syncs += syncs
        r.seconds += syncs * o.sync_us * 1e-6


def part_group(part):
    """Layers' parts summed: 'layer 3 forward' -> 'layers forward'."""
    words = part.split()
    if len(words) == 3 and words[0] == "layer" and words[1].isdigit():
        return f"layers {words[2]}"
    return part


def model(anatomy, name, peak, bw, o):
    step = anatomy["later_step"]
    families, parts = {}, {}
    for e in step["ops"]:
        mine = {}
        cost_entry(e, mine, peak, bw, o)
        for k, r in mine.items():
            for table, key in ((families, k), (parts, part_group(e["part"]))):
                t = table.setdefault(key, Row())
                t.launches += r.launches
                t.bytes += r.bytes
                t.flops += r.flops
                t.seconds += r.seconds
                t.syncs += r.syncs
    return families, parts


def print_table(title, table, total):
    print(f"  {title:<58} {'launches':>8} {'syncs':>6} {'GB':>8} {'GFLOP':>9} {'ms':>8} {'%':>5}")
    for k, r in sorted(table.items(), key=lambda kv: -kv[1].seconds):
        print(f"  {k[:58]:<58} {r.launches:8.0f} {r.syncs:6d} {r.bytes / 1e9:8.3f} "
              f"{r.flops / 1e9:9.1f} {r.seconds * 1e3:8.3f} {100 * r.seconds / total:5.1f}")


def print_counts(a):
    """The counts themselves: per step (first and later) and per layer."""
    for which in ("first_step", "later_step"):
        t = a[which]["total"]
        copies = ", ".join(f"{c['count']} {k}" for k, c in sorted(t["copies"].items()))
        print(f"  {which.replace('_', ' ')}: {t['launches']} launches ({t['kernels']} kernels, "
              f"{t['matmuls']} products), {t['syncs']} host synchronisations, "
              f"{t['allocations']} allocations ({t['allocation_bytes']} bytes), {t['frees']} frees,"
              f" copies {copies or 'none'}")
    per_layer = {}
    for part, t in a["later_step"]["by_part"].items():
        group = part_group(part)
        if group != part:
            per_layer.setdefault(group, set()).add((t["launches"], t["matmuls"], t["syncs"]))
    for group, counts in sorted(per_layer.items()):
        text = " or ".join(f"{n} launches ({m} products), {s} syncs" for n, m, s in sorted(counts))
        print(f"  per layer, {group.split()[1]}: {text}")


def report(path, o):
    with open(path) as f:
        bench = json.load(f)
    a = bench.get("anatomy", bench)
    if "later_step" not in a:
        sys.exit(f"step_roofline: {path} has no anatomy (run bench step --anatomy --json)")
    cfg = a["config"]
    tokens = cfg["B"] * cfg["T"]
    model_flops = a["train_flops_per_token"] * tokens
    counted = "counted without running" if a["later_step"].get("count_only") else "counted"
    print(f"{bench.get('model', '?')} {cfg['precision']} B{cfg['B']} T{cfg['T']} "
          f"(L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']}), the last of "
          f"{a['steps_counted']} steps {counted} on the emulated GPU. "
          f"A model, not a measurement: launch overhead {o.overhead_us:g} us, "
          f"host synchronisation {o.sync_us:g} us each (assumptions).")
    print_counts(a)
    out = {}
    for name, peak, bw, source in MACHINES[o.gpu]:
        families, parts = model(a, name, peak, bw, o)
        total = sum(r.seconds for r in families.values())
        mfu = model_flops / (total * DENSE_PEAK)
        print(f"\n {name} ({source}):")
        print_table("where the time goes, by op and kernel", families, total)
        print()
        print_table("by part of the step", parts, total)
        of_rate = "" if peak == DENSE_PEAK else \
            f" ({100 * model_flops / (total * peak):.1f}% of the {peak / 1e12:.0f} measured)"
        print(f"  step {total * 1e3:.2f} ms, {tokens / total:,.0f} tokens/s, model "
              f"{model_flops / 1e12:.2f} TFLOP: MFU {100 * mfu:.1f}% of the "
              f"{DENSE_PEAK / 1e12:.0f} TFLOP/s dense bf16 peak{of_rate}")
        out[name] = {"step_ms": total * 1e3, "tokens_per_s": tokens / total, "mfu": mfu}
    return out


def compare(a, path, o):
    """The model at the measured rates beside a GPU's profile, by part."""
    with open(path) as f:
        prof = json.load(f)
    cfg = a["config"]
    shape = (prof.get("batch"), prof.get("seq"), prof.get("precision"))
    if shape != (cfg["B"], cfg["T"], cfg["precision"]):
        print(f"\n (the profile's batch, sequence and precision {shape} differ from the "
              f"anatomy's: the parts below do not compare)")
    # The measured rates of the GPU the profile ran on, where its name says.
    device = prof.get("device", "")
    gpu = next((g for g in MACHINES if g.upper() in device.upper()), o.gpu)
    name, peak, bw, _ = MACHINES[gpu][1]
    _, parts = model(a, name, peak, bw, o)
    measured = {p["part"]: p for p in prof["parts"]}
    print(f"\n the model at {name} rates against {path} ({prof.get('device', '?')}, "
          f"{prof['steps']} steps measured), per step (launches: kernels, products, copies and "
          f"memsets):")
    print(f"  {'part':<40} {'launches':>8} {'measured':>8} {'model ms':>9} {'measured':>9} "
          f"{'ratio':>6}")
    keys = sorted(set(parts) | set(measured), key=lambda k: -(parts[k].seconds if k in parts else 0))
    total_model = 0.0
    for k in keys:
        r = parts.get(k, Row())
        mp = measured.get(k, {"launches": 0, "ms": 0.0})
        issued = mp["launches"] + mp.get("copies", 0) + mp.get("memsets", 0)
        ms = r.seconds * 1e3
        total_model += ms
        ratio = f"{mp['ms'] / ms:6.2f}" if ms > 0 else "     -"
        print(f"  {k[:40]:<40} {r.launches:8.0f} {issued:8.0f} {ms:9.3f} "
              f"{mp['ms']:9.3f} {ratio}")
    print(f"  step: model {total_model:.2f} ms; measured {prof['step_ms']:.2f} ms, the device "
          f"busy {prof['device_busy_ms']:.2f} ms of it (kernels {prof['kernel_ms']:.2f} ms)")
    return {"model_ms": total_model, "measured_ms": prof["step_ms"],
            "device_busy_ms": prof["device_busy_ms"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("anatomy", nargs="+", help="bench step --anatomy --json output")
    p.add_argument("--overhead-us", type=float, default=3.0, help="per launch or copy (assumed)")
    p.add_argument("--sync-us", type=float, default=10.0, help="per host synchronisation (assumed)")
    p.add_argument("--json", help="also write the step times and MFU here")
    p.add_argument("--gpu", choices=sorted(MACHINES), default="h200",
                   help="whose datasheet and measured rates (--measured: the profile's GPU "
                   "where its device names one)")
    p.add_argument("--measured", help="a GPU's bench step --profile of the same model and shape "
                   "(one anatomy only)")
    o = p.parse_args()
    if o.measured and len(o.anatomy) != 1:
        sys.exit("step_roofline: --measured compares with one anatomy; give one")
    results = {}
    for i, path in enumerate(o.anatomy):
        if i:
            print()
        results[path] = report(path, o)
        if o.measured:
            with open(path) as f:
                bench = json.load(f)
            results[path]["measured"] = compare(bench.get("anatomy", bench), o.measured, o)
    if o.json:
        with open(o.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
