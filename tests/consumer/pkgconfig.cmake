# Builds the consumer program (main.cpp) with a plain compiler and pkg-config, as a Makefile would, against an
# installed strata: g++ -std=c++20 main.cpp $(pkg-config --cflags --libs strata), then runs it.
# CTest's consumer_pkgconfig (consumer_install's prefix) and consumer_deb (the unpacked .deb's usr/):
#   cmake -DPREFIX=<prefix> -DWORK_DIR=<scratch> -DCXX=<compiler> -DPKG_CONFIG=<pkg-config> -DVERSION=<x.y.z> -P pkgconfig.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require(PREFIX WORK_DIR CXX PKG_CONFIG VERSION)

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(GLOB pc_files ${PREFIX}/lib/pkgconfig/strata.pc ${PREFIX}/lib/*/pkgconfig/strata.pc)
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "consumer: expected one strata.pc below ${PREFIX}/lib, found ${n}: ${pc_files}")
endif()
get_filename_component(pc_dir ${pc_files} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})

capture(pc_found ${PKG_CONFIG} --variable=pcfiledir strata)
if(NOT pc_found STREQUAL pc_dir)
  message(FATAL_ERROR "consumer: pkg-config found strata.pc in ${pc_found}, not in ${pc_dir}")
endif()
capture(pc_version ${PKG_CONFIG} --modversion strata)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "consumer: pkg-config says strata ${pc_version}, expected ${VERSION}")
endif()
capture(flags ${PKG_CONFIG} --cflags --libs strata)
message(STATUS "consumer: pkg-config --cflags --libs strata: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
step(${CXX} -std=c++20 "-DSTRATA_EXPECTED_VERSION=\"${pc_version}\"" ${CMAKE_CURRENT_LIST_DIR}/main.cpp ${flags}
     -o ${WORK_DIR}/app)
step(${WORK_DIR}/app)
