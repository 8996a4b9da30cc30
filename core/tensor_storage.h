// A tensor's memory without the tensor: ZeRO stage 3 (docs/training.md, "ZeRO") frees a foreign weight's storage
// between uses and allocates it again before the next, while the tensor object (sizes, strides, autograd identity,
// version counter) stays, so everything that refers to it still does.
#pragma once
#include <torch/types.h>

namespace inkstone {

// Whether freeing t's storage frees exactly t: contiguous from offset 0, covering the whole storage, from an
// allocator (not foreign memory).
bool owns_whole_storage(const torch::Tensor& t);
// Gives t's memory back to its allocator; reading t afterwards is undefined until allocate_storage.
void free_storage(const torch::Tensor& t);
// New, uninitialised memory for t (a no-op if it has its memory).
void allocate_storage(const torch::Tensor& t);

}  // namespace inkstone
