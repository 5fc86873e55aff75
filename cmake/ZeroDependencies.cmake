# Finds every dependency from the operating system's packages (and CUDA from
# /usr/local/cuda), then ze_print_summary() says what was found and what each
# one enables. Required: oneDNN, Abseil, nlohmann/json, OpenMP, Open MPI,
# and for the tokenizers PCRE2, ICU and SentencePiece.
# Optional: CUDA/cuBLAS/NCCL, liburing, GoogleTest, Google Benchmark.

find_package(OpenMP REQUIRED)
find_package(dnnl REQUIRED)
find_package(absl REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
if(MPI_C_FOUND)
  string(REGEX MATCH "Open MPI v[0-9.]+" ZE_MPI_LIBRARY_VERSION "${MPI_C_LIBRARY_VERSION_STRING}")
endif()
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(LIBURING IMPORTED_TARGET liburing)
endif()
# The tokenizers (runtime/data): PCRE2 runs tokenizer.json's split patterns,
# ICU gives the Unicode normal forms and categories, libsentencepiece reads
# tokenizer.model.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_package(ICU REQUIRED COMPONENTS uc)
if(ZE_BUILD_TESTS)
  find_package(GTest)
  if(NOT GTest_FOUND)
    set(ZE_BUILD_TESTS OFF)
  endif()
endif()
if(ZE_BUILD_BENCH)
  find_package(benchmark)
  if(NOT benchmark_FOUND)
    set(ZE_BUILD_BENCH OFF)
  endif()
endif()

set(ZE_HAVE_CUDA OFF)
set(ZE_HAVE_NCCL OFF)
if(ZE_ENABLE_CUDA AND CMAKE_CUDA_COMPILER)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper, plus Ampere as the older architecture every build also proves.
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(ZE_HAVE_CUDA ON)
    find_library(ZE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(ZE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(ZE_NCCL_LIBRARY AND ZE_NCCL_INCLUDE)
      set(ZE_HAVE_NCCL ON)
      add_library(ze_nccl INTERFACE)
      # Installed, the library and nccl.h's directory are the ones
      # ZeroEngineConfig.cmake finds on the user's machine and adds to the
      # imported target, not this machine's paths (zeroengine-cuda.pc,
      # which cannot search, carries this machine's -I/-L like CUDA's).
      target_link_libraries(ze_nccl INTERFACE $<BUILD_INTERFACE:${ZE_NCCL_LIBRARY}>)
      target_include_directories(ze_nccl INTERFACE $<BUILD_INTERFACE:${ZE_NCCL_INCLUDE}>)
    endif()
  endif()
endif()

function(ze_found_line name found enables)
  if(found)
    message(STATUS "  [x] ${name}: ${enables}")
  else()
    message(STATUS "  [ ] ${name}: not found -- ${enables} is off")
  endif()
endfunction()

function(ze_print_summary)
  message(STATUS "ZeroEngine ${PROJECT_VERSION} (${CMAKE_BUILD_TYPE}) dependencies:")
  ze_found_line("oneDNN ${dnnl_VERSION}" ON "CPU GEMMs (fp32, bf16), layer norm, GELU")
  ze_found_line("Abseil" ON "Status/StatusOr, string formatting, hash maps")
  ze_found_line("nlohmann/json ${nlohmann_json_VERSION}" ON "configs, metrics, manifests")
  ze_found_line("OpenMP ${OpenMP_CXX_VERSION}" ON "threaded CPU kernels")
  ze_found_line("PCRE2 ${PCRE2_VERSION}, ICU ${ICU_VERSION}" ON "tokenizer.json split patterns, Unicode normal forms")
  ze_found_line("SentencePiece ${SENTENCEPIECE_VERSION}" ON "tokenizer.model")
  ze_found_line("CUDA ${CUDAToolkit_VERSION} + cuBLAS" ${ZE_HAVE_CUDA}
                "the CUDA backend (archs: ${CMAKE_CUDA_ARCHITECTURES})")
  ze_found_line("NCCL" ${ZE_HAVE_NCCL} "GPU collectives")
  ze_found_line("MPI ${MPI_C_VERSION} (${ZE_MPI_LIBRARY_VERSION})" ${MPI_C_FOUND} "multi-rank runs under mpirun")
  ze_found_line("liburing ${LIBURING_VERSION}" ${LIBURING_FOUND} "NVMe offload I/O")
  ze_found_line("GoogleTest" ${ZE_BUILD_TESTS} "the test suite (ctest)")
  ze_found_line("Google Benchmark ${benchmark_VERSION}" ${ZE_BUILD_BENCH} "bench/")
endfunction()
