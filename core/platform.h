// Facts about the machine a run uses: BLAS behind libtorch, threads, and the device.
#pragma once
#include <string>

#include <torch/types.h>

namespace inkstone {

// The BLAS library libtorch resolved at load time (the file behind libblas.so.3 or an MKL/OpenBLAS build).
std::string blas_library();
// True when that library is the reference BLAS (about 35x slower than OpenBLAS on matmuls).
bool blas_is_reference();
// Prints a loud warning with the fix when the reference BLAS is in use; once per process.
void warn_if_reference_blas();

// "auto" picks CUDA when present; "cuda" without a GPU is an InputError.
torch::Device resolve_device(const std::string& device);

void set_threads(int64_t threads);

// Makes glibc keep freed tensor buffers for reuse: by default it maps every allocation above its mmap threshold
// (128 KiB, adapting upwards) straight from the kernel and unmaps it on free, so each training step page-faults
// its activations in again. Called first thing in main; allocations above 32 MiB are still mapped.
void keep_freed_memory_for_reuse();

}  // namespace inkstone
