#include "data/subset.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/threads.h"
#include "data/image_folder.h"
#include "data/loader.h"

namespace fs = std::filesystem;

namespace qat::data {

namespace {

struct Job {
  std::string src, dst;
};

// Appends the jobs of one split: `count` images per class chosen with a
// partial Fisher-Yates shuffle of the class's (sorted) samples.
void plan_split(const ImageFolder& folder, const fs::path& out_dir, int64_t count, uint64_t seed, uint64_t split,
                std::vector<Job>& jobs) {
  for (int32_t c = 0; c < folder.num_classes(); ++c) {
    std::vector<int64_t> idx = folder.indices_of(c);
    QAT_CHECK(static_cast<int64_t>(idx.size()) >= count, "make_subset: class '", folder.classes()[c], "' of '",
              folder.root(), "' has ", idx.size(), " images, fewer than the ", count, " asked for");
    Generator gen(loader_seed(seed, split, static_cast<uint64_t>(c)));
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t j = static_cast<uint64_t>(i) + gen.below(idx.size() - static_cast<uint64_t>(i));
      std::swap(idx[static_cast<size_t>(i)], idx[j]);
    }
    idx.resize(static_cast<size_t>(count));
    std::sort(idx.begin(), idx.end());
    const fs::path class_dir = out_dir / folder.classes()[c];
    fs::create_directories(class_dir);
    std::set<std::string> used;
    for (int64_t i : idx) {
      std::string stem = fs::path(folder.path(i)).stem().string();
      for (int k = 1; used.count(stem); ++k) stem = fs::path(folder.path(i)).stem().string() + "_" + std::to_string(k);
      used.insert(stem);
      jobs.push_back({folder.path(i), (class_dir / (stem + ".jpg")).string()});
    }
  }
}

// The shorter side resized to `size`; an image whose longer side would take
// it past the pixel limit is refused, naming it.
Image resized(const std::string& src, int64_t size, const DecodeLimits& limits) {
  const Image img = decode_image(src, limits);
  const int64_t lo = std::min(img.height, img.width), hi = std::max(img.height, img.width);
  const int64_t long_side = size * hi / lo;  // resize_shorter's
  QAT_CHECK(long_side <= limits.max_pixels / size, "make_subset: '", src, "' (", img.width, "x", img.height,
            ") resized to a shorter side of ", size, " has ", size * long_side, " pixels, more than ",
            "data.max_image_pixels (", limits.max_pixels, " by default)");
  return resize_shorter(img, size);
}

void run_jobs(const std::vector<Job>& jobs, int64_t size, int threads, const DecodeLimits& limits) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t j; !failed && (j = next++) < jobs.size();) {
      try {
        write_jpeg(jobs[j].dst, resized(jobs[j].src, size, limits), 90);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads > 0 ? threads : hardware_threads(), static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Whether `p` is `root` or below it, links resolved (p need not exist yet).
bool inside(const fs::path& p, const fs::path& root) {
  std::error_code ec;
  const fs::path rel = fs::weakly_canonical(fs::absolute(p), ec).lexically_relative(fs::weakly_canonical(fs::absolute(root), ec));
  return !rel.empty() && *rel.begin() != "..";  // "." for root itself
}

}  // namespace

SubsetSummary make_subset(const std::string& src_root, const std::string& out_root, int64_t per_class,
                          int64_t val_per_class, int64_t size, uint64_t seed, int threads) {
  QAT_CHECK(per_class > 0, "make_subset: per_class must be > 0, got ", per_class);
  QAT_CHECK(val_per_class > 0, "make_subset: val_per_class must be > 0, got ", val_per_class);
  QAT_CHECK(size > 0, "make_subset: size must be > 0, got ", size);
  const fs::path src(src_root), out(out_root);
  const ImageFolder train((src / "train").string()), val((src / "val").string());
  QAT_CHECK(train.classes() == val.classes(), "make_subset: '", train.root(), "' has ", train.num_classes(),
            " classes and '", val.root(), "' has ", val.num_classes(), "; their class folders must match");
  // Images qat itself would refuse to read (DecodeLimits) are not written.
  const DecodeLimits limits;
  QAT_CHECK(size <= limits.max_pixels / size, "make_subset: size ", size, " makes images of at least ", size, "x",
            size, " pixels, more than data.max_image_pixels (", limits.max_pixels, " by default)");
  std::error_code ec;
  QAT_CHECK(!inside(out, src), "make_subset: output '", out_root, "' is inside the source '", src_root,
            "': its images would become classes of the source; choose an output outside it");
  QAT_CHECK(!fs::exists(out, ec) || (fs::is_directory(out, ec) && fs::is_empty(out, ec)), "make_subset: output '",
            out_root, "' exists and is not an empty folder");
  // Written into a staging folder inside it, then train/ and val/ moved into
  // place: a failure (a corrupt source image, a full disk) leaves no half
  // subset, and an --out that is a link, a mount point or "." works (the
  // folder itself is never renamed).
  const bool made = !fs::exists(out, ec);
  fs::create_directories(out, ec);
  QAT_CHECK(!ec, "make_subset: cannot make the output folder '", out_root, "': ", ec.message());
  const fs::path staging = out / (".tmp-subset-" + std::to_string(::getpid()));
  try {
    std::vector<Job> jobs;
    plan_split(train, staging / "train", per_class, seed, /*split=*/0, jobs);
    plan_split(val, staging / "val", val_per_class, seed, /*split=*/1, jobs);
    run_jobs(jobs, size, threads, limits);
    fs::rename(staging / "train", out / "train");
    fs::rename(staging / "val", out / "val");
    fs::remove(staging);
  } catch (...) {
    fs::remove_all(staging, ec);
    fs::remove_all(out / "train", ec);  // only ever ours: the folder was empty
    fs::remove_all(out / "val", ec);
    if (made) fs::remove(out, ec);
    throw;
  }
  return {train.num_classes(), per_class * train.num_classes(), val_per_class * val.num_classes()};
}

}  // namespace qat::data
