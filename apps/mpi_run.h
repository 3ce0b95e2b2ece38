#pragma once
// Multi-process runs on MPI (`mpirun -np N qat train CONFIG`, docs/distributed.md).
// mpi_start() joins the job when qat runs under an MPI launcher and installs
// the collective (core/collective.h) that the training loop, batch norm
// (train.sync_bn) and the observers use; a single process needs nothing.
#include <string>

namespace qat::apps {

// Whether this build has MPI (CMake QAT_MPI; Open MPI from Debian).
bool mpi_built();
// The world size the launcher announced in the environment (1 outside one).
int launcher_world_size();
// Joins the job when launched as one of several processes; without MPI in the
// build, such a launch is an error naming the cause. Quiets stdout on ranks
// other than 0 (rank 0 alone prints progress and results).
void mpi_start(int* argc, char*** argv);
void mpi_finish();
// Starts (or stops) the communication thread that runs every MPI call, so
// that started sums (Collective::start_sum) overlap the caller's work;
// without it they run at once. Returns whether the thread runs (MPI may not
// grant the thread level it needs).
bool mpi_use_communication_thread(bool on);
// The processes of this job on this node (the launcher's local size; 1 outside a job).
int local_world_size();
// This process's rank and the number of processes (0 and 1 without a job).
int world_rank();
int world_size();
// After an error on this rank: its message, naming the rank, then the whole
// job stops (MPI_Abort) instead of leaving the other ranks waiting.
[[noreturn]] void mpi_abort_with(const std::string& message, int code);

}  // namespace qat::apps
