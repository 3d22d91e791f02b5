# Trains char_gpt's short model in float32 alone, then under bfloat16 autocast alone and as 2 stages x 2 replicas,
# and requires each autocast run's final validation loss within 0.03 of float32's (issue 30's bound for mixed
# precision). Arguments: -DMPIEXEC -DNUMPROC_FLAG -DEXE -DWORK_DIR.

# A loss "2.39858" as an integer number of millionths, since CMake's math() has no fractions.
function(millionths value out)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)$" unused "${value}")
  set(whole ${CMAKE_MATCH_1})
  string(SUBSTRING "${CMAKE_MATCH_2}000000" 0 6 fraction)
  string(REGEX REPLACE "^0+([0-9])" "\\1" fraction "${fraction}")  # no leading zeros for math()
  math(EXPR result "${whole} * 1000000 + ${fraction}")
  set(${out} ${result} PARENT_SCOPE)
endfunction()

set(args --steps 300 --eval-every 300 --eval-batches 8 --layers 2 --embed 64 --sample 0 --threads 1)
set(runs "float32 alone" "bfloat16 alone" "bfloat16, 2 stages x 2 replicas")
set(commands "${EXE}" "${EXE},--autocast,bfloat16"
    "${MPIEXEC},${NUMPROC_FLAG},4,--oversubscribe,${EXE},--stages,2,--autocast,bfloat16")
foreach(i RANGE 2)
  list(GET runs ${i} run)
  list(GET commands ${i} command)
  string(REPLACE "," ";" command "${command}")
  execute_process(COMMAND ${command} ${args} --out ${WORK_DIR}/${i} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "char_gpt ${run} exited with ${rc}:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "val_loss=([0-9.]+)")
    message(FATAL_ERROR "char_gpt ${run} printed no val_loss:\n${out}")
  endif()
  set(loss ${CMAKE_MATCH_1})
  message("${run}: val_loss=${loss}")
  millionths(${loss} value)
  if(i EQUAL 0)
    set(reference ${loss})
    set(reference_value ${value})
  else()
    math(EXPR difference "${value} - ${reference_value}")
    if(difference GREATER 30000 OR difference LESS -30000)
      message(FATAL_ERROR "char_gpt ${run}: val_loss ${loss} is more than 0.03 from float32's ${reference}")
    endif()
  endif()
endforeach()
