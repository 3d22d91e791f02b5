# `cmake --install <build>` puts the library, the public headers under include/strata/, a CMake
# package under lib/cmake/strata/ and a pkg-config file lib/pkgconfig/strata.pc, so another project can say:
#
#   find_package(strata 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE strata::strata)   # then #include <strata/strata.h>
#
# or `g++ -std=c++20 app.cpp $(pkg-config --cflags --libs strata)`.

include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)

install(TARGETS strata EXPORT strataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers (cmake/public_headers.cmake) keep their path below include/strata/.
include(${CMAKE_CURRENT_LIST_DIR}/public_headers.cmake)
strata_public_headers(STRATA_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR})
foreach(header IN LISTS STRATA_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/${dir})
endforeach()
install(FILES ${STRATA_GENERATED_INCLUDE_DIR}/strata/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)

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

# pkg-config (cmake/strata.pc.in). Its prefix is found from the file's own place (${pcfiledir}), so the same
# file serves any install prefix and a .deb unpacked anywhere. OpenMP is public (the headers use it) and Eigen's
# include directory is needed by every includer. MPI, oneDNN, zlib and, when built, the CUDA runtime, cuBLAS and
# NCCL are private: a static libstrata.a (the default) leaves them to the program's link, so they go in Libs; a
# shared one (BUILD_SHARED_LIBS) links them itself, and they go in Libs.private.
function(strata_pc_link_flags out)
  set(flags "")
  foreach(lib IN LISTS ARGN)
    if(lib MATCHES "^(.*)/lib([^/]+)\\.(so|a)$")
      list(APPEND flags "-L${CMAKE_MATCH_1}" "-l${CMAKE_MATCH_2}")
    elseif(lib MATCHES "^-")
      list(APPEND flags "${lib}")
    else()
      message(FATAL_ERROR "strata.pc: cannot express the library '${lib}' as a link flag")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  list(JOIN flags " " flags)
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(STRATA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(STRATA_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(STRATA_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH pc_to_prefix "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")   # "../.."
  string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
  set(STRATA_PC_PREFIX "\${pcfiledir}/${pc_to_prefix}")
  set(STRATA_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(STRATA_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
get_target_property(eigen_include_dirs Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
list(TRANSFORM eigen_include_dirs PREPEND "-I")
list(JOIN eigen_include_dirs " " STRATA_PC_CFLAGS)
string(APPEND STRATA_PC_CFLAGS " ${OpenMP_CXX_FLAGS}")
set(pc_private_libs ${MPI_CXX_LIBRARIES} ${STRATA_DNNL_LIBRARY} ${ZLIB_LIBRARIES})
if(STRATA_CUDA_FOUND)
  list(APPEND pc_private_libs ${CUDA_cudart_LIBRARY} ${CUDA_cublas_LIBRARY} ${STRATA_NCCL_LIBRARY})
endif()
strata_pc_link_flags(pc_private_libs ${pc_private_libs})
# A sanitized build's library needs the sanitizer runtime at the program's link, as the CMake package says above.
if(STRATA_SANITIZE STREQUAL "thread")
  string(PREPEND pc_private_libs "-fsanitize=thread ")
elseif(STRATA_SANITIZE)
  string(PREPEND pc_private_libs "-fsanitize=address,undefined ")
endif()
get_target_property(strata_type strata TYPE)
if(strata_type STREQUAL "STATIC_LIBRARY")
  set(STRATA_PC_LIBS "${OpenMP_CXX_FLAGS} ${pc_private_libs}")
  set(STRATA_PC_LIBS_PRIVATE "")
else()
  set(STRATA_PC_LIBS "${OpenMP_CXX_FLAGS}")
  set(STRATA_PC_LIBS_PRIVATE "${pc_private_libs}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/strata.pc.in ${PROJECT_BINARY_DIR}/strata.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/strata.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
