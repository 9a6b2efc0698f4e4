#!/usr/bin/env bash
# Compares the PTX of the product kernels (kernels/*.cu) at two trees: a refactor that renames
# and moves code must leave every kernel's instructions as they were. No GPU needed.
#   scripts/ptx_diff.sh BASE_REV [HEAD_REV]    HEAD_REV: the working tree when left out
# Each kernels/*.cu of either tree is compiled to PTX for compute_90 with the build's flags
# (CMakeLists.txt: Release, -lineinfo --expt-relaxed-constexpr, include/ and kernels/), then
# normalized: comments, .file and .loc lines and the debug sections (the names of inlined
# functions, which -lineinfo records) dropped, and every mangled name (_Z...: kernels,
# device functions, their parameters, shared and global variables) replaced by its order of
# first appearance, so that renaming an identifier, a template parameter or a file changes
# nothing while a changed instruction, register count, type, size or order shows. Prints one
# line a file and the normalized diff of any that differ; exit 0 when all are identical.
# A file present in one tree only is reported, and counts as a difference.
#   ARCH=compute_80 scripts/ptx_diff.sh main      another target (default compute_90)
#   KEEP=1 scripts/ptx_diff.sh main               keep the PTX and its normal form in the temp dir
set -uo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/ptx_diff.sh BASE_REV [HEAD_REV]}
head=${2:-}
arch=${ARCH:-compute_90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "ptx_diff: no nvcc (set NVCC)" >&2; exit 2; }
git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "ptx_diff: $base: not a commit" >&2; exit 2; }
[ -z "$head" ] || git rev-parse --verify -q "$head^{commit}" >/dev/null ||
  { echo "ptx_diff: $head: not a commit" >&2; exit 2; }

tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" "$tmp/head"
git archive "$base" include kernels | tar -x -C "$tmp/base"
if [ -n "$head" ]; then
  git archive "$head" include kernels | tar -x -C "$tmp/head"
  head_name=$head
else
  cp -r include kernels "$tmp/head/"
  head_name="the working tree"
fi

flags=(-ptx -O3 -DNDEBUG -DDB_HAVE_CUDA=1 -DFMT_SHARED -std=c++17 -lineinfo --expt-relaxed-constexpr
       -gencode "arch=$arch,code=$arch")

# Normal form: no comments, .file or .loc lines, no debug sections, no blank lines; mangled
# names numbered.
normalize() {
  python3 - "$1" <<'EOF'
import re, sys
names = {}
def number(m):
    return names.setdefault(m.group(0), f"SYM{len(names)}")
out = []
debug = False  # inside a .section .debug_* block: -lineinfo's names of inlined functions
for line in open(sys.argv[1]):
    s = line.strip()
    if s.startswith(".section") and ".debug_" in s:
        debug = True
        continue
    if debug:
        debug = s != "}"
        continue
    if not s or s.startswith("//") or s.startswith(".loc") or s.startswith(".file"):
        continue
    s = re.sub(r"//.*$", "", s).rstrip()
    out.append(re.sub(r"_Z[A-Za-z0-9_$]+", number, s))
print("\n".join(out))
EOF
}

compile() {  # tree file
  local tree=$1 f=$2 out=$1/$(basename "$2" .cu).ptx
  (cd "$tree" && nice "$nvcc" "${flags[@]}" -Ikernels -Iinclude "$f" -o "$out") >"$out.log" 2>&1 ||
    { echo "ptx_diff: $f does not compile in $tree:" >&2; cat "$out.log" >&2; return 1; }
  normalize "$out" >"$out.norm"
}

mapfile -t files < <( (cd "$tmp/base" && ls kernels/*.cu; cd "$tmp/head" && ls kernels/*.cu) | sort -u)
status=0
echo "PTX ($arch) of kernels/*.cu: $base against $head_name"
for f in "${files[@]}"; do
  name=$(basename "$f" .cu)
  if [ ! -f "$tmp/base/$f" ] || [ ! -f "$tmp/head/$f" ]; then
    echo "  $f: only in $([ -f "$tmp/base/$f" ] && echo "$base" || echo "$head_name")"
    status=1
    continue
  fi
  compile "$tmp/base" "$f" && compile "$tmp/head" "$f" || { status=2; continue; }
  a=$tmp/base/$name.ptx.norm b=$tmp/head/$name.ptx.norm
  if cmp -s "$a" "$b"; then
    echo "  $f: identical ($(wc -l <"$a") lines, $(grep -cE '^(\.visible )?\.entry' "$a") kernels)"
  else
    echo "  $f: DIFFERS ($(diff "$a" "$b" | grep -c '^[<>]') lines)"
    diff "$a" "$b" | head -40 | sed 's/^/    /'
    status=1
  fi
done
[ -z "${KEEP:-}" ] || echo "PTX kept in $tmp"
exit $status
