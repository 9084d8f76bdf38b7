# Runs the test binary of a skeleton generated from solutions/ (never the
# learner's steps/) and checks that it fails the way a learner should see it
# fail: ordinary test failures (exit code 1) whose messages name a TODO.
# A crash, a hang (timeout) or a clean pass are all defects of the markers in
# solutions/, so every message here is about solutions/.
if(NOT EXE OR NOT STAGE)
  message(FATAL_ERROR "usage: cmake -DEXE=<test binary> -DSTAGE=<NN_name> -P CheckSkeletonFails.cmake")
endif()
set(what "the skeleton generated from solutions/${STAGE}")
execute_process(COMMAND ${EXE} --gtest_color=no --gtest_brief=1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
set(all "${out}\n${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "${what} passes its tests: it still contains the answer. In solutions/${STAGE}, "
                      "mark the code the learner must write with //@ TODO blocks whose skeleton part "
                      "calls PA_TODO (see cmake/make_skeletons.py).")
endif()
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "${what} does not fail cleanly (exit: ${rc}). A skeleton's tests must fail with "
                      "messages, never crash or hang: fix the skeleton parts of the //@ TODO blocks in "
                      "solutions/${STAGE}.\n${all}")
endif()
if(NOT all MATCHES "TODO [0-9]+")
  message(FATAL_ERROR "${what} fails, but no message names a TODO: its placeholders must call "
                      "PA_TODO / PA_TODO_HOST.\n${all}")
endif()
string(REGEX MATCHALL "TODO [0-9]+" todos "${all}")
list(REMOVE_DUPLICATES todos)
message(STATUS "${what} fails as it should; unfinished: ${todos}")
