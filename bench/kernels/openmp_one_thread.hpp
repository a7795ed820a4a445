#pragma once
// oneDNN on Debian runs on libgomp; the kernel benches compare one thread of
// Tessera with one thread of oneDNN. OMP_NUM_THREADS is read before main, so
// the thread count is set through omp_set_num_threads when libgomp is loaded
// (looked up at run time: the benches build without oneDNN too).
#include <dlfcn.h>

namespace tessera::bench {

inline void limit_openmp_to_one_thread() {
  using SetThreads = void (*)(int);
  if (auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads")))
    set_threads(1);
}

}  // namespace tessera::bench
