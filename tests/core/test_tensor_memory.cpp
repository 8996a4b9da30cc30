// Counting live CPU tensor bytes (core/tensor_memory.h). Each test runs in a process of its own (ctest), so
// counting starts before the test's first tensor.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/tensor_memory.h"

namespace inkstone {
namespace {

TEST(TensorMemory, CountsLiveAndPeakBytesOfCpuTensors) {
  count_cpu_tensor_memory();
  ASSERT_TRUE(counting_cpu_tensor_memory());
  const double base = cpu_tensor_live_mib();
  {
    auto one = torch::empty({1 << 18});        // 1 MiB of float32
    auto two = torch::empty({1 << 18}, torch::kDouble);  // 2 MiB
    EXPECT_DOUBLE_EQ(cpu_tensor_live_mib() - base, 3.0);
    auto view = one.view({512, 512});  // shares the storage: nothing new
    EXPECT_DOUBLE_EQ(cpu_tensor_live_mib() - base, 3.0);
  }
  EXPECT_DOUBLE_EQ(cpu_tensor_live_mib(), base);
  EXPECT_GE(cpu_tensor_peak_mib() - base, 3.0);
  reset_cpu_tensor_peak();
  EXPECT_DOUBLE_EQ(cpu_tensor_peak_mib(), cpu_tensor_live_mib());

  // What an op allocates counts, including what autograd keeps for backward: y = x.exp() saves its 1 MiB output.
  auto x = torch::ones({1 << 18}, torch::requires_grad());
  const double before = cpu_tensor_live_mib();
  auto y = x.exp();
  EXPECT_DOUBLE_EQ(cpu_tensor_live_mib() - before, 1.0);
  y.sum().backward();
  EXPECT_DOUBLE_EQ(cpu_tensor_live_mib() - before, 2.0);  // y and x.grad
}

}  // namespace
}  // namespace inkstone
