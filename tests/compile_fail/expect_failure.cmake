# Compiles SOURCE and passes only if the compiler rejects it with the message named in the
# source's first line: `// expect: <text>`.
file(STRINGS ${SOURCE} first LIMIT_COUNT 1)
string(REGEX REPLACE "^// expect: " "" expected "${first}")
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be rejected")
endif()
string(FIND "${out}${err}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE} was rejected, but without the message '${expected}':\n${err}")
endif()
message(STATUS "rejected with: ${expected}")
