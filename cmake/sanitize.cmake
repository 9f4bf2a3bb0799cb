# Sanitizer build (`make test-sanitize`, docs/sanitizers.md): LOOM_SANITIZE=address,undefined compiles and links
# every target of this build (the engine libraries, the `loom` binary, the test executables) with clang's
# AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer. Any UBSan finding aborts
# (-fno-sanitize-recover), so a report fails the test that triggered it. Frame pointers keep the reports'
# stacks whole. The prebuilt libraries (CBC, Z3, yaml-cpp, protobuf/ONNX, gtest) stay uninstrumented: ASan
# still sees their heap through the intercepted malloc/free, and none needs a suppression (docs/sanitizers.md).
set(LOOM_SANITIZE "" CACHE STRING "clang sanitizers for every target, comma-separated (address,undefined); empty: none")
if(LOOM_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LOOM_SANITIZE=${LOOM_SANITIZE} needs clang, not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++-19 (make test-sanitize does)")
  endif()
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${LOOM_SANITIZE})
  message(STATUS "loom: sanitizers ${LOOM_SANITIZE}")
endif()
