# Helpers: one library target per directory, tests built into a few binaries.
include(GoogleTest)

# tdock_cc_library(NAME SRCS a.cc b.cc DEPS x y)
function(tdock_cc_library NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${NAME} STATIC ${ARG_SRCS})
  target_include_directories(${NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${NAME} PUBLIC ${ARG_DEPS})
endfunction()

# tdock_cc_test(NAME SRCS ... DEPS ...): one gtest binary, each TEST a ctest entry.
function(tdock_cc_test NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  if(NOT ARG_SRCS)
    return()  # no test sources yet
  endif()
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  set(_env "")
  if(TDOCK_TSAN)
    # Debian's Abseil is not instrumented; see scripts/tsan.supp.
    set(_env ENVIRONMENT
        "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${PROJECT_SOURCE_DIR}/scripts/tsan.supp")
  endif()
  # Labelled by binary, so a lane can run some binaries' tests (ctest -L).
  gtest_discover_tests(${NAME} DISCOVERY_TIMEOUT 120 PROPERTIES TIMEOUT 300 LABELS ${NAME} ${_env})
endfunction()
