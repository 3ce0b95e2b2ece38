#pragma once
// Note [command table]. Each `qat` command registers its own subcommand and
// options (apps/cli_*.cpp) and hands back what runs it once the command line
// is parsed; main() is the list of them. A new command adds one function
// here and one line to main.
#include <functional>

namespace CLI {
class App;
}

namespace qat::apps {

struct Command {
  CLI::App* sub;             // the subcommand, parsed() when chosen
  std::function<int()> run;  // runs it with the options parsed into its arguments
};

Command bench_command(CLI::App& app);
Command train_command(CLI::App& app);
Command eval_command(CLI::App& app);
Command compare_command(CLI::App& app);
Command sweep_command(CLI::App& app);
Command export_command(CLI::App& app);
Command infer_command(CLI::App& app);
Command compare_layers_command(CLI::App& app);
Command calibrate_command(CLI::App& app);
Command sensitivity_command(CLI::App& app);

}  // namespace qat::apps
