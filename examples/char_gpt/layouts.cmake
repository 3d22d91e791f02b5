# Trains char_gpt alone, as 2 data-parallel replicas, as 2 stages x 2 replicas, as 2 (tensor) x 2 (pipe) x 2 (data)
# with ZeRO-1, and as 2 sequence-parallel tensor ranks x 2 replicas with ZeRO-2 (a small model in float64, its
# vocabulary padded alike everywhere) and requires the same losses in all: each evaluation's "step N: train loss
# ..., val loss ..., val accuracy ..." line and the final val_loss. Arguments: -DMPIEXEC -DNUMPROC_FLAG -DEXE
# -DWORK_DIR.
set(args --steps 20 --eval-every 10 --eval-batches 2 --layers 2 --embed 32 --heads 2 --block 32 --batch-size 8
    --sample 40 --dtype float64 --threads 1 --make-vocab-size-divisible-by 8)
set(layouts "alone" "2 replicas" "2 stages x 2 replicas" "2 x 2 x 2, ZeRO 1" "2 sequence-parallel x 2, ZeRO 2")
set(commands "${EXE}" "${MPIEXEC},${NUMPROC_FLAG},2,--oversubscribe,${EXE}"
    "${MPIEXEC},${NUMPROC_FLAG},4,--oversubscribe,${EXE},--stages,2"
    "${MPIEXEC},${NUMPROC_FLAG},8,--oversubscribe,${EXE},--tensor-parallel,2,--stages,2,--zero,1"
    "${MPIEXEC},${NUMPROC_FLAG},4,--oversubscribe,${EXE},--tensor-parallel,2,--sequence-parallel,--zero,2")
set(reference "")
foreach(i RANGE 4)
  list(GET layouts ${i} layout)
  list(GET commands ${i} command)
  string(REPLACE "," ";" command "${command}")
  execute_process(COMMAND ${command} ${args} --out ${WORK_DIR}/${i} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "char_gpt ${layout} exited with ${rc}:\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "step [0-9]+: train loss [0-9.]+, val loss [0-9.]+, val accuracy [0-9.]+|val_loss=[0-9.e-]+"
         losses "${out}")
  list(REMOVE_DUPLICATES losses)  # a progress bar may print its summary twice
  list(LENGTH losses n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "char_gpt ${layout}: expected 2 evaluations and val_loss, got ${n} lines:\n${out}")
  endif()
  message("${layout}: ${losses}")
  if(i EQUAL 0)
    set(reference "${losses}")
  elseif(NOT losses STREQUAL reference)
    message(FATAL_ERROR "char_gpt ${layout} differs from alone:\n  ${losses}\nalone:\n  ${reference}")
  endif()
endforeach()
