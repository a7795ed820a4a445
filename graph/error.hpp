#pragma once
// Inside the library, modules report bad input by throwing tessera::Error with
// a message a user can act on; the public API (runtime/) and the command line
// catch it at their boundary and turn it into a value or one line on stderr.
#include <stdexcept>
#include <string>

namespace tessera {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tessera
