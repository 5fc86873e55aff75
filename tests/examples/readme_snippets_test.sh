#!/usr/bin/env bash
# readme_snippets_test.sh README SECTION CXX INCLUDES DEFINES
#
# The README's C++ code is real code: every ```cpp block of the section
# whose heading is SECTION (up to the next "## " or "### " heading) is written
# to a file of its own and compiled as a translation unit with the library's
# include path and definitions (C++20, syntax and templates only, no link).
# So each block is complete as it stands — its #includes, then declarations
# or a main() — and a reader can copy any one of them. INCLUDES and DEFINES
# are |-separated lists (ZeroEngine::engine's, from CMake). A block that does
# not compile fails the test with its README line and the compiler's words.
set -euo pipefail

readme=$1 section=$2 cxx=$3 includes=$4 defines=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ze-readme-snippets.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# snippet_<N>.cc for each block; snippet_<N>.line: its first line in the README.
awk -v section="$section" -v dir="$tmp" '
  $0 == section { inside = 1; next }
  inside && /^##+ / && $0 !~ /^####/ { inside = 0 }
  !inside { next }
  !in_block && /^```cpp[[:space:]]*$/ { in_block = 1; n++; file = dir "/snippet_" n ".cc"
                                        print NR + 1 > (dir "/snippet_" n ".line"); next }
  in_block && /^```[[:space:]]*$/ { in_block = 0; close(file); next }
  in_block { print > file }
' "$readme"

flags=(-std=c++20 -fsyntax-only)
IFS='|' read -r -a dirs <<< "$includes"
for d in "${dirs[@]}"; do [[ -n $d ]] && flags+=("-I$d"); done
IFS='|' read -r -a defs <<< "$defines"
for d in "${defs[@]}"; do [[ -n $d ]] && flags+=("-D$d"); done

shopt -s nullglob
snippets=("$tmp"/snippet_*.cc)
if (( ${#snippets[@]} == 0 )); then
  echo "FAIL: no \`\`\`cpp block under \"$section\" in $readme (was the heading renamed?)" >&2
  exit 1
fi
failed=0
for f in "${snippets[@]}"; do
  line=$(cat "${f%.cc}.line")
  if "$cxx" "${flags[@]}" "$f" > "$f.log" 2>&1; then
    echo "ok:   README.md:$line ($(wc -l < "$f") lines)"
  else
    echo "FAIL: the \`\`\`cpp block at README.md:$line does not compile:"
    sed "s|$f|README.md block at line $line|" "$f.log" | head -40
    failed=1
  fi
done
exit $failed
