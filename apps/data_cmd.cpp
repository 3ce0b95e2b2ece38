// `qat data subset`: writes a smaller ImageFolder (see data/subset.h).
#include "apps/data_cmd.h"

#include "apps/cli_checks.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "data/subset.h"

namespace qat::apps {

namespace {
struct SubsetArgs {
  std::string src, out;
  int64_t per_class = 0, val_per_class = 0, size = 0;
  uint64_t seed = 0;
  int threads = 0;
};
}  // namespace

void add_data_command(CLI::App& app) {
  auto* d = app.add_subcommand("data", "Dataset tools");
  d->require_subcommand(1);

  auto args = std::make_shared<SubsetArgs>();
  auto* s = d->add_subcommand(
      "subset",
      "Write a smaller ImageFolder: N train and M val images per class of SRC/{train,val}/<class>/, chosen "
      "with a seeded generator, shorter side resized to S (aspect kept), JPEG quality 90, to OUT/{train,val}/<class>/");
  s->add_option("--src", args->src, "Source dataset root holding train/<class>/ and val/<class>/")
      ->required()
      ->check(CLI::ExistingDirectory);
  s->add_option("--out", args->out, "Output root (must not exist or be empty)")->required();
  s->add_option("--per-class", args->per_class, "Train images per class")->required()->check(kPositive);
  s->add_option("--val-per-class", args->val_per_class, "Validation images per class")
      ->required()
      ->check(kPositive);
  s->add_option("--size", args->size, "Shorter side of the written images, in pixels")
      ->required()
      ->check(kPositive);
  s->add_option("--seed", args->seed, "Seed of the random choice")
      ->capture_default_str()
      ->check(count_up_to(std::numeric_limits<uint64_t>::max()));
  s->add_option("--threads", args->threads, "Decoding threads (0: all cores; the output does not depend on it)")
      ->capture_default_str()
      ->check(kNonNegative);
  s->callback([args] {
    const auto r = data::make_subset(args->src, args->out, args->per_class, args->val_per_class, args->size,
                                     args->seed, args->threads);
    std::printf("qat data subset: wrote %lld train + %lld val images of %lld classes to %s\n",
                static_cast<long long>(r.train_images), static_cast<long long>(r.val_images),
                static_cast<long long>(r.classes), args->out.c_str());
  });
}

}  // namespace qat::apps
