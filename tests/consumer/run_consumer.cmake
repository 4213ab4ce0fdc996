# Builds and runs tests/consumer/project against actsparse, either found with
# find_package in an install prefix (MODE=find_package) or added with add_subdirectory.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(gen -G Ninja)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
set(consumer ${CMAKE_CURRENT_LIST_DIR}/project)
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} ${gen} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix -DACTSPARSE_BUILD_TESTS=OFF -DACTSPARSE_BUILD_BENCH=OFF
      -DACTSPARSE_BUILD_EXAMPLES=OFF)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib)
  run(${CMAKE_COMMAND} ${gen} -S ${consumer} -B ${WORK_DIR}/app -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DUSE_FIND_PACKAGE=ON)
else()
  run(${CMAKE_COMMAND} ${gen} -S ${consumer} -B ${WORK_DIR}/app -DCMAKE_CXX_COMPILER=${CXX}
      -DUSE_FIND_PACKAGE=OFF -DACTSPARSE_SOURCE_DIR=${SOURCE_DIR})
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/app)
run(${WORK_DIR}/app/consumer)
message(STATUS "consumer (${MODE}) built and ran")
