#pragma once
// The `tessera` subcommands. Each registers its options on the CLI11 app and
// returns the function that runs it; errors are thrown as tessera::Error and
// reported by main() as one line.
#include <functional>

#include <CLI/CLI.hpp>

namespace tessera::apps {

using Command = std::function<int()>;

Command add_compile_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);

}  // namespace tessera::apps
