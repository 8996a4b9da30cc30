// Shared GoogleTest entry point: one libtorch thread so results are reproducible across machines.
#include <gtest/gtest.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
