#pragma once
// This thread's CPU time in seconds: the kernel benches time their loops by
// it, not by the wall clock, so time lost to other processes on a shared
// machine is not counted against either side.
#include <ctime>

namespace tessera::bench {

inline double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace tessera::bench
