// Code that both nvcc and the host compiler build (docs/kernels.md): functions marked INKSTONE_HD are host and
// device functions under nvcc and ordinary functions elsewhere.
#pragma once

#ifdef __CUDACC__
#define INKSTONE_HD __host__ __device__
#else
#define INKSTONE_HD
#endif
