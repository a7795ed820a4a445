# Warnings on for our own targets only (third-party headers are SYSTEM).
function(tessera_target_defaults target)
  # -ffp-contract=off: the compiler may not fuse a*b+c into an FMA on its
  # own. With contraction, auto-vectorised loops round differently in their
  # peeled scalar part and their vector body, so a kernel's result depended on
  # the alignment of its scratch buffers (i.e. on which thread ran it).
  # Kernels that want FMAs ask for them explicitly (xsimd::fma).
  target_compile_options(${target} PRIVATE -Wall -Wextra -ffp-contract=off
    ${TESSERA_SANITIZER_WARNING_FLAGS})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
endfunction()

if(TESSERA_SANITIZE)
  # -g1: line tables and function names, all a sanitizer report needs to name
  # file:line. Full -g made the ASan build directory 0.8 GB (the SIMD kernels'
  # template instantiations), and CI's disk is not ours to fill.
  add_compile_options(-fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=${TESSERA_SANITIZE})
  if(TESSERA_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  # GCC 12 with the sanitizers reports -Wuninitialized inside its own
  # AVX-512 headers: _mm512_undefined_ps() is `__m512 __Y = __Y;`, the unused
  # merge source of many intrinsics (GCC bug 105593, fixed in GCC 13). The
  # release build keeps the warning for our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    set(TESSERA_SANITIZER_WARNING_FLAGS -Wno-uninitialized -Wno-maybe-uninitialized)
  endif()
endif()
