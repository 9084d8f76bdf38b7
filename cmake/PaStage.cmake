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

# The learner's skeletons, all of them: `cmake --build --preset steps` builds this.
add_custom_target(all_steps)

# pa_add_stage(NN_name)
# Builds the stage's kernels from two or three places, each linked with the same
# compiled tests/test_NN_name.cpp:
#   test_NN_name_solutions  from solutions/NN_name          labels: solutions;stepNN
#       the complete stage: part of the test suite, must pass.
#   test_NN_name_steps      from steps/NN_name              labels: steps;stepNN
#       the learner's own code: fails until the TODOs are done. Built only on
#       request (`bash cmake/course.sh step NN`), so the suite never depends on
#       work in progress.
#   skeleton_fails_cleanly_NN_name                           label: skeleton-check
#       (CPU flavor) the skeleton that cmake/make_skeletons.py generates from
#       solutions/NN_name into the build directory: its tests must fail the way a
#       learner should see them fail (gtest failures that name a TODO, no crash,
#       no hang). It never reads steps/, so finishing a stage cannot break it;
#       that the committed steps/ files are this same skeleton is checked by
#       `skeletons_up_to_date` (label maintainers, run by CI).
function(pa_add_stage stage)
  string(SUBSTRING ${stage} 0 2 nn)
  # The test source does not depend on which kernels it links: compile it once.
  add_library(test_${stage}_objects OBJECT ${PA_SOURCE_ROOT}/tests/test_${stage}.cpp)
  target_link_libraries(test_${stage}_objects PRIVATE pa_common GTest::gtest)

  _pa_stage_build(${stage} solutions ${PA_SOURCE_ROOT}/solutions/${stage} "solutions;step${nn}")
  file(GLOB steps_srcs CONFIGURE_DEPENDS ${PA_SOURCE_ROOT}/steps/${stage}/*.cu)
  if(steps_srcs)
    _pa_stage_build(${stage} steps ${PA_SOURCE_ROOT}/steps/${stage} "steps;step${nn}" EXCLUDE_FROM_ALL)
    add_dependencies(all_steps test_${stage}_steps)
  else()
    # A stage being written: its solution exists, its skeleton not yet.
    message(WARNING "stage ${stage}: steps/${stage} has no skeleton yet; "
                    "generate it with: python3 cmake/make_skeletons.py --stage ${stage}")
  endif()

  if(NOT PA_GPU)
    file(GLOB solution_files CONFIGURE_DEPENDS ${PA_SOURCE_ROOT}/solutions/${stage}/*)
    set(gen_dir ${CMAKE_BINARY_DIR}/generated_skeletons)
    set(generated)
    foreach(f IN LISTS solution_files)
      # make_skeletons.py writes only the files with markers (the learner's).
      file(READ ${f} text)
      string(FIND "${text}" "//@" marker)
      if(marker GREATER -1)
        get_filename_component(name ${f} NAME)
        list(APPEND generated ${gen_dir}/${stage}/${name})
      endif()
    endforeach()
    add_custom_command(
      OUTPUT ${generated}
      COMMAND ${Python3_EXECUTABLE} ${PA_SOURCE_ROOT}/cmake/make_skeletons.py --stage ${stage} --out ${gen_dir}
      DEPENDS ${solution_files} ${PA_SOURCE_ROOT}/cmake/make_skeletons.py
      COMMENT "Generating the skeleton of ${stage} from solutions/ (to check that it fails cleanly)"
      VERBATIM)
    _pa_stage_build(${stage} skeleton ${gen_dir}/${stage} "" GENERATED ${generated})
    add_test(NAME skeleton_fails_cleanly_${stage}
             COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:test_${stage}_skeleton> -DSTAGE=${stage}
                     -P ${PA_SOURCE_ROOT}/cmake/CheckSkeletonFails.cmake)
    set_tests_properties(skeleton_fails_cleanly_${stage} PROPERTIES LABELS "skeleton-check" TIMEOUT 900)
  endif()
endfunction()

# _pa_stage_build(stage flavor dir labels [EXCLUDE_FROM_ALL] [GENERATED files...])
# Library <flavor>_<stage> from the .cu files in dir, and test executable
# test_<stage>_<flavor>; registered with CTest when labels is not empty.
function(_pa_stage_build stage flavor dir labels)
  cmake_parse_arguments(A "EXCLUDE_FROM_ALL" "" "GENERATED" ${ARGN})
  set(exclude)
  if(A_EXCLUDE_FROM_ALL)
    set(exclude EXCLUDE_FROM_ALL)
  endif()
  if(A_GENERATED)
    list(FILTER A_GENERATED INCLUDE REGEX "\\.cu$")
    set(srcs ${A_GENERATED})
  else()
    file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cu)
  endif()
  if(NOT srcs)
    message(FATAL_ERROR "stage ${stage}: no .cu files in ${dir}")
  endif()
  pa_cu_sources(${srcs})
  add_library(${flavor}_${stage} STATIC ${exclude} ${srcs})
  target_link_libraries(${flavor}_${stage} PUBLIC pa_common)
  set(exe test_${stage}_${flavor})
  add_executable(${exe} ${exclude} $<TARGET_OBJECTS:test_${stage}_objects>)
  target_link_libraries(${exe} PRIVATE ${flavor}_${stage} pa_common GTest::gtest_main)
  if(labels)
    add_test(NAME ${exe} COMMAND ${exe} --gtest_color=no)
    set_tests_properties(${exe} PROPERTIES LABELS "${labels}" TIMEOUT 600)
  endif()
endfunction()
