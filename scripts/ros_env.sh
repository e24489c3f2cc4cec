# Source me (bash/zsh): `source scripts/ros_env.sh` after scripts/build_ros.sh.
# Puts the colcon workspace (ros2_ws/install) on the paths a fresh Python process needs, plus safe ROS 2 defaults:
#   PYTHONPATH       install/*/lib/python3.X/site-packages (allday_interfaces) and ros2_ws/src/allday_ros
#   LD_LIBRARY_PATH  install/*/lib with the generated typesupport .so files: rosidl dlopens them by bare name,
#                    and the loader reads LD_LIBRARY_PATH only at process start (the .so RUNPATHs do not cover it)
#   AMENT_PREFIX_PATH  the install prefixes + the venv (ament_index lookups: share dirs, params files)
# Discovery stays on this host unless you already exported something else.
_allday_src="${BASH_SOURCE[0]:-${(%):-%x}}"
ALLDAY_ROOT="$(cd "$(dirname "$_allday_src")/.." && pwd)"
unset _allday_src
_allday_ws="$ALLDAY_ROOT/ros2_ws"
_allday_venv="${VIRTUAL_ENV:-$ALLDAY_ROOT/.venv}"

_allday_prepend() {  # _allday_prepend VAR DIR: prepend DIR once
  local var="$1" dir="$2" cur
  eval "cur=\${$var:-}"
  case ":$cur:" in *":$dir:"*) return ;; esac
  if [ -n "$cur" ]; then eval "export $var=\"\$dir:\$cur\""; else eval "export $var=\"\$dir\""; fi
}

[ -d "$_allday_ws/install" ] || echo "ros_env: $_allday_ws/install is missing; run scripts/build_ros.sh" >&2
_allday_prepend AMENT_PREFIX_PATH "$_allday_venv"
_allday_prepend PYTHONPATH "$ALLDAY_ROOT"
_allday_prepend PYTHONPATH "$_allday_ws/src/allday_ros"
for _p in "$_allday_ws"/install/*/; do
  [ -d "$_p" ] || continue
  _p="${_p%/}"
  _allday_prepend AMENT_PREFIX_PATH "$_p"
  for _sp in "$_p"/lib/python3*/site-packages; do [ -d "$_sp" ] && _allday_prepend PYTHONPATH "$_sp"; done
  for _so in "$_p"/lib/lib*.so; do [ -e "$_so" ] && { _allday_prepend LD_LIBRARY_PATH "$_p/lib"; break; }; done
done
unset _p _sp _so

export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
export ROS_LOCALHOST_ONLY="${ROS_LOCALHOST_ONLY:-1}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_allday_ws/src/allday_ros/config/fastdds_shm.xml}"
export MUJOCO_GL="${MUJOCO_GL:-egl}"
unset _allday_ws _allday_venv
unset -f _allday_prepend
