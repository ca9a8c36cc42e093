# cmake -DSRC=<source> -DBIN=<sub-build dir> -DKIND=thread|address -DGENERATOR=<g> -DCXX=<compiler>
#       -DWERROR=ON|OFF -P run_sanitized.cmake
# Configures a sanitizer build without the verilated device, builds the worker tests, runs them.
foreach(v SRC BIN KIND GENERATOR CXX)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_sanitized.cmake: -D${v}= is required")
  endif()
endforeach()
if(NOT WERROR)
  set(WERROR OFF)
endif()

function(step what)
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  string(TIMESTAMP t1 "%s")
  math(EXPR dt "${t1} - ${t0}")
  message(STATUS "sanitize ${KIND}: ${what}: ${dt} s")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "sanitize ${KIND}: ${what} failed (${rc})")
  endif()
endfunction()

step("configure" ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPUW_WITH_RTL=OFF -DTPUW_SANITIZE=${KIND} -DTPUW_WERROR=${WERROR})
step("build" ${CMAKE_COMMAND} --build ${BIN} --target tpuw_worker_test -j 2)

# Any report fails the run (a non-zero exit code).
set(ENV{TSAN_OPTIONS}
    "halt_on_error=1:second_deadlock_stack=1:report_thread_leaks=1:suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
set(ENV{ASAN_OPTIONS} "halt_on_error=1:detect_leaks=1:strict_init_order=1")
set(ENV{UBSAN_OPTIONS} "halt_on_error=1:print_stacktrace=1")
step("tpuw_worker_test" ${BIN}/tests/unit/worker/tpuw_worker_test --gtest_brief=1)
