# The strata-pipe command, one group of cases per CTest test:
#   cmake -DEXE=<strata-pipe> -DGROUP=<group> -DWORK_DIR=<scratch dir> [-DPYTHON=<python3>] -P cli.cmake
# GROUP is schedule, partition, topology, validate, simulate, trace, export or usage. Each case checks the exit status and
# either the exact stdout or the first line of stderr; every failing case is reported, then the script fails.

foreach(var EXE GROUP WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "cli.cmake: -D${var}=... is required")
  endif()
endforeach()
set(failures "")

# expect(<name> EXIT <status> [STDOUT <exact text>] [STDERR_FIRST_LINE <exact line>] [STDERR_HAS <text>]
#        [STDERR_USAGE] ARGS <arg>...)
# A case that exits non-zero must print nothing on stdout; STDERR_USAGE: the usage follows the message.
function(expect name)
  cmake_parse_arguments(PARSE_ARGV 1 case "STDERR_USAGE" "EXIT;STDOUT;STDERR_FIRST_LINE;STDERR_HAS" "ARGS")
  execute_process(COMMAND ${EXE} ${case_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 60)
  set(why "")
  if(NOT rc STREQUAL case_EXIT)
    string(APPEND why "  exit status ${rc}, expected ${case_EXIT}\n")
  endif()
  if(DEFINED case_STDOUT AND NOT out STREQUAL case_STDOUT)
    string(APPEND why "  stdout differs; expected:\n${case_STDOUT}")
  elseif(NOT case_EXIT EQUAL 0 AND NOT out STREQUAL "")
    string(APPEND why "  a failing run printed on stdout\n")
  endif()
  string(FIND "${err}" "\n" newline)
  string(SUBSTRING "${err}" 0 ${newline} first_line)
  if(DEFINED case_STDERR_FIRST_LINE AND NOT first_line STREQUAL case_STDERR_FIRST_LINE)
    string(APPEND why "  stderr's first line is not '${case_STDERR_FIRST_LINE}'\n")
  endif()
  if(DEFINED case_STDERR_HAS)
    string(FIND "${err}" "${case_STDERR_HAS}" at)
    if(at EQUAL -1)
      string(APPEND why "  stderr does not contain '${case_STDERR_HAS}'\n")
    endif()
  endif()
  if(case_STDERR_USAGE AND NOT err MATCHES "\nusage: strata-pipe ")
    string(APPEND why "  stderr does not end with the usage\n")
  endif()
  if(why)
    list(JOIN case_ARGS " " command)
    set(failures "${failures}${name}: strata-pipe ${command}\n${why}--- stdout ---\n${out}--- stderr ---\n${err}\n"
        PARENT_SCOPE)
  endif()
endfunction()

# A bad command line: exit status 2, the message, then the usage, all on stderr.
function(expect_usage_error name message)
  expect(${name} EXIT 2 STDERR_FIRST_LINE "strata-pipe: ${message}" STDERR_USAGE ARGS ${ARGN})
  set(failures "${failures}" PARENT_SCOPE)
endfunction()

if(GROUP STREQUAL "schedule")
  # 1F1B with S = 2, M = 4 (TrainSchedule in pipe/schedule.h): stage s forwards micro-batch m at step 2m + s and
  # backwards it at step 2m + 3 - s; buffer m % 2; sends go out one step after the pass; the last step reduces and
  # steps the optimizer.
  set(train_stage0 [[
0: LoadMicroBatch(0) ForwardPass(0)
1: SendActivation(0)
2: LoadMicroBatch(1) ForwardPass(1)
3: RecvGrad(0) SendActivation(1) BackwardPass(0)
4: LoadMicroBatch(0) ForwardPass(0)
5: RecvGrad(1) SendActivation(0) BackwardPass(1)
6: LoadMicroBatch(1) ForwardPass(1)
7: RecvGrad(0) SendActivation(1) BackwardPass(0)
8:
9: RecvGrad(1) BackwardPass(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()
]])
  expect(train_stage0 EXIT 0 ARGS schedule --schedule train --stages 2 --micro-batches 4 --stage 0
    STDOUT "${train_stage0}")
  expect(train_all_stages EXIT 0 ARGS schedule --schedule train --stages 2 --micro-batches 4 STDOUT "stage 0
${train_stage0}stage 1
0:
1: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)
2: BackwardPass(0)
3: SendGrad(0) RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)
4: BackwardPass(1)
5: SendGrad(1) RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)
6: BackwardPass(0)
7: SendGrad(0) RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)
8: BackwardPass(1)
9: SendGrad(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()
")
  # Forward only, over two alternating buffers; stage 0 sends each micro-batch one step after its forward.
  expect(inference EXIT 0 ARGS schedule --schedule inference --stages 2 --micro-batches 2 STDOUT [[
stage 0
0: LoadMicroBatch(0) ForwardPass(0)
1: LoadMicroBatch(1) SendActivation(0) ForwardPass(1)
2: SendActivation(1)
stage 1
0:
1: LoadMicroBatch(0) RecvActivation(0) ForwardPass(0)
2: LoadMicroBatch(1) RecvActivation(1) ForwardPass(1)
]])
  # Every stage loads, forwards and backwards each micro-batch; the last one ends the batch.
  expect(dataparallel EXIT 0 ARGS schedule --schedule dataparallel --stages 1 --micro-batches 2 --stage 0
    STDOUT [[
0: LoadMicroBatch(0) ForwardPass(0) BackwardPass(0)
1: LoadMicroBatch(0) ForwardPass(0) BackwardPass(0) ReduceGrads() OptimizerStep()
]])
  expect(stage_out_of_range EXIT 1 STDERR_HAS "strata-pipe: PipeSchedule: stage_id 2 is out of range for 2 stages"
    ARGS schedule --schedule train --stages 2 --micro-batches 4 --stage 2)
  expect(unknown_schedule EXIT 1 STDERR_HAS "strata-pipe: make_schedule: unknown schedule \"zigzag\""
    ARGS schedule --schedule zigzag --stages 2 --micro-batches 4)
  # ZB-H1 (pipe/planned_schedule.cpp): 1F1B's order of F and B, with W where the stage would wait.
  expect(zb_h1 EXIT 0 ARGS schedule --schedule zb-h1 --stages 2 --micro-batches 3 --stage 1 STDOUT [[0:
1: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)
2: RecvActivation(1) BackwardInput(0)
3: SendGrad(0) LoadMicroBatch(1) ForwardPass(1)
4: BackwardInput(1)
5: SendGrad(1) BackwardWeight(0)
6: RecvActivation(2) LoadMicroBatch(2) ForwardPass(2)
7: BackwardInput(2)
8: SendGrad(2) BackwardWeight(1)
9: BackwardWeight(2) ReduceTiedGrads() ReduceGrads() OptimizerStep()
]])
  expect(interleaved_needs_multiple EXIT 1 STDERR_HAS "micro_batches (3) must be a multiple of stages (2)"
    ARGS schedule --schedule interleaved --stages 2 --micro-batches 3)
  expect(chunks_for_train EXIT 1 STDERR_HAS "the train schedule has 1 chunk per stage, got chunks = 3"
    ARGS schedule --schedule train --stages 2 --micro-batches 4 --chunks 3)
  # Step counts are ints: a count that would wrap is refused (it used to print nothing and exit 0).
  foreach(name train inference gpipe dataparallel zb-h1)
    expect(huge_${name} EXIT 1
      STDERR_HAS "PipeSchedule: 2147483647 micro-batches + 2 stages is more than the 1073741824 a schedule's step"
      ARGS schedule --schedule ${name} --stages 2 --micro-batches 2147483647 --stage 0)
  endforeach()

elseif(GROUP STREQUAL "partition")
  # The heaviest stage weighs 6, and no split does better.
  expect(parameters EXIT 0 ARGS partition --method parameters --weights 5,1,1,1,4,4 --stages 3 STDOUT [[
0 2 5 6
6 6 4
]])
  # Layer counts: 10 layers into 4 stages, the larger stages first.
  expect(uniform EXIT 0 ARGS partition --method uniform --weights 1,1,1,1,1,1,1,1,1,1 --stages 4 STDOUT [[
0 3 6 8 10
3 3 2 2
]])
  # Only the Linear layers count (the match ignores case): two of them per stage.
  expect(type_regex EXIT 0 ARGS partition --method type:linear --weights 10,0,10,0,10,10
    --names Linear,ReLU,Linear,ReLU,Linear,Linear --stages 2 STDOUT [[
0 3 6
2 2
]])
  expect_usage_error(type_without_names "--method type:Linear needs --names"
    partition --method type:Linear --weights 1,2 --stages 2)
  expect_usage_error(names_count "expected one --names entry per --weights entry, got 1 and 2"
    partition --method type:Linear --weights 1,2 --names Linear --stages 2)
  expect_usage_error(negative_weight "--weights must be at least 0, got -1"
    partition --method parameters --weights 3,-1 --stages 2)
  expect_usage_error(empty_weight "--weights has an empty entry: '3,,1'"
    partition --method parameters --weights 3,,1 --stages 2)
  expect(unknown_method EXIT 1 STDERR_HAS "strata-pipe: method_weights: unknown partition method 'layers'"
    ARGS partition --method layers --weights 1,2 --stages 2)
  # No plan with empty stages, which PipelineModule would reject; no allocation for absurd stage counts.
  foreach(method uniform parameters)
    expect(empty_stages_${method} EXIT 1
      STDERR_HAS "strata-pipe: partition_by_method: 2 layers cannot fill 3 stages (each stage needs a layer)"
      ARGS partition --method ${method} --weights 1,1 --stages 3)
  endforeach()
  expect(huge_stages EXIT 1 STDERR_HAS "strata-pipe: partition_by_method: 1 layers cannot fill 2147483647 stages"
    ARGS partition --method uniform --weights 1 --stages 2147483647)

elseif(GROUP STREQUAL "topology")
  expect(pipe_data EXIT 0 ARGS topology --axes pipe,data --dims 2,2 STDOUT [[
rank 0: pipe=0 data=0
rank 1: pipe=0 data=1
rank 2: pipe=1 data=0
rank 3: pipe=1 data=1
]])
  expect_usage_error(zero_dim "--dims must be at least 1, got 0" topology --axes pipe,data --dims 2,0)
  expect(axes_dims_mismatch EXIT 1 STDERR_HAS "strata-pipe: ProcessTopology: 2 axes but 1 dims"
    ARGS topology --axes pipe,data --dims 2)

elseif(GROUP STREQUAL "validate")
  # Bubble: (S - 1) / (M + S - 1) = 1 / 5.
  execute_process(COMMAND ${EXE} validate --schedule train --stages 2 --micro-batches 4
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "^schedule train[^\n]*steps 10[^0-9][^\n]*bubble[^\n0-9]*0\\.20*[^0-9]")
    string(APPEND failures "validate train S=2 M=4: exit status ${rc}, expected 0 and a report with steps 10 and "
                           "bubble fraction 0.2\n--- stdout ---\n${out}--- stderr ---\n${err}\n")
  endif()
  expect(unknown_schedule EXIT 1 STDERR_HAS "unknown schedule \"zigzag\""
    ARGS validate --schedule zigzag --stages 2 --micro-batches 4)
  expect(zb_v EXIT 0 ARGS validate --schedule zb-v --stages 2 --micro-batches 4 STDOUT [[schedule zb-v  stages 2  micro-batches 4  chunks 2  steps 25  bubble 0.0400
time 12.5 (forward 1, backward input 1, backward weight 1, p2p 0)  lower bound 12.5  idle 0.0400  peak activations 2 stages
stage 0: compute 24 steps, peak live buffers 6 of 8, busy 12
stage 1: compute 24 steps, peak live buffers 5 of 8, busy 12
]])

  # Runs past the simulation budget are refused before they allocate (20000000 stages took 4.4 GB).
  expect(huge_stages EXIT 1 STDERR_HAS "validate_schedule: train schedule of 20000000 stages x 40000000 steps is 800000000000000 stage-steps, more than the 67108864 it simulates"
    ARGS validate --schedule train --stages 20000000 --micro-batches 1)
  expect(huge_gpipe EXIT 1 STDERR_HAS "stage-steps, more than the 67108864 it simulates"
    ARGS validate --schedule gpipe --stages 2 --micro-batches 100000000)
  expect(huge_zb_v EXIT 1 STDERR_HAS "zb-v schedule: planning 4096 stages x 4096 micro-batches x 2 chunks"
    ARGS validate --schedule zb-v --stages 4096 --micro-batches 4096)
  expect(int_max_stages EXIT 1 STDERR_HAS "PipeSchedule: 1 micro-batches + 2147483647 stages is more than"
    ARGS validate --schedule train --stages 2147483647 --micro-batches 1)

  # Files: a schedule written by hand, validated before any process starts; errors name the line and the action.
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
  file(WRITE ${WORK_DIR}/mine.csv "# GPipe on two stages, by hand\n0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n")
  expect(file EXIT 0 ARGS validate --file ${WORK_DIR}/mine.csv STDOUT [[schedule file  stages 2  micro-batches 2  steps 6  bubble 0.3333
time 9 (forward 1, backward input 1, backward weight 1, p2p 0)  lower bound 7  idle 0.3333  peak activations 2 stages
stage 0: compute 4 steps, peak live buffers 2 of 2, busy 6
stage 1: compute 4 steps, peak live buffers 2 of 2, busy 6
]])
  expect(file_over_memory EXIT 1 STDERR_HAS "mine.csv: line 2, action 2 (0F1): stage 0 then holds 2 stages' worth of activations, more than max_activations (1)"
    ARGS validate --file ${WORK_DIR}/mine.csv --max-activations 1)
  file(WRITE ${WORK_DIR}/deadlock.csv "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n")
  expect(file_deadlock EXIT 1 STDERR_HAS "deadlock.csv: deadlock: every stage waits for another: line 1, action 2 (0B0), line 2, action 2 (1F1)"
    ARGS validate --file ${WORK_DIR}/deadlock.csv)
  expect(file_missing EXIT 1 STDERR_HAS "ScheduleTable::load: cannot open '${WORK_DIR}/none.csv'"
    ARGS validate --file ${WORK_DIR}/none.csv)
  expect_usage_error(file_and_schedule "--file and --schedule exclude each other"
    validate --file ${WORK_DIR}/mine.csv --schedule train)
  expect_usage_error(cap_without_file "--max-activations goes with --file"
    validate --schedule train --stages 2 --micro-batches 2 --max-activations 1)

elseif(GROUP STREQUAL "simulate")
  # Forward, B and W one unit each: 1F1B idles 3(S - 1) units, ZB-H1 S - 1 and the looped ZB and ZB-V (S - 1) / 2,
  # each the least its layout allows (0% over the bound).
  expect(unit_costs EXIT 0 ARGS simulate --stages 4 --micro-batches 8 STDOUT [[stages 4  micro-batches 8  forward 1  backward input 1  backward weight 1  p2p 0
schedule              time  over bound   idle  peak activations (stages)
train                 33      +22.2%  0.273       4
gpipe                 33      +22.2%  0.273       8
interleaved/2       28.5      +11.8%  0.158     5.5
zb-h1                 27       +0.0%  0.111       4
zb-interleaved/2    25.5       +0.0%  0.059       4
zb-v                25.5       +0.0%  0.059       4
dualpipe-v          25.5       +0.0%  0.059     4.5
recommended: zb-interleaved
]])
  expect(not_a_multiple EXIT 0 ARGS simulate --stages 4 --micro-batches 6 --p2p 0.25 --backward-weight 0.5
    STDOUT [[stages 4  micro-batches 6  forward 1  backward input 1  backward weight 0.5  p2p 0.25
schedule              time  over bound   idle  peak activations (stages)
train               25.5      +27.5%  0.412       4
gpipe                 24      +20.0%  0.375       6
interleaved         not defined: micro-batches (6) must be a multiple of stages (4)
zb-h1               22.5      +12.5%  0.333       4
zb-interleaved/2   26.75      +55.1%  0.439       4
zb-v               25.75      +49.3%  0.417       4
dualpipe-v          not defined: micro-batches (6) must be at least twice the stages (4)
recommended: zb-h1
]])
  # A transfer's latency overlaps the messages in flight on its link, its bytes queue there: 2 s of latency and
  # 2 s of bytes cost 1F1B and ZB-H1 the same (none waits for its link), but GPipe, the interleaving, the
  # looped ZB, the V and DualPipeV, which send the next before the last has arrived, more for the bytes.
  expect(latency EXIT 0 ARGS simulate --stages 2 --micro-batches 4 --p2p 2
    STDOUT [[stages 2  micro-batches 4  forward 1  backward input 1  backward weight 1  p2p 2
schedule              time  over bound   idle  peak activations (stages)
train                 23      +53.3%  0.478       2
gpipe                 20      +33.3%  0.400       4
interleaved/2         33     +127.6%  0.636     2.5
zb-h1                 21      +40.0%  0.429       2
zb-interleaved/2    44.5     +206.9%  0.730       2
zb-v                32.5     +124.1%  0.631       2
dualpipe-v            24      +65.5%  0.500     2.5
recommended: zb-h1
]])
  expect(bandwidth EXIT 0 ARGS simulate --stages 2 --micro-batches 4 --bytes 2e9 --bandwidth 1e9
    STDOUT [[stages 2  micro-batches 4  forward 1  backward input 1  backward weight 1  p2p 0  bytes 2e+09  bandwidth 1e+09
schedule              time  over bound   idle  peak activations (stages)
train                 23      +53.3%  0.478       2
gpipe                 22      +46.7%  0.455       4
interleaved/2       38.5     +165.5%  0.688     2.5
zb-h1                 21      +40.0%  0.429       2
zb-interleaved/2      47     +224.1%  0.745       2
zb-v                34.5     +137.9%  0.652       2
dualpipe-v            26      +79.3%  0.538     2.5
recommended: zb-h1
]])
  expect_usage_error(bytes_alone "--bytes and --bandwidth go together"
    simulate --stages 2 --micro-batches 4 --bytes 2e9)
  expect_usage_error(negative_bandwidth "--bandwidth expects a finite non-negative number, got '-1'"
    simulate --stages 2 --micro-batches 4 --bytes 1 --bandwidth -1)
  expect_usage_error(negative_time "--p2p expects a finite non-negative number, got '-1'"
    simulate --stages 2 --micro-batches 4 --p2p -1)
  expect_usage_error(nan_time "--forward expects a finite non-negative number, got 'nan'"
    simulate --stages 2 --micro-batches 4 --forward nan)
  expect_usage_error(zero_chunks "--chunks must be at least 1, got 0"
    simulate --stages 2 --micro-batches 4 --chunks 0)
  # A file's schedule beside the named ones, for its stages and micro-batches.
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
  file(WRITE ${WORK_DIR}/mine.csv "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
  expect(file EXIT 0 ARGS simulate --file ${WORK_DIR}/mine.csv STDOUT [[stages 2  micro-batches 2  forward 1  backward input 1  backward weight 1  p2p 0
schedule              time  over bound   idle  peak activations (stages)
train                  9      +28.6%  0.333       2
gpipe                  9      +28.6%  0.333       2
interleaved/2        7.5      +15.4%  0.200       2
zb-h1                  7       +0.0%  0.143       2
zb-interleaved/2     6.5       +0.0%  0.077       2
zb-v                 6.5       +0.0%  0.077       2
dualpipe-v          not defined: micro-batches (2) must be at least twice the stages (2)
file                   9      +28.6%  0.333       2
recommended: zb-interleaved
]])
  expect_usage_error(file_other_counts "${WORK_DIR}/mine.csv schedules 2 stages x 2 micro-batches; leave out --stages and --micro-batches or give those"
    simulate --file ${WORK_DIR}/mine.csv --stages 4)

elseif(GROUP STREQUAL "trace")
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(trace ${WORK_DIR}/train.json)
  expect(trace EXIT 0 ARGS trace --schedule train --stages 2 --micro-batches 4 --out ${trace}
    STDOUT "wrote the train schedule (2 stages, 4 micro-batches) to ${trace}\n")
  if(NOT EXISTS ${trace})
    string(APPEND failures "trace: ${trace} was not written\n")
  elseif(PYTHON)
    execute_process(COMMAND ${PYTHON} -c "import json,sys; json.load(open(sys.argv[1]))" ${trace}
                    RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      string(APPEND failures "trace: ${trace} is not valid JSON:\n${err}\n")
    endif()
  else()
    file(READ ${trace} head LIMIT 1)
    if(NOT head STREQUAL "{")
      string(APPEND failures "trace: ${trace} does not start with '{'\n")
    endif()
  endif()
  expect(unwritable EXIT 1 STDERR_HAS "strata-pipe: cannot open ${WORK_DIR}/missing/train.json"
    ARGS trace --schedule train --stages 2 --micro-batches 4 --out ${WORK_DIR}/missing/train.json)
  # A rejected schedule leaves no file behind.
  expect(unknown_schedule EXIT 1 STDERR_HAS "unknown schedule \"zigzag\""
    ARGS trace --schedule zigzag --stages 2 --micro-batches 4 --out ${WORK_DIR}/zigzag.json)
  if(EXISTS ${WORK_DIR}/zigzag.json)
    string(APPEND failures "trace: a rejected schedule left ${WORK_DIR}/zigzag.json behind\n")
  endif()
  # A trace past what a viewer opens is refused before anything is simulated (this one asked for 8.5 GB).
  expect(huge_trace EXIT 1 STDERR_HAS "stage-steps, more than the 4194304 it simulates"
    ARGS trace --schedule train --stages 2 --micro-batches 100000000 --out ${WORK_DIR}/huge.json)
  if(EXISTS ${WORK_DIR}/huge.json)
    string(APPEND failures "trace: a refused trace left ${WORK_DIR}/huge.json behind\n")
  endif()
  file(WRITE ${WORK_DIR}/mine.csv "0F0,0B0\n1F0,1B0\n")
  expect(file_trace EXIT 0 ARGS trace --file ${WORK_DIR}/mine.csv --out ${WORK_DIR}/mine.json
    STDOUT "wrote the ${WORK_DIR}/mine.csv schedule (2 stages, 1 micro-batches) to ${WORK_DIR}/mine.json\n")
  if(NOT EXISTS ${WORK_DIR}/mine.json)
    string(APPEND failures "trace: ${WORK_DIR}/mine.json was not written\n")
  endif()

elseif(GROUP STREQUAL "export")
  # 1F1B on two stages in PyTorch's notation: a line per stage, transfers included.
  expect(train EXIT 0 ARGS export --schedule train --stages 2 --micro-batches 3 STDOUT [[0F0,0SEND_F0,0F1,0RECV_B0,0SEND_F1,0B0,0F2,0RECV_B1,0SEND_F2,0B1,0RECV_B2,0B2
1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RECV_F2,1F2,1B2,1SEND_B2
]])
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
  expect(to_file EXIT 0 ARGS export --schedule zb-v --stages 4 --micro-batches 8 --out ${WORK_DIR}/zbv.csv
    STDOUT "wrote the zb-v schedule (4 stages, 8 micro-batches) to ${WORK_DIR}/zbv.csv\n")
  # What export writes, validate reads back: the same schedule, on the same simulated clock.
  execute_process(COMMAND ${EXE} validate --schedule zb-v --stages 4 --micro-batches 8 OUTPUT_VARIABLE named)
  execute_process(COMMAND ${EXE} validate --file ${WORK_DIR}/zbv.csv OUTPUT_VARIABLE read RESULT_VARIABLE rc)
  string(REGEX MATCH "time [^\n]*" named_time "${named}")
  string(REGEX MATCH "time [^\n]*" read_time "${read}")
  if(NOT rc EQUAL 0 OR NOT named_time OR NOT named_time STREQUAL read_time)
    string(APPEND failures "export: the zb-v file validates to '${read_time}', the schedule to '${named_time}'\n")
  endif()
  expect(inference EXIT 1 STDERR_HAS "ScheduleTable::from_schedule: inference is not a pipelined training schedule"
    ARGS export --schedule inference --stages 2 --micro-batches 2)

elseif(GROUP STREQUAL "usage")
  foreach(help help --help -h "schedule --stages 2 --help")
    separate_arguments(args UNIX_COMMAND "${help}")
    execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "^usage: strata-pipe " OR NOT err STREQUAL "")
      string(APPEND failures "strata-pipe ${help}: exit status ${rc}, expected 0 and the usage on stdout only:\n"
                             "--- stdout ---\n${out}--- stderr ---\n${err}\n")
    endif()
  endforeach()
  expect_usage_error(no_command "no command given")
  expect_usage_error(unknown_command "unknown command 'plan'" plan --stages 2)
  expect_usage_error(unknown_option "schedule has no option --out" schedule --schedule train --stages 2 --out x)
  expect_usage_error(missing_value "--micro-batches needs a value"
    schedule --schedule train --stages 2 --micro-batches)
  expect_usage_error(option_as_value "--stages needs a value" schedule --schedule train --stages --micro-batches 4)
  expect_usage_error(missing_option "missing --micro-batches" schedule --schedule train --stages 2)
  expect_usage_error(zero_stages "--stages must be at least 1, got 0"
    schedule --schedule train --stages 0 --micro-batches 4)
  expect_usage_error(not_a_number "--stages expects an integer, got 'x'"
    schedule --schedule train --stages x --micro-batches 4)
  expect_usage_error(trailing_junk "--micro-batches expects an integer, got '4x'"
    validate --schedule train --stages 2 --micro-batches 4x)
  expect_usage_error(too_large "--stages is out of range: '99999999999'"
    validate --schedule train --stages 99999999999 --micro-batches 4)
  expect_usage_error(negative_stage "--stage must be at least 0, got -1"
    schedule --schedule train --stages 2 --micro-batches 4 --stage -1)
  expect_usage_error(twice "--stages is given twice"
    schedule --schedule train --stages 2 --stages 3 --micro-batches 4)
  expect_usage_error(positional "unexpected argument 'extra'" topology --axes pipe --dims 2 extra)

else()
  message(FATAL_ERROR "cli.cmake: unknown GROUP '${GROUP}'")
endif()

if(failures)
  message(FATAL_ERROR "strata-pipe ${GROUP}:\n${failures}")
endif()
