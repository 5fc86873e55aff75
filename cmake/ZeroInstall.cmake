# Install rules and the CMake and pkg-config packages (docs/cpp-api.md,
# "Using ZeroEngine from your own project"). Included from the top-level CMakeLists.txt after every library and
# program is defined; nothing here builds code.
#
#   cmake --install build --prefix P  installs
#     P/bin/zero-*                          every zero-* program
#     P/include/zeroengine/<folder>/*.h     the public headers (below)
#     P/lib/libze_*.a                       the archives behind the imported targets
#     P/lib/cmake/ZeroEngine/               ZeroEngineConfig.cmake, its version file, the targets
#     P/lib/pkgconfig/zeroengine.pc         (and zeroengine-cuda.pc in a CUDA build)
#
# The imported targets: ZeroEngine::engine (the CPU API: Engine, Gpt, Module,
# configs, checkpoints, data, the CPU backend, communicators), and, when the
# build has CUDA, ZeroEngine::cuda (the CUDA backend and NCCL communicator).
# The archives themselves are exported as ZeroEngine::ze_<name>.
#
# The public headers are the include closure of a few entry headers, computed
# at install time (cmake/ZeroPublicHeaders.cmake): an installed header never
# names a project header that is not installed, and headers nothing public
# includes (kernels' *_impl.h, CUDA .cuh files, the tools' internals) stay
# private. tests/install checks the installed tree for both.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ZE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ZeroEngine)
set(ZE_INSTALL_HEADERDIR ${CMAKE_INSTALL_INCLUDEDIR}/zeroengine)

# --- The umbrella targets a user links -----------------------------------------
add_library(ze_api INTERFACE)
target_link_libraries(ze_api INTERFACE ze_engine ze_data ze_config ze_checkpoint ze_backend_cpu)
# The headers are C++20: a program linking ZeroEngine::engine compiles as C++20.
target_compile_features(ze_api INTERFACE cxx_std_20)
set_target_properties(ze_api PROPERTIES EXPORT_NAME engine)
add_library(ZeroEngine::engine ALIAS ze_api)
set(ze_api_roots ze_api)
if(ZE_HAVE_CUDA)
  add_library(ze_cuda_api INTERFACE)
  target_link_libraries(ze_cuda_api INTERFACE ze_api ze_backend_cuda)
  if(ZE_HAVE_NCCL)
    target_link_libraries(ze_cuda_api INTERFACE ze_comm_nccl)
  endif()
  set_target_properties(ze_cuda_api PROPERTIES EXPORT_NAME cuda)
  add_library(ZeroEngine::cuda ALIAS ze_cuda_api)
  list(APPEND ze_api_roots ze_cuda_api)
endif()

# --- The project targets behind them --------------------------------------------
# The link dependencies of `target` (its own and its interface's) that are
# targets of this project (ze_*), in `out`.
function(ze_project_deps target out)
  get_target_property(type ${target} TYPE)
  set(items)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(own ${target} LINK_LIBRARIES)
    if(own)
      list(APPEND items ${own})
    endif()
  endif()
  get_target_property(iface ${target} INTERFACE_LINK_LIBRARIES)
  if(iface)
    list(APPEND items ${iface})
  endif()
  set(deps)
  foreach(item IN LISTS items)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(item MATCHES "^ze_" AND TARGET ${item})
      list(APPEND deps ${item})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES deps)
  set(${out} ${deps} PARENT_SCOPE)
endfunction()

# Depth-first post-order from `roots`: a target comes after everything it
# links, so the reverse of `out` is a valid static link order.
function(ze_dependency_postorder out)
  set(order)
  set(stack)
  foreach(root IN LISTS ARGN)
    list(APPEND stack "enter:${root}")
  endforeach()
  set(seen)
  while(stack)
    list(POP_BACK stack entry)
    string(REGEX REPLACE "^(enter|leave):" "" t "${entry}")
    if(entry MATCHES "^leave:")
      list(APPEND order ${t})
    elseif(NOT t IN_LIST seen)
      list(APPEND seen ${t})
      list(APPEND stack "leave:${t}")
      ze_project_deps(${t} deps)
      list(REVERSE deps)
      foreach(d IN LISTS deps)
        if(NOT d IN_LIST seen)
          list(APPEND stack "enter:${d}")
        endif()
      endforeach()
    endif()
  endwhile()
  set(${out} ${order} PARENT_SCOPE)
endfunction()

ze_dependency_postorder(ze_export_targets ${ze_api_roots})

# The build tree's include root is the source root; an installed target's is
# P/include/zeroengine (install(TARGETS ... INCLUDES DESTINATION) adds it).
foreach(t IN LISTS ze_export_targets)
  get_target_property(dirs ${t} INTERFACE_INCLUDE_DIRECTORIES)
  if(dirs)
    set(fixed)
    foreach(d IN LISTS dirs)
      string(FIND "${d}" "${PROJECT_SOURCE_DIR}" in_source)
      string(FIND "${d}" "${PROJECT_BINARY_DIR}" in_build)
      if(in_source EQUAL 0 OR in_build EQUAL 0)
        list(APPEND fixed "$<BUILD_INTERFACE:${d}>")
      else()
        list(APPEND fixed "${d}")
      endif()
    endforeach()
    set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
  endif()
endforeach()

install(TARGETS ${ze_export_targets}
        EXPORT ZeroEngineTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${ZE_INSTALL_HEADERDIR})
install(EXPORT ZeroEngineTargets NAMESPACE ZeroEngine:: DESTINATION ${ZE_INSTALL_CMAKEDIR})
# The same package in the build tree: -DZeroEngine_DIR=<build>.
export(EXPORT ZeroEngineTargets NAMESPACE ZeroEngine:: FILE ${PROJECT_BINARY_DIR}/ZeroEngineTargets.cmake)

# --- The programs ------------------------------------------------------------
# Every zero-* executable under the library folders (runtime/tools and any
# added later). They keep the run path to the libraries they linked outside
# the system's (CUDA's), so an installed zero-train runs without LD_LIBRARY_PATH.
function(ze_collect_programs dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(found)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE" AND t MATCHES "^zero-")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    ze_collect_programs(${sub} sub_found)
    list(APPEND found ${sub_found})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

set(ze_programs)
foreach(dir core kernels comm graph offload zero runtime)
  ze_collect_programs(${PROJECT_SOURCE_DIR}/${dir} found)
  list(APPEND ze_programs ${found})
endforeach()
if(ze_programs)
  set_target_properties(${ze_programs} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ${ze_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# --- The public headers ------------------------------------------------------
# What a program using zero::initialize, Engine, Gpt, Module (with the
# recorded ops of a forward-only module: graph/functional.h; freezing
# parameters: graph/freeze.h), configs,
# checkpoints, data and communicators includes, and every header those include
# (cmake/ZeroPublicHeaders.cmake computes the closure when installing).
set(ze_public_entry_headers
  runtime/engine/engine.h
  graph/gpt.h
  graph/layers.h
  graph/functional.h
  graph/freeze.h
  runtime/checkpoint/checkpoint.h
  runtime/checkpoint/hf_weights.h
  runtime/config/run_config.h
  runtime/data/*.h
  kernels/cpu/cpu_backend.h
  comm/*.h
)
set(ze_public_excluded_headers comm/nccl_communicator.h)
if(ZE_HAVE_CUDA)
  list(APPEND ze_public_entry_headers kernels/cuda/cuda_backend.h)
  if(ZE_HAVE_NCCL)
    set(ze_public_excluded_headers "")
  endif()
endif()
list(JOIN ze_public_entry_headers "\" \"" ze_entries_quoted)
install(CODE "include(\"${CMAKE_CURRENT_LIST_DIR}/ZeroPublicHeaders.cmake\")
ze_install_public_headers(\"${PROJECT_SOURCE_DIR}\" \"\${CMAKE_INSTALL_PREFIX}/${ZE_INSTALL_HEADERDIR}\"
                          \"${ze_public_excluded_headers}\" \"${ze_entries_quoted}\")")

# --- The CMake package ---------------------------------------------------------
set(ZE_CONFIG_HAVE_CUDA ${ZE_HAVE_CUDA})
set(ZE_CONFIG_HAVE_NCCL ${ZE_HAVE_NCCL})
set(ZE_CONFIG_HAVE_LIBURING OFF)
if(ZE_HAVE_NVME_OFFLOAD)
  set(ZE_CONFIG_HAVE_LIBURING ON)
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/ZeroEngineConfig.cmake.in
               ${PROJECT_BINARY_DIR}/ZeroEngineConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ZeroEngineConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ZeroEngineConfig.cmake
              ${PROJECT_BINARY_DIR}/ZeroEngineConfigVersion.cmake
        DESTINATION ${ZE_INSTALL_CMAKEDIR})

# --- pkg-config ----------------------------------------------------------------
# The archives in link order (each before the archives it needs), then the
# system libraries: a pkg-config module where the system has one (Requires),
# flags otherwise. `skip`: the targets a .pc this one Requires already lists.
function(ze_pc_fields root skip out_libs out_requires out_flags out_cflags)
  ze_dependency_postorder(order ${root})
  list(REVERSE order)
  set(libs)
  set(requires)
  set(flags)
  set(cflags)
  foreach(t IN LISTS order)
    if(t IN_LIST skip)
      continue()
    endif()
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "STATIC_LIBRARY")
      get_target_property(name ${t} OUTPUT_NAME)
      if(NOT name)
        set(name ${t})
      endif()
      list(APPEND libs "-l${name}")
    endif()
    if(t STREQUAL "ze_nccl")
      list(APPEND cflags "-I${ZE_NCCL_INCLUDE}")  # its include directory is a build-interface one
    endif()
    get_target_property(defs ${t} INTERFACE_COMPILE_DEFINITIONS)
    if(defs)
      foreach(d IN LISTS defs)
        list(APPEND cflags "-D${d}")
      endforeach()
    endif()
    set(items)
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      if(prop STREQUAL "LINK_LIBRARIES" AND type STREQUAL "INTERFACE_LIBRARY")
        continue()
      endif()
      get_target_property(v ${t} ${prop})
      if(v)
        list(APPEND items ${v})
      endif()
    endforeach()
    foreach(item IN LISTS items)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
      string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" item "${item}")
      if(item MATCHES "^ze_" OR item MATCHES "^::@")
        # Our own targets are in `order`; ::@ marks which directory linked.
      elseif(item MATCHES "^absl::(.+)$")
        list(APPEND requires "absl_${CMAKE_MATCH_1}")
      elseif(item STREQUAL "nlohmann_json::nlohmann_json")
        list(APPEND requires nlohmann_json)
      elseif(item STREQUAL "PkgConfig::LIBURING")
        list(APPEND requires liburing)
      elseif(item STREQUAL "MPI::MPI_C")
        list(APPEND requires ${ZE_PC_MPI_MODULE})
      elseif(item STREQUAL "DNNL::dnnl")
        list(APPEND flags -ldnnl)
      elseif(item MATCHES "^OpenMP::")
        list(APPEND flags -fopenmp)
        list(APPEND cflags -fopenmp)
      elseif(item STREQUAL "Threads::Threads")
        list(APPEND flags -pthread)
        list(APPEND cflags -pthread)
      elseif(item MATCHES "^CUDA::(.+)$")
        list(APPEND flags "-L${CUDAToolkit_LIBRARY_DIR}" "-l${CMAKE_MATCH_1}")
        list(APPEND cflags "-I${CUDAToolkit_INCLUDE_DIRS}")
      elseif(item MATCHES "^/.*/lib([^/]+)\\.(so|a)$")
        get_filename_component(libdir ${item} DIRECTORY)
        list(APPEND flags "-L${libdir}" "-l${CMAKE_MATCH_1}")
      else()
        message(WARNING "zeroengine.pc: no pkg-config mapping for ${t}'s dependency ${item}; "
                        "add one in cmake/ZeroInstall.cmake")
      endif()
    endforeach()
    get_target_property(incs ${t} INTERFACE_INCLUDE_DIRECTORIES)
    if(incs)
      foreach(i IN LISTS incs)
        string(FIND "${i}" "${PROJECT_SOURCE_DIR}" in_source)
        if(NOT i MATCHES "^\\$<" AND NOT in_source EQUAL 0)
          list(APPEND cflags "-I${i}")
        endif()
      endforeach()
    endif()
  endforeach()
  foreach(v libs requires flags cflags)
    list(REMOVE_DUPLICATES ${v})
    list(JOIN ${v} " " ${v})
  endforeach()
  list(JOIN requires ", " requires)
  set(${out_libs} "${libs}" PARENT_SCOPE)
  set(${out_requires} "${requires}" PARENT_SCOPE)
  set(${out_flags} "${flags}" PARENT_SCOPE)
  set(${out_cflags} "${cflags}" PARENT_SCOPE)
endfunction()

# Open MPI's C module is ompi-c (Debian also has the alternatives' mpi-c).
set(ZE_PC_MPI_MODULE ompi-c)
if(PkgConfig_FOUND)
  pkg_check_modules(ZE_PC_OMPI_C QUIET ompi-c)
  if(NOT ZE_PC_OMPI_C_FOUND)
    set(ZE_PC_MPI_MODULE mpi-c)
  endif()
endif()

file(RELATIVE_PATH ZE_PC_PREFIX_FROM_PCDIR
     /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" ZE_PC_PREFIX_FROM_PCDIR "${ZE_PC_PREFIX_FROM_PCDIR}")

function(ze_write_pc name description root skip extra_requires)
  ze_pc_fields(${root} "${skip}" libs requires flags cflags)
  if(extra_requires)
    if(requires)
      set(requires "${extra_requires}, ${requires}")
    else()
      set(requires "${extra_requires}")
    endif()
  endif()
  set(ZE_PC_NAME ${name})
  set(ZE_PC_DESCRIPTION "${description}")
  set(ZE_PC_LIBS "${libs} ${flags}")
  set(ZE_PC_REQUIRES "${requires}")
  set(ZE_PC_CFLAGS "${cflags}")
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/zeroengine.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()

ze_write_pc(zeroengine "ZeRO-style sharded training in C++ (CPU API)" ze_api "" "")
if(ZE_HAVE_CUDA)
  ze_dependency_postorder(ze_cpu_targets ze_api)
  ze_write_pc(zeroengine-cuda "ZeroEngine's CUDA backend and NCCL communicator"
              ze_cuda_api "${ze_cpu_targets}" zeroengine)
endif()

set(ze_cuda_target_note "")
if(ZE_HAVE_CUDA)
  set(ze_cuda_target_note " ZeroEngine::cuda")
endif()
list(JOIN ze_programs " " ze_programs_text)
message(STATUS "Install: ZeroEngine::engine${ze_cuda_target_note}, zeroengine.pc, "
               "the public headers, ${ze_programs_text}")
