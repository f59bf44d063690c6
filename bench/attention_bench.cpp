// Causal attention forward and backward on one backend, in fp32 or with bf16
// operands, at a training step's shape (B sequences of T positions, NH query
// heads sharing NKV key/value heads of size hs). Checks the device's results
// against the CPU backend's first (the first sequence, same inputs), then
// times each pass (median of several, after a warm-up; the host waits for the
// device before reading the clock) and prints milliseconds and TFLOP/s; with
// bf16 operands, the backward again writing bf16 gradients with their bias
// sums (attention_backward_bf16, the model's form).
// FLOPs count the causal half of the products: forward 2 (Q K^T and P V),
// backward 5 (S and dP recomputed with dQ, dK and dV), each 2 B NH T^2 hs / 2.
//   attention_bench [device] [precision] [B] [T] [NH] [NKV] [hs]
//   (defaults: auto bf16 16 1024 12 12 64: GPT-2 124M at B16 T1024)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/rng.h"

using namespace dendrite;

namespace {

double median_seconds(Backend& be, const std::function<void()>& f) {
  f();  // warm up (and set the kernels' shared memory)
  be.ready_for_host();
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.ready_for_host();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Inputs {  // one backend's copies of q, k, v, dout, the output and the gradients
  Inputs(Backend& be, const ops::AttentionShape& s, bool low, const std::vector<float>& q,
         const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout)
      : be(be), s(s), low(low) {
    Q = put(q), K = put(k), V = put(v), DO = put(dout);
    Qh = be.alloc<bf16>(int64_t(q.size())), Kh = be.alloc<bf16>(int64_t(k.size()));
    Vh = be.alloc<bf16>(int64_t(v.size())), Oh = be.alloc<bf16>(int64_t(dout.size()));
    be.to_bf16(Qh.data(), Q.data(), int64_t(q.size()));
    be.to_bf16(Kh.data(), K.data(), int64_t(k.size()));
    be.to_bf16(Vh.data(), V.data(), int64_t(v.size()));
    O = be.alloc<float>(int64_t(dout.size()));
    L = be.alloc<float>(int64_t(s.B) * s.NH * s.T);
    DQ = be.alloc<float>(int64_t(q.size())), DK = be.alloc<float>(int64_t(k.size()));
    DV = be.alloc<float>(int64_t(v.size()));
  }
  // bf16 only: the gradients as the products' bf16 operands with their bias
  // sums (attention_backward_bf16), the model's form under bf16 (GPT-2).
  void backward_bf16() {
    if (!DQh.size()) {
      DQh = be.alloc<bf16>(int64_t(DQ.size())), DKh = be.alloc<bf16>(int64_t(DK.size()));
      DVh = be.alloc<bf16>(int64_t(DV.size()));
      Db = be.alloc<float>(int64_t(s.NH + 2 * s.NKV) * s.hs);
      be.fill(Db.data(), 0.0f, int64_t(Db.size()));
    }
    ops::AttentionGradsBf16 g{DQh.data(), DKh.data(), DVh.data(), DQ.data(), DK.data(), DV.data()};
    g.db_q = Db.data(), g.db_k = g.db_q + s.NH * s.hs, g.db_v = g.db_k + s.NKV * s.hs;
    be.attention_backward_bf16(g, DO.data(), Oh.data(), L.data(), Qh.data(), Kh.data(), Vh.data(),
                               s);
  }
  Buffer<float> put(const std::vector<float>& h) {
    Buffer<float> b = be.alloc<float>(int64_t(h.size()));
    be.upload(b.data(), h.data(), h.size() * sizeof(float));
    return b;
  }
  Operand op(Buffer<float>& f, Buffer<bf16>& h) {
    return low ? Operand(h.data()) : Operand(f.data());
  }
  void forward() {
    be.attention_forward(O.data(), L.data(), op(Q, Qh), op(K, Kh), op(V, Vh), s);
    if (low)
      be.to_bf16(Oh.data(), O.data(),
                 int64_t(O.size()));  // the saved output, as the model keeps it
  }
  void backward() {
    be.attention_backward(DQ.data(), DK.data(), DV.data(), DO.data(), op(O, Oh), L.data(),
                          op(Q, Qh), op(K, Kh), op(V, Vh), s);
  }
  std::vector<float> get(const Buffer<float>& b) {
    std::vector<float> h(size_t(b.size()));
    be.download(h.data(), b.data(), h.size() * sizeof(float));
    return h;
  }
  Backend& be;
  ops::AttentionShape s;
  bool low;
  Buffer<float> Q, K, V, DO, O, L, DQ, DK, DV;
  Buffer<bf16> Qh, Kh, Vh, Oh, DQh, DKh, DVh;
  Buffer<float> Db;
};

std::vector<float> random(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(random_normal(3, stream, i));
  return v;
}

// The largest |a - b| over the largest |b| (b: the CPU's).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, const char* fallback) {
    return std::string(argc > i ? argv[i] : fallback);
  };
  const Device device = resolve_device(arg(1, "auto"));
  const bool low = arg(2, "bf16") == "bf16";
  const int B = std::atoi(arg(3, "16").c_str()), T = std::atoi(arg(4, "1024").c_str());
  const int NH = std::atoi(arg(5, "12").c_str()), NKV = std::atoi(arg(6, "12").c_str());
  const int hs = std::atoi(arg(7, "64").c_str());
  if (B < 1 || T < 1 || NH < 1 || NKV < 1 || hs < 1 || NH % NKV != 0) {
    std::fprintf(stderr, "attention_bench: need positive sizes with NH a multiple of NKV\n");
    return 2;
  }
  const ops::AttentionShape s{B, T, NH, NKV, hs, NH * hs, NKV * hs, NH * hs};
  const size_t rows = size_t(B) * T;
  const auto q = random(rows * s.q_stride, 1), k = random(rows * s.kv_stride, 2),
             v = random(rows * s.kv_stride, 3), dout = random(rows * s.out_stride, 4);
  std::unique_ptr<Backend> be = make_backend(device);
  Inputs x(*be, s, low, q, k, v, dout);
  std::printf("attention_bench: %s, %s, B=%d T=%d NH=%d NKV=%d hs=%d\n", be->describe().c_str(),
              low ? "bf16" : "fp32", B, T, NH, NKV, hs);

  // The first sequence against the CPU backend.
  {
    ops::AttentionShape s1 = s;
    s1.B = 1;
    const size_t r1 = size_t(T);
    auto head = [&](const std::vector<float>& a, int stride) {
      return std::vector<float>(a.begin(), a.begin() + r1 * stride);
    };
    std::unique_ptr<Backend> cpu = make_backend(Device::kCpu);
    Inputs c(*cpu, s1, low, head(q, s.q_stride), head(k, s.kv_stride), head(v, s.kv_stride),
             head(dout, s.out_stride));
    Inputs d(*be, s1, low, head(q, s.q_stride), head(k, s.kv_stride), head(v, s.kv_stride),
             head(dout, s.out_stride));
    c.forward(), c.backward(), d.forward(), d.backward();
    const double worst = std::max(
        {relative_error(d.get(d.O), c.get(c.O)), relative_error(d.get(d.DQ), c.get(c.DQ)),
         relative_error(d.get(d.DK), c.get(c.DK)), relative_error(d.get(d.DV), c.get(c.DV))});
    std::printf("check: largest difference from the CPU backend %.2e of the largest value\n",
                worst);
    if (!(worst < (low ? 5e-2 : 1e-3))) {
      std::fprintf(stderr, "attention_bench: results differ from the CPU backend's\n");
      return 1;
    }
  }

  const double unit = 2.0 * B * NH * double(T) * T * hs / 2;  // one causal product
  const double fwd = median_seconds(*be, [&] { x.forward(); });
  const double bwd = median_seconds(*be, [&] { x.backward(); });
  std::printf("forward  %8.3f ms  %8.3f TFLOP/s\n", fwd * 1e3, 2 * unit / fwd / 1e12);
  std::printf("backward %8.3f ms  %8.3f TFLOP/s\n", bwd * 1e3, 5 * unit / bwd / 1e12);
  if (low) {
    const double b16 = median_seconds(*be, [&] { x.backward_bf16(); });
    std::printf("backward, bf16 gradients with bias sums %8.3f ms  %8.3f TFLOP/s\n", b16 * 1e3,
                5 * unit / b16 / 1e12);
  }
}
