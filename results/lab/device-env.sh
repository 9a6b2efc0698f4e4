# Sourced by the lab's run scripts, from the repository root, on the device machine. That
# machine has everything the build needs but re2: the scripts' calls carry `.debs` (its
# Debian packages, `run` with carry [".debs"]), unpacked here into /tmp/r for pkg-config and
# the loader. Also the build directory `b` and `t`, which prints seconds since sourcing.
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
b=build-gpu
T0=$(date +%s)
t() { echo "[t=$(($(date +%s) - T0))s] $*"; }
