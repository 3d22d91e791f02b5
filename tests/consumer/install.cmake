# Installs a strata build into a scratch prefix and checks what is there: the public headers and not the internal
# ones, the generated version header, the CMake package, strata.pc, and the tools, which must run from the prefix.
# CTest's consumer_install, the fixture the find_package and pkg-config consumers build against:
#   cmake -DSTRATA_BUILD_DIR=<build> -DPREFIX=<scratch> [-DCONFIG=<type>] -P install.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require(STRATA_BUILD_DIR PREFIX)
if(NOT CONFIG)
  set(CONFIG Release)
endif()

file(REMOVE_RECURSE ${PREFIX})
step(${CMAKE_COMMAND} --install ${STRATA_BUILD_DIR} --prefix ${PREFIX} --config ${CONFIG})

foreach(f include/strata/strata.h include/strata/tensor/tensor.h include/strata/autograd/ops.h
          include/strata/version.h lib/cmake/strata/strataConfig.cmake lib/cmake/strata/strataConfigVersion.cmake
          lib/pkgconfig/strata.pc)
  if(NOT EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "consumer: ${f} was not installed")
  endif()
endforeach()
foreach(f include/strata/autograd/ops/common.h include/strata/tensor/cpu)
  if(EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "consumer: internal ${f} was installed")
  endif()
endforeach()
# A build with the tools installs strata-pipe and strata-flight, which run from the prefix.
load_cache(${STRATA_BUILD_DIR} READ_WITH_PREFIX build_ STRATA_BUILD_TOOLS)
if(build_STRATA_BUILD_TOOLS)
  foreach(tool strata-pipe strata-flight)
    if(NOT EXISTS ${PREFIX}/bin/${tool})
      message(FATAL_ERROR "consumer: bin/${tool} was not installed")
    endif()
    step(${PREFIX}/bin/${tool} --help)
  endforeach()
endif()
