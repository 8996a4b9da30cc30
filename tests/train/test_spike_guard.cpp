// The loss-spike guard (train/spike_guard.h): z-scores against a float64 formula, a lasting change of level
// absorbed within one window, and its state round-tripping through a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "train/spike_guard.h"

namespace inkstone {
namespace {

TEST(SpikeGuard, SkipsAnUpwardOutlierOfTheWindowAndAbsorbsALastingShift) {
  SpikeGuard guard(/*window=*/5, /*loss_z=*/4, /*grad_z=*/0);
  const std::vector<double> calm = {1.0, 1.1, 0.9, 1.0, 1.05};
  for (double v : calm) EXPECT_FALSE(guard.check(v, 1.0).skip);  // the window fills: nothing to judge against

  // z of 3.0 against the window, population standard deviation.
  double mean = 0, variance = 0;
  for (double v : calm) mean += v / 5;
  for (double v : calm) variance += (v - mean) * (v - mean) / 5;
  const SpikeVerdict spike = guard.check(3.0, 1.0);
  EXPECT_TRUE(spike.skip);
  EXPECT_NEAR(spike.loss_z, (3.0 - mean) / std::sqrt(variance), 1e-12);
  EXPECT_EQ(spike.grad_z, 0.0);  // a flat window

  // The skipped value joined the window: the same level again is no longer an outlier (a lasting change of level
  // costs one skipped update, not a stopped run).
  for (int k = 0; k < 10; ++k) EXPECT_FALSE(guard.check(3.0, 1.0).skip) << k;
  EXPECT_FALSE(guard.check(-100.0, 1.0).skip);  // downward moves are never spikes
}

TEST(SpikeGuard, GradientNormCheckAndStateRoundTrip) {
  SpikeGuard guard(4, 0, 3);
  for (double g : {1.0, 1.2, 0.8, 1.0}) guard.check(5.0, g);
  SpikeGuard restored(4, 0, 3);
  restored.restore(guard.state(), "state.json");
  EXPECT_EQ(restored.state(), guard.state());
  EXPECT_TRUE(restored.check(5.0, 10.0).skip);
  EXPECT_FALSE(SpikeGuard(4, 0, 0).check(5.0, 1e9).skip);  // both checks off

  try {
    restored.restore({{"losses", "x"}}, "step 3");
    FAIL() << "a malformed state was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3: spike_guard state: key 'losses' must be an array, not a string"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace inkstone
