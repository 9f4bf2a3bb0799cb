# mimalloc (Debian libmimalloc-dev) as the process allocator of Loom's executables: the `loom` binary, the test
# executables and the benchmarks. Materializing and simulating a plan allocates millions of small, short-lived
# objects (sub-ops, instructions, maps), from both cores at once; glibc's malloc spent a third of llama3-8b auto's
# CPU (docs/search.md, "Speed": 5.0 s wall with glibc, 3.4 s with mimalloc, the same plan to the byte).
# Linked (not preloaded) so that every run gets it; the link is kept even where the linker would drop a library
# no symbol names (--no-as-needed), because overriding malloc is the point. Not in sanitizer or fuzz builds: ASan
# and libFuzzer bring their own allocator. The Python extension keeps the interpreter's malloc (a library loaded
# by dlopen cannot take malloc over from a running process).
option(LOOM_MIMALLOC "Link mimalloc into Loom's executables as their allocator" ON)
if(LOOM_MIMALLOC AND (LOOM_SANITIZE OR LOOM_FUZZ))
  message(STATUS "loom: mimalloc off (sanitizer or fuzz build: their allocator wins)")
  set(LOOM_MIMALLOC OFF)
endif()
if(LOOM_MIMALLOC)
  find_package(mimalloc 2.0 REQUIRED)
  message(STATUS "loom: mimalloc ${mimalloc_VERSION} as the executables' allocator")
endif()

# Makes mimalloc the allocator of an executable target (nothing where LOOM_MIMALLOC is off).
function(loom_fast_malloc target)
  if(LOOM_MIMALLOC)
    target_link_libraries(${target} PRIVATE -Wl,--push-state,--no-as-needed mimalloc -Wl,--pop-state)
  endif()
endfunction()
