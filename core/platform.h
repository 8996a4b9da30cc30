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
// run.tf32: whether fp32 matmuls and convolutions on CUDA may use TF32 tensor cores (libtorch's default: no).
void allow_tf32(bool allowed);

// An allocation whose size is predictable (a model's training state, a sampler's batch), checked before it is
// made: on the CPU, more than the machine's physical memory is an InputError that gives both figures and `what`
// needs it. Allocations on a GPU are left to its allocator (its error is caught at the top level).
void require_memory(double bytes, const torch::Device& device, const std::string& what);

// libtorch intra-op threads; more than the machine's cores is an InputError naming run.threads.
void set_threads(int64_t threads);

// Makes glibc keep freed tensor buffers for reuse: by default it maps every allocation above its mmap threshold
// (128 KiB, adapting upwards) straight from the kernel and unmaps it on free, so each training step page-faults
// its activations in again. Called first thing in main; allocations above 32 MiB are still mapped.
void keep_freed_memory_for_reuse();

// A write past the file-size limit (`ulimit -f`, set on some shared clusters) raises SIGXFSZ, whose default action
// ends the process mid-write without a word; ignored, the write fails with EFBIG and is reported like a full disk
// (core/atomic_file.h: the target keeps its old contents). Called first thing in main; the ranks `inkstone launch`
// starts inherit it.
void report_file_size_limit_as_write_error();

}  // namespace inkstone
