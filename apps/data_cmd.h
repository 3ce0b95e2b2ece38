#pragma once
// `qat data ...`: dataset tools. Registers its subcommands with callbacks that
// run inside CLI::App::parse(); errors propagate out as exceptions (main turns
// them into an exit code).
namespace CLI {
class App;
}

namespace qat::apps {

// Registers `qat data subset --src DIR --out DIR --per-class N
// --val-per-class M --size S [--seed K] [--threads T]`.
void add_data_command(CLI::App& app);

}  // namespace qat::apps
