# `cmake --install <build>` puts the library, the public headers under include/strata/ and a
# CMake package under lib/cmake/strata/, so another project can say:
#
#   find_package(strata REQUIRED)
#   target_link_libraries(app PRIVATE strata::strata)   # then #include <strata/strata.h>

include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)

install(TARGETS strata EXPORT strataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers keep their path below include/strata/. Internal headers stay behind: the
# op helpers (autograd/ops/common.h), the backend kernels (tensor/iteration.h,
# tensor/random_stream.h, tensor/cpu/, tensor/cuda/) and the distributed layer's glue and
# backends (distributed/detail/, distributed/mpi/).
file(GLOB_RECURSE STRATA_PUBLIC_HEADERS CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/tensor/*.h ${PROJECT_SOURCE_DIR}/autograd/*.h ${PROJECT_SOURCE_DIR}/distributed/*.h
  ${PROJECT_SOURCE_DIR}/optim/*.h ${PROJECT_SOURCE_DIR}/data/*.h ${PROJECT_SOURCE_DIR}/nn/*.h
  ${PROJECT_SOURCE_DIR}/pipe/*.h)
list(FILTER STRATA_PUBLIC_HEADERS EXCLUDE REGEX
  "^(autograd/ops/common\\.h|tensor/iteration\\.h|tensor/random_stream\\.h|tensor/cpu/|tensor/cuda/|distributed/detail/|distributed/mpi/)")
foreach(header IN LISTS STRATA_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/strata.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)

# strata_options (warnings, -march, sanitizers) is a build-only target and is not exported.
# A sanitized static library still needs the sanitizer runtime wherever it is linked.
if(STRATA_SANITIZE)
  target_link_options(strata INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
endif()

install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/strataConfig.cmake.in
  ${PROJECT_BINARY_DIR}/strataConfig.cmake INSTALL_DESTINATION ${STRATA_INSTALL_CMAKEDIR})
# 0.x: minor versions may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
  DESTINATION ${STRATA_INSTALL_CMAKEDIR})
