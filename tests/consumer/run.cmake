# Configures, builds and runs the consumer project (this folder's CMakeLists.txt) against an installed strata:
# find_package(strata) must find the version strata's project() states, and the program must build and run.
# CTest's consumer_project (PREFIX: consumer_install's prefix) and consumer_deb (PREFIX: the unpacked .deb's usr/):
#   cmake -DPREFIX=<prefix> -DWORK_DIR=<scratch> -DCXX=<compiler> -DVERSION=<x.y.z> [-DCONFIG=<type>] -P run.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require(PREFIX WORK_DIR CXX VERSION)
if(NOT CONFIG)
  set(CONFIG Release)
endif()

file(REMOVE_RECURSE ${WORK_DIR})
# Only PREFIX: no package registry, and no strata the system may have installed elsewhere.
step(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR} -B ${WORK_DIR} -DCMAKE_BUILD_TYPE=${CONFIG}
     -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -Dstrata_ROOT=${PREFIX} -DSTRATA_EXPECTED_VERSION=${VERSION})
load_cache(${WORK_DIR} READ_WITH_PREFIX consumer_ strata_DIR)
file(REAL_PATH ${PREFIX} prefix)
file(REAL_PATH ${consumer_strata_DIR} found)
string(FIND "${found}/" "${prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "consumer: found strata's package in ${found}, outside ${PREFIX}")
endif()
step(${CMAKE_COMMAND} --build ${WORK_DIR} --config ${CONFIG})
step(${WORK_DIR}/app)
