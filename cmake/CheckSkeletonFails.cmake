# Runs a skeleton's test binary and checks that it fails the way a learner should
# see it fail: ordinary test failures (exit code 1) whose messages name a TODO.
# A crash, a hang (timeout) or a clean pass are all defects of the skeleton.
if(NOT EXE OR NOT STAGE)
  message(FATAL_ERROR "usage: cmake -DEXE=<test binary> -DSTAGE=<NN_name> -P CheckSkeletonFails.cmake")
endif()
execute_process(COMMAND ${EXE} --gtest_color=no --gtest_brief=1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
set(all "${out}\n${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "steps/${STAGE}: the skeleton's tests PASS. The skeleton contains the answer; "
                      "regenerate it from solutions/ with cmake/make_skeletons.py.")
endif()
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "steps/${STAGE}: the skeleton's tests did not fail cleanly (exit: ${rc}). "
                      "They must fail with messages, never crash or hang.\n${all}")
endif()
if(NOT all MATCHES "TODO [0-9]+")
  message(FATAL_ERROR "steps/${STAGE}: the skeleton's tests fail, but no message names a TODO.\n${all}")
endif()
string(REGEX MATCHALL "TODO [0-9]+" todos "${all}")
list(REMOVE_DUPLICATES todos)
message(STATUS "steps/${STAGE} fails as expected; unfinished: ${todos}")
