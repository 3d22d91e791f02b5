# Writes the schedule files of PyTorch's torch.distributed.pipelining for PipeEngine.RunsPyTorchsScheduleFiles:
#   cmake -DPYTHON=<venv python> -DOUT=<dir> -DSCRIPT=<torch_schedules.py> -P torch_schedules.cmake
# With PyTorch in PYTHON's environment it runs SCRIPT for 4 micro-batches (pipe_training.h's kMicroBatches) and 1, 2
# and 4 stages (the distributed tests' layouts); without, it says so and leaves OUT empty, and the test skips.

file(REMOVE_RECURSE ${OUT})
if(NOT EXISTS ${PYTHON})
  message("torch_schedules: no schedule files: ${PYTHON} does not exist (scripts/test makes that environment)")
  return()
endif()
execute_process(COMMAND ${PYTHON} -c "import torch.distributed.pipelining" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message("torch_schedules: no schedule files: PyTorch is not installed in ${PYTHON}'s environment")
  return()
endif()
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${OUT} 4 1 2 4 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "torch_schedules: ${SCRIPT} failed (exit status ${rc})")
endif()
