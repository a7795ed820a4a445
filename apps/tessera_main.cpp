// `tessera`: compile ONNX models into tile graphs, run and inspect them.
#include <cstdio>
#include <exception>
#include <new>

#include "apps/commands.hpp"
#include "graph/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Tessera: barrier-free tile-dataflow inference"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, tessera::apps::Command>> commands;
  auto add = [&](tessera::apps::Command (*make)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    auto command = make(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(command));
  };
  add(tessera::apps::add_compile_command);
  add(tessera::apps::add_run_command);
  add(tessera::apps::add_inspect_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
