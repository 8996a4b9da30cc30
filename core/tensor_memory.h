// Live bytes of CPU tensors, the CPU counterpart of the CUDA allocator's allocated / max-allocated statistics: the
// resident set also holds libtorch itself and what glibc keeps of freed blocks (core/platform.h keeps freed memory
// for reuse), so it cannot say what a run's tensors need (docs/training.md, "Memory").
#pragma once

namespace inkstone {

// Starts counting every CPU tensor allocation and free of this thread and of the threads libtorch starts from it
// (libtorch's CPU allocator reports them to a registered memory observer). Call it before the first tensor is
// made: a block allocated earlier is not counted, and libtorch warns when such a block is freed.
void count_cpu_tensor_memory();
bool counting_cpu_tensor_memory();

// MiB of CPU tensors alive now, and the most alive at once since counting started or the last reset.
double cpu_tensor_live_mib();
double cpu_tensor_peak_mib();
void reset_cpu_tensor_peak();

}  // namespace inkstone
