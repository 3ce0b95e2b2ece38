#include "apps/mpi_run.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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
//
// With the communication thread (MPI_THREAD_SERIALIZED granted, and asked
// for: train.overlap_allreduce), every MPI call runs there, in the order the
// training thread made it: started sums run while backward goes on, and a
// blocking call waits for those before it. Every rank makes the same calls
// in the same order, so the collectives match across ranks. Without the
// thread, calls run in place. (The thread busy-polls inside MPI while it
// waits, so it needs a core of its own: on a node whose cores all compute,
// it slows the step down; measured in results/distributed/README.md.)
class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(bool can_thread) : can_thread_(can_thread) {}
  ~MpiCollective() override { use_thread(false); }
  // Between calls only (nothing started and not waited for).
  bool use_thread(bool on) {
    if (on && can_thread_ && !worker_.joinable()) {
      stop_ = false;
      worker_ = std::thread([this] { serve(); });
    } else if (!on && worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      wake_.notify_one();
      worker_.join();
    }
    return worker_.joinable();
  }
  int rank() const override { return g_rank; }
  int size() const override { return g_size; }
  void sum(double* v, int64_t n) override { call([=] { reduce(v, n, MPI_DOUBLE, MPI_SUM); }); }
  void sum(float* v, int64_t n) override { call([=] { reduce(v, n, MPI_FLOAT, MPI_SUM); }); }
  void min(float* v, int64_t n) override { call([=] { reduce(v, n, MPI_FLOAT, MPI_MIN); }); }
  void max(float* v, int64_t n) override { call([=] { reduce(v, n, MPI_FLOAT, MPI_MAX); }); }
  void start_sum(float* v, int64_t n) override { post([=] { reduce(v, n, MPI_FLOAT, MPI_SUM); }); }
  void wait_all() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return done_ == posted_; });
  }

 private:
  void post(std::function<void()> f) {
    if (!worker_.joinable()) return f();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(f));
      ++posted_;
    }
    wake_.notify_one();
  }
  // In order: waiting for everything posted is waiting for this call.
  void call(std::function<void()> f) {
    post(std::move(f));
    wait_all();
  }
  void serve() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }

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

  bool can_thread_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  std::deque<std::function<void()>> queue_;
  int64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
};
std::unique_ptr<MpiCollective> g_collective;
#endif

// Rank 0's standard output, through a pipe of our own. After Ctrl-C, mpirun
// stops reading its ranks' output at once but sends them SIGTERM only
// odls_base_sigkill_timeout seconds later; a rank printing in between fills
// the terminal or pipe it writes to and blocks in write(), so it never gets
// to save before the SIGKILL that follows. Here a thread copies the pipe to
// the real stdout and drops what stdout has not taken within a second (only
// ever when nobody reads it), so printing never blocks training.
class StdoutRelay {
 public:
  StdoutRelay() {
    int fds[2];
    out_ = ::dup(STDOUT_FILENO);
    if (out_ < 0 || ::pipe(fds) != 0) return;
    // The relay writes without blocking, through a file description of its
    // own (reopened, so O_NONBLOCK reaches no other user of the terminal or
    // pipe); a plain dup where /proc is missing.
    send_ = ::open(("/proc/self/fd/" + std::to_string(out_)).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (send_ < 0) send_ = ::dup(out_);
    std::fflush(stdout);
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[1]);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the relay as printed (a pipe is fully buffered)
    in_ = fds[0];
    thread_ = std::thread([this] { relay(); });
  }
  // Sends what is left (waiting as long as stdout takes it) and restores stdout.
  ~StdoutRelay() {
    if (!thread_.joinable()) return;
    std::fflush(stdout);
    ::dup2(out_, STDOUT_FILENO);  // closes our pipe's last write end: the thread sees its end
    thread_.join();
    ::close(in_);
    ::close(out_);
    ::close(send_);
  }

 private:
  void relay() {
    sigset_t block;  // signals go to the training threads, never here
    sigfillset(&block);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(in_, buf, sizeof buf);
      if (n == 0) return;
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      // A second at most per piece: stdout stalled longer, the rest is dropped.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      for (ssize_t at = 0; at < n;) {
        const ssize_t w = ::write(send_, buf + at, static_cast<size_t>(n - at));
        if (w > 0) {
          at += w;
          continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                               std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{send_, POLLOUT, 0};
        ::poll(&p, 1, static_cast<int>(left.count()));
      }
    }
  }
  int out_ = -1, in_ = -1, send_ = -1;
  std::thread thread_;
};
std::unique_ptr<StdoutRelay> g_stdout_relay;

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
  // Serialized: MPI is called from one thread at a time, the communication
  // thread (init, finalize and abort excepted).
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  g_collective = std::make_unique<MpiCollective>(provided >= MPI_THREAD_SERIALIZED);
  set_collective(g_collective.get());
  if (g_rank != 0 && !std::freopen("/dev/null", "w", stdout))
    std::fprintf(stderr, "qat: rank %d: cannot silence stdout\n", g_rank);
  if (g_rank == 0) g_stdout_relay = std::make_unique<StdoutRelay>();
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
  g_stdout_relay.reset();
#endif
}

bool mpi_use_communication_thread(bool on) {
#ifdef QAT_HAVE_MPI
  if (g_collective) return g_collective->use_thread(on);
#endif
  (void)on;
  return false;
}

int local_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"})
    if (const int n = env_int(name); n > 0) return n;
  return 1;
}

int world_rank() { return g_rank; }
int world_size() { return g_size; }

void mpi_abort_with(const std::string& message, int code) {
  std::fprintf(stderr, "qat: error on rank %d of %d: %s\n", g_rank, g_size, message.c_str());
  std::fflush(stderr);
  g_stdout_relay.reset();  // rank 0's last lines out first (a second at most per piece if stdout stalls)
#ifdef QAT_HAVE_MPI
  if (g_collective) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace qat::apps
