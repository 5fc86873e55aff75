# The public headers: the include closure of a few entry headers, computed
# when `cmake --install` runs (so an #include added to a public header needs
# no re-configure, and editing one costs the build nothing). Included by the
# install script that cmake/ZeroInstall.cmake writes.
#
# ze_public_header_closure(<source dir> <out var> <entry> ...): every header an
# entry includes, directly or not, as #include "path" where path is a file
# under the source root (includes inside #if count too). Sorted, relative
# paths.

# The install script runs with no policies set; include() scopes this one.
cmake_policy(VERSION 3.25)

function(ze_public_header_closure source_dir out)
  set(queue ${ARGN})
  set(seen)
  while(queue)
    list(POP_FRONT queue h)
    if(h IN_LIST seen)
      continue()
    endif()
    if(NOT EXISTS ${source_dir}/${h})
      message(FATAL_ERROR "public header ${h} (cmake/ZeroInstall.cmake's entries) is not in ${source_dir}")
    endif()
    list(APPEND seen ${h})
    file(STRINGS ${source_dir}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" inc "${line}")
      if(EXISTS ${source_dir}/${inc} AND NOT inc IN_LIST seen)
        list(APPEND queue ${inc})
      endif()
    endforeach()
  endwhile()
  list(SORT seen)
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# ze_install_public_headers(<source dir> <destination> <excluded> <entry> ...):
# an entry may be a glob relative to the source root (runtime/data/*.h);
# copies the closure to <destination>/<folder>/ (file(INSTALL) honours DESTDIR
# and records each file in install_manifest.txt, hence a macro: the record is
# a variable of the install script's scope). <excluded> is a ;-list of entries
# left out (comm/nccl_communicator.h in a build without NCCL).
macro(ze_install_public_headers ze_source_dir ze_destination ze_excluded)
  ze_public_header_entries(${ze_source_dir} ze_entries "${ze_excluded}" ${ARGN})
  ze_public_header_closure(${ze_source_dir} ze_headers ${ze_entries})
  foreach(ze_h IN LISTS ze_headers)
    get_filename_component(ze_dir ${ze_h} DIRECTORY)
    file(INSTALL ${ze_source_dir}/${ze_h} DESTINATION ${ze_destination}/${ze_dir})
  endforeach()
endmacro()

# The entries with their globs expanded, less <excluded>.
function(ze_public_header_entries source_dir out excluded)
  set(entries)
  foreach(entry IN LISTS ARGN)
    if(entry MATCHES "[*?]")
      file(GLOB matched RELATIVE ${source_dir} ${source_dir}/${entry})
      list(APPEND entries ${matched})
    else()
      list(APPEND entries ${entry})
    endif()
  endforeach()
  if(excluded)
    list(REMOVE_ITEM entries ${excluded})
  endif()
  set(${out} ${entries} PARENT_SCOPE)
endfunction()
