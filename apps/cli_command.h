#pragma once
// The skeleton every `qat` command shares (Note [command table]): its
// subcommand, and its arguments, which the parser fills and the run function
// (called by main() once the line is parsed) owns.
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/commands.h"

namespace qat::apps {

template <class Args>
struct NewCommand {
  std::shared_ptr<Args> owned = std::make_shared<Args>();
  Args& args = *owned;
  CLI::App* sub;

  // With config_help: the command reads an experiment config, its first
  // positional (Args::config).
  NewCommand(CLI::App& app, const std::string& name, const std::string& description,
             const std::string& config_help = "")
      : sub(app.add_subcommand(name, description)) {
    if constexpr (requires { args.config; }) {
      if (!config_help.empty()) add_config(sub, args.config, config_help);
    }
  }

  CLI::App* operator->() const { return sub; }

  // The command, running run(args) with the parsed options.
  Command running(std::function<int(Args&)> run) const {
    return {sub, [a = owned, run = std::move(run)] { return run(*a); }};
  }
};

}  // namespace qat::apps
