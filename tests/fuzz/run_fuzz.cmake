# Builds tests/fuzz/fuzz_llama2c.cpp with clang++ -fsanitize=fuzzer,address,undefined (the
# project's own build may use another compiler) and runs it for SECONDS over a copy of the seed
# corpus. Prints "FUZZ-SKIP: ..." (the test's skip pattern) when clang++ or libFuzzer is missing.
# Inputs: CLANGXX (clang++ or empty), SOURCE_DIR (the repository), WORK_DIR, SECONDS.
if(NOT CLANGXX)
  message("FUZZ-SKIP: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus)

# libFuzzer's runtime is a separate package (libclang-rt-14-dev): probe for it first.
file(WRITE ${WORK_DIR}/probe.cpp
     "#include <cstddef>\n#include <cstdint>\n"
     "extern \"C\" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n")
execute_process(COMMAND ${CLANGXX} -fsanitize=fuzzer,address ${WORK_DIR}/probe.cpp -o ${WORK_DIR}/probe
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message("FUZZ-SKIP: ${CLANGXX} cannot link -fsanitize=fuzzer,address (Debian: apt-get install libclang-rt-14-dev)\n${out}")
  return()
endif()

set(fuzzer ${WORK_DIR}/fuzz_llama2c)
execute_process(COMMAND ${CLANGXX} -std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
                        -fno-sanitize-recover=all -I${SOURCE_DIR}/include -I${SOURCE_DIR}/examples
                        ${SOURCE_DIR}/tests/fuzz/fuzz_llama2c.cpp -o ${fuzzer}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzzer failed:\n${out}")
endif()

# New inputs go to the first folder (in the build tree); the committed seeds are only read.
# Crash reproducers land in WORK_DIR (crash-*, leak-*, timeout-*, oom-*).
execute_process(COMMAND ${fuzzer} -max_total_time=${SECONDS} -rss_limit_mb=1024 -malloc_limit_mb=1024 -max_len=8192
                        -timeout=10 -print_final_stats=1 -artifact_prefix=${WORK_DIR}/ ${WORK_DIR}/corpus
                        ${SOURCE_DIR}/tests/fuzz/corpus
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz_llama2c found a problem (exit ${rc}); reproduce with ${fuzzer} <artifact>:\n${out}")
endif()
string(REGEX MATCH "stat::number_of_executed_units: [0-9]+" execs "${out}")
string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" done "${out}")
message(STATUS "fuzz_llama2c: no finding in ${SECONDS} s; ${execs}; ${done}")
