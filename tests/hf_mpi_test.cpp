// Hugging Face folders on every process grid of 1, 2, 4 and 8 ranks (under
// `mpirun -np 8`, like parallel_mpi_test.cpp): each rank reads the parts of
// the weights its shards hold, and the logits of its rows equal the ones
// transformers computed, within 1e-5 relative, as on one process
// (hf_test.cpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "backend_support.h"
#include "dendrite/comm/grid.h"
#include "dendrite/io/hf_folder.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "grid_support.h"
#include "hf_support.h"

namespace dendrite {
namespace {

class HfOnEveryGrid : public ::testing::TestWithParam<const char*> {};

TEST_P(HfOnEveryGrid, LogitsMatchTransformers) {
  const HfFolder folder(test::hf_dir(GetParam()));
  const ModelConfig& c = folder.config();
  const test::HfReference ref = test::load_hf_reference(GetParam());
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int tested = 0;
  // The bytes one process reads: every element once.
  int64_t whole = 0;
  {
    auto one = ProcessGrid::single();
    Transformer model(c, *one, test::cpu_backend(), ref.B, ref.T);
    const int64_t before = folder.bytes_read();
    load_hf_folder(folder, model);
    whole = folder.bytes_read() - before;
  }
  for (int P : {1, 2, 4, 8}) {
    if (world % P != 0) continue;
    const auto sub = test::group_of(P);
    for (const GridShape& g : test::grids_of(P)) {
      if (c.n_embd % g.x || c.n_head % g.y || c.n_kv_head % g.y || c.ffn_hidden % g.y ||
          ref.B % (g.d * g.z))
        continue;
      ProcessGrid grid(g, *sub);
      Transformer model(c, grid, test::cpu_backend(), ref.B, ref.T);
      const int64_t before = folder.bytes_read();
      load_hf_folder(folder, model);
      // Each rank reads the elements of its shards: the x y z model-parallel
      // ranks share the matrices; the vectors (norms, biases), a few percent
      // of these models, are split over X or Y only.
      const double share = double(folder.bytes_read() - before) / double(whole);
      EXPECT_LE(share, 1.0 / (g.x * g.y * g.z) + 0.1) << GetParam() << " on grid " << g.str();
      const int B_loc = model.local_batch(ref.B), first = model.first_sequence(ref.B);
      std::vector<float> logits(size_t(B_loc) * ref.T * ref.V);
      model.logits(ref.tokens.data() + size_t(first) * ref.T, ref.B, ref.T, logits.data());
      EXPECT_LE(test::worst_logit_error(logits, ref, first * ref.T, B_loc * ref.T, 1e-5), 1.0)
          << GetParam() << " on grid " << g.str();
      ++tested;
    }
  }
  EXPECT_GT(tested, 10);
}

INSTANTIATE_TEST_SUITE_P(Reference, HfOnEveryGrid,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tiny-fp16"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace dendrite
