# The Python bindings (src/bindings) build only where LOOM_PYTHON names an interpreter that has pybind11:
# `make` passes the project's venv (.venv/bin/python, python/requirements.txt pins pybind11). Without it the
# engine, the CLI and the tests build as before.
set(LOOM_PYTHON "" CACHE FILEPATH "Python interpreter (with pybind11) to build the loom extension for")
set(LOOM_BINDINGS OFF)
if(LOOM_PYTHON)
  execute_process(COMMAND ${LOOM_PYTHON} -m pybind11 --cmakedir
                  OUTPUT_VARIABLE loom_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE loom_pybind11_missing ERROR_QUIET)
  if(loom_pybind11_missing)
    message(STATUS "loom: no Python bindings: ${LOOM_PYTHON} has no pybind11 (run: make venv)")
  else()
    set(Python_EXECUTABLE ${LOOM_PYTHON})
    find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
    set(pybind11_DIR ${loom_pybind11_dir})
    find_package(pybind11 CONFIG REQUIRED)
    set(LOOM_BINDINGS ON)
    message(STATUS "loom: Python bindings for ${Python_EXECUTABLE} (${Python_VERSION})")
  endif()
endif()
