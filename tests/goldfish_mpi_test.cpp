// Goldfish loss on every process grid of 1, 2, 4 and 8 ranks against one
// process (DESIGN.md section 7): each rank masks its own sequences, the
// supervised counts of the ranks that hold different data (Z and D) add up to
// the count of the whole global batch, and the loss and every gathered
// gradient of one step match the single-process step with the same mask.
// Runs under `mpirun -np 8` like parallel_mpi_test.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "dendrite/comm/grid.h"
#include "grid_support.h"
#include "dendrite/core/rng.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/goldfish.h"
#include "backend_support.h"

namespace dendrite {
namespace {

constexpr int kB = 8, kT = 32, kV = 96;

struct Step {
  double loss = 0;
  int64_t supervised = 0;  // summed over the ranks of different data
  std::vector<float> mask;  // this rank's sequences
  std::vector<std::vector<float>> grads;  // global gradient of every tensor
};

Step one_step(const ModelConfig& cfg, ProcessGrid& grid, const GoldfishOptions& g) {
  Transformer model(cfg, grid, test::cpu_backend(), kB, kT);
  model.init(3);
  std::vector<int32_t> in(kB * kT), tg(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    in[i] = int32_t(random_bits(1, 1, i) % kV);
    tg[i] = int32_t(random_bits(1, 2, i) % kV);
  }
  const int B_loc = model.local_batch(kB);
  const size_t first = size_t(model.first_sequence(kB)) * kT;
  Step s;
  s.mask.resize(size_t(B_loc) * kT);
  double kept = double(goldfish_weights(g, tg.data() + first, B_loc, kT, s.mask.data()));
  grid.Z().all_reduce(&kept, 1);
  grid.D().all_reduce(&kept, 1);
  s.supervised = int64_t(kept);
  model.zero_grads();
  s.loss = model.forward_backward(in.data() + first, tg.data() + first, s.mask.data(), kept, kB, kT);
  for (const ParamSpec& p : model.table().specs()) {
    s.grads.emplace_back(size_t(p.global_rows() * p.global_cols()));
    gather_global(grid, p, model.grads(), s.grads.back().data());
  }
  return s;
}

TEST(GoldfishGrid, MasksAndLossesMatchOneProcess) {
  const ModelConfig cfg = model_config_from_json(nlohmann::json{
      {"arch", "gpt2"}, {"vocab_size", kV}, {"n_layer", 1}, {"n_embd", 32}, {"n_head", 8},
      {"block_size", kT}});
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  for (const char* text : {"k=4,h=13,mode=hash,seed=5", "k=3,mode=static"}) {
    const GoldfishOptions g = GoldfishOptions::parse(text);
    auto single = ProcessGrid::single();
    const Step want = one_step(cfg, *single, g);
    ASSERT_LT(want.supervised, kB * kT);
    int tested = 0;
    for (int P : {1, 2, 4, 8}) {
      if (world_size % P != 0) continue;
      const auto sub = test::group_of(P);
      for (const GridShape& shape : test::grids_of(P)) {
        if (cfg.n_embd % shape.x || cfg.n_head % shape.y || kB % (shape.d * shape.z)) continue;
        ProcessGrid grid(shape, *sub);
        const Step got = one_step(cfg, grid, g);
        const std::string where = std::string(text) + " on grid " + shape.str();
        const size_t first = size_t((grid.d() * shape.z + grid.z()) * (kB / (shape.d * shape.z))) * kT;
        EXPECT_TRUE(std::equal(got.mask.begin(), got.mask.end(), want.mask.begin() + first)) << where;
        EXPECT_EQ(got.supervised, want.supervised) << where;
        EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss) << where;
        double global = 0;
        for (auto& t : want.grads)
          for (float v : t) global = std::max(global, double(std::fabs(v)));
        for (size_t t = 0; t < want.grads.size(); ++t) {
          // Relative to the tensor's largest value, at least 1e-3 of the model's
          // (GPT-2's key bias has an exactly zero gradient).
          double diff = 0, scale = 1e-3 * global;
          for (size_t j = 0; j < want.grads[t].size(); ++j) {
            diff = std::max(diff, double(std::fabs(got.grads[t][j] - want.grads[t][j])));
            scale = std::max(scale, double(std::fabs(want.grads[t][j])));
          }
          EXPECT_LE(diff, 1e-5 * scale) << where << ", tensor " << t;
        }
        ++tested;
      }
    }
    EXPECT_EQ(tested, 35) << text;  // every grid of 1, 2, 4 and 8 ranks
  }
}

}  // namespace
}  // namespace dendrite
