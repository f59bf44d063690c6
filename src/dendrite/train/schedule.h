// The learning-rate schedule of `dendrite train`: linear warmup, then cosine
// decay to a floor (the GPT-2/3 and Llama recipe).
#pragma once

namespace dendrite {

// Learning rate at `step` (counting from 0):
//   step < warmup:  lr * (step + 1) / warmup
//   otherwise:      min_lr + 0.5 (lr - min_lr) (1 + cos(pi p)),
//                   p = clamp((step - warmup) / max(1, total - warmup), 0, 1)
float lr_at(int step, float lr, float min_lr, int warmup, int total);

}  // namespace dendrite
