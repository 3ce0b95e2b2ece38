// Catch2 v2 test runner for all of qat's unit tests. Each test runs with one
// thread unless it sets its own (ctest runs two tests at a time on 2 cores).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/threads.h"

int main(int argc, char* argv[]) {
  qat::set_num_threads(1);
  return Catch::Session().run(argc, argv);
}
