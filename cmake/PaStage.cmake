# Helpers that add tests and stages in whichever flavor is configured.

# pa_add_cu_test(NAME n SOURCES s... [LIBS l...] [LABELS l...] [TIMEOUT sec])
# An executable from .cu/.cpp sources, linked against common/ and gtest_main,
# registered with CTest under its own name.
function(pa_add_cu_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif()
  pa_cu_sources(${A_SOURCES})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE pa_common ${A_LIBS} GTest::gtest_main)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} --gtest_color=no)
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
endfunction()

# pa_add_stage(NN_name)
# Builds the stage twice, from steps/NN_name (the learner's skeleton) and from
# solutions/NN_name, each with its own copy of tests/test_NN_name.cpp:
#   test_NN_name_steps      labels: steps;stepNN      (fails until the TODOs are done)
#   test_NN_name_solutions  labels: solutions;stepNN  (must pass)
#   skeleton_fails_cleanly_NN_name  label: skeleton-check
#       runs the skeleton's tests and passes only if they fail the way a learner
#       should see them fail: gtest failures that name a TODO, no crash, no hang.
function(pa_add_stage stage)
  string(SUBSTRING ${stage} 0 2 nn)
  foreach(flavor steps solutions)
    file(GLOB srcs CONFIGURE_DEPENDS ${PA_SOURCE_ROOT}/${flavor}/${stage}/*.cu)
    if(NOT srcs)
      message(FATAL_ERROR "stage ${stage}: no .cu files in ${flavor}/${stage}")
    endif()
    pa_cu_sources(${srcs})
    set(lib ${flavor}_${stage})
    add_library(${lib} STATIC ${srcs})
    target_link_libraries(${lib} PUBLIC pa_common)
    pa_add_cu_test(NAME test_${stage}_${flavor}
                   SOURCES ${PA_SOURCE_ROOT}/tests/test_${stage}.cpp
                   LIBS ${lib}
                   LABELS "${flavor};step${nn}")
  endforeach()
  add_test(NAME skeleton_fails_cleanly_${stage}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:test_${stage}_steps> -DSTAGE=${stage}
                   -P ${PA_SOURCE_ROOT}/cmake/CheckSkeletonFails.cmake)
  set_tests_properties(skeleton_fails_cleanly_${stage} PROPERTIES
                       LABELS "skeleton-check" TIMEOUT 900)
endfunction()
