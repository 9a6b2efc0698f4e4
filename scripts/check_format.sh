#!/usr/bin/env bash
# Checks that the product code and its tests are clang-formatted (.clang-format), changing
# nothing. The format is clang-format 14's (Debian 12's); another major version may wrap
# differently, so under it the check is skipped (exit 77, CTest: skipped).
#   scripts/check_format.sh          check
#   scripts/check_format.sh --fix    format in place
set -uo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then echo "SKIPPED: no clang-format"; exit 77; fi
major=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$major" != 14 ]; then echo "SKIPPED: $cf is version $major; the format is clang-format 14's"; exit 77; fi
# Tracked files and new ones not yet added (untracked, not ignored): a new file is checked too.
mapfile -t files < <(git ls-files --cached --others --exclude-standard src include kernels tests 2>/dev/null |
                     grep -E '\.(h|cuh|cpp|cu)$' |
                     grep -v -e '^tests/bench/' -e '^tests/data/')
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(find src include kernels tests -name '*.h' -o -name '*.cuh' \
                                                 -o -name '*.cpp' -o -name '*.cu' | grep -v -e tests/bench -e tests/data)
if [ "${1:-}" = --fix ]; then "$cf" -i "${files[@]}"; exit 0; fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not clang-formatted (run scripts/check_format.sh --fix): ${bad[*]}"
  exit 1
fi
echo "clang-format: ${#files[@]} files formatted"
