// Precompiled header: the libtorch and standard headers most translation units need.
#pragma once
#include <torch/torch.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <map>
#include <memory>
#include <functional>
#include <optional>
