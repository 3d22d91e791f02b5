# Builds strata from its source tree inside another project (subproject/CMakeLists.txt) with add_subdirectory or
# FetchContent. Configuring checks that strata acts as a subproject; then the program's object and one object of
# the library are compiled (the library's include layout must work from another project's build tree), and the
# program's compile and link commands are checked: C++20 and strata's include directories but none of strata's
# own flags (warnings, -march) on the program, strata's library and its private dependencies on its link line.
# Building the whole library again would take many minutes, so the program is not linked; Ninja builds an
# object by name without what its target links. CTest's consumer_add_subdirectory and consumer_fetchcontent:
#   cmake -DMODE=subdirectory|fetchcontent -DSTRATA_SOURCE_DIR=<src> -DWORK_DIR=<scratch> -DCXX=<compiler>
#         -DNINJA=<ninja> -DVERSION=<x.y.z> -P subproject.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require(MODE STRATA_SOURCE_DIR WORK_DIR CXX NINJA VERSION)

file(REMOVE_RECURSE ${WORK_DIR})
step(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/subproject -B ${WORK_DIR} -G Ninja
     -DCMAKE_MAKE_PROGRAM=${NINJA} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
     -DMODE=${MODE} -DSTRATA_SOURCE_DIR=${STRATA_SOURCE_DIR} -DSTRATA_EXPECTED_VERSION=${VERSION})
if(MODE STREQUAL "subdirectory")
  set(strata_build strata)
else()
  set(strata_build _deps/strata-build)
endif()

# The program's compile command.
file(READ ${WORK_DIR}/compile_commands.json commands)
string(JSON n LENGTH "${commands}")
math(EXPR last "${n} - 1")
set(app_command "")
foreach(i RANGE ${last})
  string(JSON file GET "${commands}" ${i} file)
  if(file MATCHES "/tests/consumer/main\\.cpp$")
    string(JSON app_command GET "${commands}" ${i} command)
  endif()
endforeach()
if(NOT app_command MATCHES "-std=(c|gnu)\\+\\+20")
  message(FATAL_ERROR "consumer: the program is not compiled as C++20: ${app_command}")
endif()
foreach(expect "${WORK_DIR}/${strata_build}/include " "${WORK_DIR}/${strata_build}/generated/include " "eigen3")
  string(FIND "${app_command} " "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "consumer: the program's compile command lacks ${expect}: ${app_command}")
  endif()
endforeach()
foreach(unexpected "-march=native" "-Wall" "-fmacro-prefix-map")
  if(app_command MATCHES "${unexpected}")
    message(FATAL_ERROR "consumer: strata's own flag ${unexpected} reached the program: ${app_command}")
  endif()
endforeach()

# The program's link command.
capture(link_command ${NINJA} -C ${WORK_DIR} -t commands app)
string(REGEX REPLACE ".*\n" "" link_command "${link_command}")
foreach(expect "${strata_build}/libstrata.a" "libmpi" "libz.so")
  string(FIND "${link_command}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "consumer: the program's link command lacks ${expect}: ${link_command}")
  endif()
endforeach()

# Compile the program and one source of the library.
step(${NINJA} -C ${WORK_DIR} app_main ${strata_build}/CMakeFiles/strata.dir/tensor/shape.cpp.o)
message(STATUS "consumer: strata as a subproject (${MODE}) configures, and its objects compile")
