#pragma once
// QAT_HOST_DEVICE marks an inline function that both the CPU ops and their
// CUDA twins compile (docs/conventions.md convention 1): under nvcc it is
// __host__ __device__, elsewhere nothing.
#if defined(__CUDACC__)
#define QAT_HOST_DEVICE __host__ __device__
#else
#define QAT_HOST_DEVICE
#endif
