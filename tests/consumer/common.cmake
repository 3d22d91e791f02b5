# Shared by the consumer scripts (tests/consumer/*.cmake), which CTest runs with cmake -P.

# require(VAR...): fails naming the first of the variables that is not set.
function(require)
  foreach(var IN LISTS ARGN)
    if(NOT ${var})
      message(FATAL_ERROR "${CMAKE_SCRIPT_MODE_FILE}: -D${var}=... is required")
    endif()
  endforeach()
endfunction()

# step(COMMAND...): runs the command and fails with its output when it fails.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "consumer: `${cmd}` failed (${rc})")
  endif()
endfunction()

# capture(VAR COMMAND...): runs the command, fails when it fails, and sets VAR to its stripped output.
function(capture var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "consumer: `${cmd}` failed (${rc}):\n${out}\n${err}")
  endif()
  set(${var} "${out}" PARENT_SCOPE)
endfunction()
