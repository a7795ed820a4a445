# `cmake --install` puts the library, its public headers and a CMake package
# config in place so that applications can `find_package(Tessera)`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
