#pragma once
// Collective operations across the processes of a data-parallel run. The
// app installs an implementation (apps/mpi_run.cpp, on MPI) when it runs as
// one of several processes; without one, collective() is null and every
// caller behaves as a single process. Every process must make the same calls
// in the same order (they are collective): a call only one rank makes hangs
// the job, so callers call them only on paths every rank takes.
#include <cstdint>

#include "core/error.h"

namespace qat {

// An error every process of the job has learnt of through a collective and
// stops on together (validation failing on one of them, say), so the job ends
// without MPI_Abort: each process prints its message and finishes MPI, and no
// process is killed while another still writes (rank 0 saving the epoch).
struct AgreedError : Error {
  using Error::Error;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, element-wise over all processes; every process gets the result.
  virtual void sum(double* v, int64_t n) = 0;
  virtual void sum(float* v, int64_t n) = 0;
  virtual void min(float* v, int64_t n) = 0;
  virtual void max(float* v, int64_t n) = 0;
  // Starts an in-place sum and returns at once, so that the caller computes
  // while it runs; v must stay untouched until wait_all(). Calls, started or
  // blocking, complete in the order they were made. By default: at once.
  virtual void start_sum(float* v, int64_t n) { sum(v, n); }
  // Returns once every started sum has completed.
  virtual void wait_all() {}
};

// The installed collective, or null (a single process, or a run of one).
Collective* collective();
void set_collective(Collective* c);

// Batch normalisation's training statistics (and their gradients) over the
// global batch of all processes instead of each process's own part
// (train.sync_bn). Off by default, as PyTorch's DistributedDataParallel.
bool sync_batch_norm();
void set_sync_batch_norm(bool on);

}  // namespace qat
