#include "core/tensor_storage.h"

#include <c10/core/StorageImpl.h>

namespace inkstone {
namespace {

size_t tensor_bytes(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

}  // namespace

bool owns_whole_storage(const torch::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() && t.storage().nbytes() == tensor_bytes(t) &&
         t.storage().unsafeGetStorageImpl()->allocator() != nullptr;
}

void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = tensor_bytes(t);
  if (storage->nbytes() == bytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

}  // namespace inkstone
