#include "apps/mpi_run.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/collective.h"
#include "core/error.h"

#ifdef QAT_HAVE_MPI
#include <mpi.h>
#endif

namespace qat::apps {

namespace {

int g_rank = 0, g_size = 1;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

#ifdef QAT_HAVE_MPI
// Errors inside MPI calls: MPI's default handler aborts the job with its own
// message, which is what a data-parallel run wants (no rank left waiting).
class MpiCollective final : public Collective {
 public:
  int rank() const override { return g_rank; }
  int size() const override { return g_size; }
  void sum(double* v, int64_t n) override { reduce(v, n, MPI_DOUBLE, MPI_SUM); }
  void sum(float* v, int64_t n) override { reduce(v, n, MPI_FLOAT, MPI_SUM); }
  void min(float* v, int64_t n) override { reduce(v, n, MPI_FLOAT, MPI_MIN); }
  void max(float* v, int64_t n) override { reduce(v, n, MPI_FLOAT, MPI_MAX); }

 private:
  // Reduced on rank 0, then broadcast: every rank gets the very same bits (an
  // allreduce may associate the sums differently on different ranks, and
  // ranks whose weights drift apart by rounding no longer train one model).
  // In pieces of at most 2^30 elements (MPI counts are int).
  static void reduce(void* v, int64_t n, MPI_Datatype type, MPI_Op op) {
    int bytes = 0;
    MPI_Type_size(type, &bytes);
    auto* p = static_cast<char*>(v);
    for (int64_t done = 0; done < n;) {
      const int count = static_cast<int>(std::min<int64_t>(n - done, int64_t{1} << 30));
      char* at = p + done * bytes;
      MPI_Reduce(g_rank == 0 ? MPI_IN_PLACE : at, g_rank == 0 ? at : nullptr, count, type, op, 0, MPI_COMM_WORLD);
      MPI_Bcast(at, count, type, 0, MPI_COMM_WORLD);
      done += count;
    }
  }
};
std::unique_ptr<MpiCollective> g_collective;
#endif

}  // namespace

bool mpi_built() {
#ifdef QAT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const int n = env_int(name); n > 0) return n;
  return 1;
}

void mpi_start(int* argc, char*** argv) {
  const int launched = launcher_world_size();
  if (launched <= 1) return;
#ifdef QAT_HAVE_MPI
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);  // collectives from the main thread only
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  g_collective = std::make_unique<MpiCollective>();
  set_collective(g_collective.get());
  if (g_rank != 0 && !std::freopen("/dev/null", "w", stdout))
    std::fprintf(stderr, "qat: rank %d: cannot silence stdout\n", g_rank);
#else
  (void)argc, (void)argv;
  QAT_FAIL("this qat was built without MPI (no Open MPI found at build time, or -DQAT_MPI=OFF), so it cannot run as "
           "one of ", launched, " processes of an MPI job: install openmpi-bin and libopenmpi-dev (scripts/setup.sh) "
           "and rebuild, or run it as a single process");
#endif
}

void mpi_finish() {
#ifdef QAT_HAVE_MPI
  if (g_collective) {
    set_collective(nullptr);
    g_collective.reset();
    MPI_Finalize();
  }
#endif
}

int world_rank() { return g_rank; }
int world_size() { return g_size; }

void mpi_abort_with(const std::string& message, int code) {
  std::fprintf(stderr, "qat: error on rank %d of %d: %s\n", g_rank, g_size, message.c_str());
  std::fflush(stderr);
#ifdef QAT_HAVE_MPI
  if (g_collective) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace qat::apps
