# Installs a strata build into a scratch prefix, then configures, builds and runs the consumer
# project against it. Run by CTest (test consumer_project):
#   cmake -DSTRATA_BUILD_DIR=<build> -DWORK_DIR=<scratch> -DCXX=<compiler> [-DCONFIG=<type>] -P run.cmake

foreach(var STRATA_BUILD_DIR WORK_DIR CXX)
  if(NOT ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()
set(prefix ${WORK_DIR}/prefix)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "consumer: `${cmd}` failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
step(${CMAKE_COMMAND} --install ${STRATA_BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

# The public headers are installed, the internal ones are not.
foreach(f include/strata/strata.h include/strata/tensor/tensor.h include/strata/autograd/ops.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "consumer: ${f} was not installed")
  endif()
endforeach()
foreach(f include/strata/autograd/ops/common.h include/strata/tensor/cpu)
  if(EXISTS ${prefix}/${f})
    message(FATAL_ERROR "consumer: internal ${f} was installed")
  endif()
endforeach()
# A build with the tools installs strata-pipe and strata-flight, which run from the prefix.
load_cache(${STRATA_BUILD_DIR} READ_WITH_PREFIX build_ STRATA_BUILD_TOOLS)
if(build_STRATA_BUILD_TOOLS)
  foreach(tool strata-pipe strata-flight)
    if(NOT EXISTS ${prefix}/bin/${tool})
      message(FATAL_ERROR "consumer: bin/${tool} was not installed")
    endif()
    step(${prefix}/bin/${tool} --help)
  endforeach()
endif()

step(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR} -B ${WORK_DIR}/build -DCMAKE_BUILD_TYPE=${CONFIG}
     -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build --config ${CONFIG})
step(${WORK_DIR}/build/app)
