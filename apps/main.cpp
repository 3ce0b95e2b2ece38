// qat: the command-line entry point. Subcommands live in their own files;
// this is the only place errors become exit codes.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/data_cmd.h"
#include "apps/data_parallel.h"
#include "apps/mpi_run.h"
#include "core/collective.h"
#include "core/cpu_features.h"
#include "core/error.h"

namespace {
int run(int argc, char** argv);
}  // namespace

// Under an MPI launcher: every rank runs the command; an error on any rank
// stops the whole job with a message naming the rank.
int main(int argc, char** argv) {
  try {
    qat::apps::mpi_start(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qat: error: %s\n", e.what());
    return 1;
  }
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const qat::AgreedError& e) {  // every rank stops on it together: no abort, nobody killed mid-write
    std::fprintf(stderr, "qat: error on rank %d of %d: %s\n", qat::apps::world_rank(), qat::apps::world_size(),
                 e.what());
    qat::apps::mpi_finish();
    return 1;
  } catch (const std::exception& e) {
    qat::apps::mpi_abort_with(e.what(), 1);
  }
  if (code != 0 && qat::apps::world_size() > 1 && code != 130)
    qat::apps::mpi_abort_with("the command failed (exit status " + std::to_string(code) + ")", code);
  qat::apps::mpi_finish();
  return code;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"qat: quantization-aware training for CNNs (C++20, CPU)"};
  app.require_subcommand(1);

  // Note [command table]: in the order `qat --help` lists them.
  const std::vector<qat::apps::Command> commands = {
      qat::apps::bench_command(app),          qat::apps::train_command(app),
      qat::apps::eval_command(app),           qat::apps::compare_command(app),
      qat::apps::sweep_command(app),          qat::apps::export_command(app),
      qat::apps::infer_command(app),          qat::apps::compare_layers_command(app),
      qat::apps::calibrate_command(app),      qat::apps::sensitivity_command(app)};
  const CLI::App* train = commands[1].sub;
  qat::apps::add_data_command(app);

  try {
    // Subcommands registered with their own callbacks (data) run inside parse().
    app.parse(argc, argv);
    qat::max_cpu_isa();  // a bad QAT_MAX_CPU_ISA fails here, before any work
    // Note [checks every process makes]: every process refuses together, without an abort.
    qat::apps::check_on_every_process([&] {
      QAT_CHECK(qat::apps::world_size() <= 1 || train->parsed(),
                "only `qat train` runs as several MPI processes; run this command as one process");
    });
    for (const qat::apps::Command& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    if (qat::apps::world_size() > 1) throw;  // main() stops every rank
    std::fprintf(stderr, "qat: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace
