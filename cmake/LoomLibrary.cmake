# One CMake target per library (DESIGN.md): headers in include/loom/<lib>/, sources in src/<lib>/,
# tests in tests/<lib>/ built into one test executable per library. Sources may sit in sub-folders of
# src/<lib>/ (one concept each, e.g. src/exec/passes/).
function(loom_library name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cc)
  add_library(loom_${name} STATIC ${sources})
  target_include_directories(loom_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(loom_${name} PUBLIC ${ARG_DEPS})
endfunction()

function(loom_tests name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${name}/*.cc)
  add_executable(loom_${name}_tests ${sources})
  target_link_libraries(loom_${name}_tests PRIVATE loom_${name} ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  loom_fast_malloc(loom_${name}_tests)
  target_compile_definitions(loom_${name}_tests PRIVATE LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # Labelled by library, so a run can pick libraries (ctest -L, `make test-sanitize SANITIZE_LIBS=...`).
  gtest_discover_tests(loom_${name}_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${name})
endfunction()
