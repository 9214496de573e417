# Helper functions used by every folder's CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

function(dynvm_setup_toolchain)
  # Host-compiler flags only: nvcc (CUDA sources) does not take them.
  set(host "$<COMPILE_LANGUAGE:C,CXX>")
  add_compile_options("$<${host}:-Wall;-Wextra;-Wno-unused-parameter;-Wno-missing-field-initializers>")
  if(NOT DYNVM_SANITIZE STREQUAL "")
    # isa::CodeBuilder decodes every instruction it writes (Debug builds do so anyway).
    add_compile_definitions(DYNVM_CHECK_EMITTED)
  endif()
  if(DYNVM_SANITIZE STREQUAL "address")
    add_compile_options(
      "$<${host}:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>")
    add_link_options(-fsanitize=address,undefined)
  elseif(DYNVM_SANITIZE STREQUAL "thread")
    add_compile_options("$<${host}:-fsanitize=thread;-fno-omit-frame-pointer>")
    add_link_options(-fsanitize=thread)
  elseif(NOT DYNVM_SANITIZE STREQUAL "")
    message(FATAL_ERROR "DYNVM_SANITIZE must be '', 'address' or 'thread'")
  endif()
  if(DYNVM_BUILD_FUZZERS)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "DYNVM_BUILD_FUZZERS needs clang")
    endif()
    add_compile_options("$<${host}:-fsanitize=fuzzer-no-link>")
  endif()
  # dynvm_fuzzer lists each fuzzer's corpus here, afresh at every configure.
  file(REMOVE_RECURSE ${PROJECT_BINARY_DIR}/fuzz_corpus_dirs)
  if(NOT DYNVM_SANITIZE STREQUAL "" AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # Sanitizer reports need file:line, not variables: line tables alone compile about 10%
    # faster than -g and link in a third of the time (this overrides RelWithDebInfo's -g).
    add_compile_options("$<${host}:-gline-tables-only>")
    # Debug info names the build folder relative to the source root, so that ccache (whose
    # base_dir tools/test.sh sets to the clone) can reuse these objects in a clone elsewhere.
    add_compile_options("$<${host}:-fdebug-prefix-map=${PROJECT_SOURCE_DIR}=.>")
  endif()
  # LLVM's linker (Debian's lld) where present: a sanitizer build links its ~110 test, tool and
  # fuzzer executables about 4x faster than with ld.bfd (2.3 s -> 0.6 s each on 2 cores).
  # DYNVM_LINKER=default keeps the compiler's own.
  set(DYNVM_LINKER "auto" CACHE STRING "Linker: 'auto' (lld when found) or 'default'")
  if(DYNVM_LINKER STREQUAL "auto")
    find_program(DYNVM_LLD NAMES ld.lld)
    if(DYNVM_LLD)
      add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>")
    endif()
  elseif(NOT DYNVM_LINKER STREQUAL "default")
    message(FATAL_ERROR "DYNVM_LINKER must be 'auto' or 'default'")
  endif()
endfunction()

# The include contract (README.md, "Using dynvm from C++"): a user of the installed package writes
# #include "dynvm/vm/virtual_machine.h"; the headers name each other by their path in this
# repository ("kernels/tensor.h"), as the sources do. So every installed target puts two
# directories on its users' include path: <prefix>/include (for "dynvm/...") and
# <prefix>/include/dynvm (for the headers' own includes). In the build tree the repository root
# and the build directory (generated headers) play the second role.
set(DYNVM_INSTALL_INCLUDES "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/dynvm>")

# dynvm_public_headers(TARGET headers...): the public headers of a library (paths relative to
# the calling CMakeLists.txt). They are installed, under include/dynvm/<their folder>, when the
# library is (dynvm_install_package); internal headers, *_impl.h and test hooks are not listed.
function(dynvm_public_headers target)
  set(abs "")
  foreach(h ${ARGN})
    get_filename_component(h ${h} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND abs ${h})
  endforeach()
  set_property(TARGET ${target} APPEND PROPERTY DYNVM_PUBLIC_HEADERS ${abs})
endfunction()

# dynvm_library(NAME SRCS... [DEPS targets...] [PRIVATE_DEPS targets...] [HEADERS...] [COMPILE_OPTIONS...])
# A static library dynvm_NAME (alias dynvm::NAME) rooted at the repository for includes, with
# its public HEADERS (dynvm_public_headers). Whether it is installed is decided in one place,
# dynvm_install_package: only what a user of the package links.
function(dynvm_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS;HEADERS;COMPILE_OPTIONS" ${ARGN})
  add_library(dynvm_${name} STATIC ${ARG_SRCS})
  add_library(dynvm::${name} ALIAS dynvm_${name})
  target_include_directories(dynvm_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>
    ${DYNVM_INSTALL_INCLUDES})
  target_link_libraries(dynvm_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(ARG_COMPILE_OPTIONS)
    target_compile_options(dynvm_${name} PRIVATE ${ARG_COMPILE_OPTIONS})
  endif()
  set_target_properties(dynvm_${name} PROPERTIES EXPORT_NAME ${name})
  dynvm_public_headers(dynvm_${name} ${ARG_HEADERS})
endfunction()

# dynvm_test(NAME SRCS... [DEPS targets...] [LABELS labels...] [ARGS args...] [OWN_MAIN] [TIMEOUT s])
# A GoogleTest binary run by ctest as one test.
function(dynvm_test name)
  if(NOT DYNVM_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "OWN_MAIN" "TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock)
  if(DYNVM_BUILD_FUZZERS)
    # Coverage counters serve the fuzzers, which link the libraries, not the tests' own code.
    target_compile_options(${name} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize=fuzzer-no-link>")
  endif()
  if(NOT ARG_OWN_MAIN)
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
  endif()
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set(labels ${ARG_LABELS})
  if(NOT labels)
    set(labels unit)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
  if(ARG_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
endfunction()

# dynvm_device_test(NAME ...): dynvm_test for a test that needs a device (a GPU). Its main
# (tests/device_test_main.cc) exits with 77 when a case was skipped and none failed, which ctest
# reports as skipped (SKIP_RETURN_CODE), not passed. It depends on the CUDA module when built.
function(dynvm_device_test name)
  if(NOT DYNVM_BUILD_TESTS)
    return()
  endif()
  if(NOT TARGET dynvm_device_test_main)
    add_library(dynvm_device_test_main STATIC ${PROJECT_SOURCE_DIR}/tests/device_test_main.cc)
    target_link_libraries(dynvm_device_test_main PUBLIC GTest::gtest)
  endif()
  dynvm_test(${name} ${ARGN} OWN_MAIN)
  target_link_libraries(${name} PRIVATE dynvm_device_test_main)
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  if(DYNVM_WITH_CUDA)
    add_dependencies(${name} dynvm_cuda)
  endif()
endfunction()

# dynvm_benchmark(NAME SRCS... [DEPS targets...])
function(dynvm_benchmark name)
  if(NOT DYNVM_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()

# dynvm_fuzzer(NAME SRCS... [DEPS targets...] [CORPUS dirs...]): a libFuzzer binary
# (DYNVM_BUILD_FUZZERS only). tools/test.sh runs each fuzzer from a copy of its checked-in seed
# CORPUS: one or more folders, relative to the calling CMakeLists.txt, listed one per line in
# <build>/fuzz_corpus_dirs/NAME.
function(dynvm_fuzzer name)
  if(NOT DYNVM_BUILD_FUZZERS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;CORPUS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set(dirs "")
  foreach(dir ${ARG_CORPUS})
    get_filename_component(dir ${dir} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    string(APPEND dirs "${dir}\n")
  endforeach()
  file(WRITE ${PROJECT_BINARY_DIR}/fuzz_corpus_dirs/${name} "${dirs}")
endfunction()

# The installed package (README.md, "Using dynvm from C++"): the libraries a user links,
# dynvm::vm, dynvm::compiler and dynvm::onnx_importer (when built), their public headers, and
# the static libraries they are made of, which must be exported too (a static library's link
# dependencies must be). Those are exported as dynvm::internal_NAME: not part of the API, never
# linked by name. No cli, bench, testing or tools library is installed. (The command-line tools,
# the CUDA module and the Python package install themselves.)
function(dynvm_install_package)
  set(api dynvm_vm dynvm_compiler)
  if(TARGET dynvm_onnx_importer)
    list(APPEND api dynvm_onnx_importer)
  endif()
  # Every dynvm library the API libraries link, directly or not.
  set(closure "")
  set(queue ${api})
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST closure)
      continue()
    endif()
    list(APPEND closure ${t})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(deps ${t} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(deps ${t} LINK_LIBRARIES)
    endif()
    foreach(d ${deps})
      if(NOT TARGET "${d}")
        continue()
      endif()
      get_target_property(aliased ${d} ALIASED_TARGET)
      if(aliased)
        set(d ${aliased})
      endif()
      if(d MATCHES "^dynvm_")
        list(APPEND queue ${d})
      endif()
    endforeach()
  endwhile()
  foreach(t ${closure})
    if(NOT t IN_LIST api)
      get_target_property(name ${t} EXPORT_NAME)
      set_target_properties(${t} PROPERTIES EXPORT_NAME internal_${name})
    endif()
    install(TARGETS ${t} EXPORT dynvmTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
    get_property(headers TARGET ${t} PROPERTY DYNVM_PUBLIC_HEADERS)
    foreach(h ${headers})
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${h})
      get_filename_component(dir ${rel} DIRECTORY)
      install(FILES ${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dynvm/${dir})
    endforeach()
  endforeach()
  install(EXPORT dynvmTargets NAMESPACE dynvm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dynvm)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dynvmConfig.cmake.in
    ${PROJECT_BINARY_DIR}/dynvmConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dynvm)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/dynvmConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/dynvmConfig.cmake ${PROJECT_BINARY_DIR}/dynvmConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dynvm)
endfunction()
