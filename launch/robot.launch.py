"""ros2 launch allday_ros robot.launch.py: the navigation policy node for a real robot (dry_run on by default)."""

import os

from ament_index_python.packages import get_package_share_directory
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    params = os.path.join(get_package_share_directory("allday_ros"), "config", "robot_params.yaml")
    return LaunchDescription([
        LifecycleNode(package="allday_ros", executable="vln_node", name="vln_node", namespace="",
                      parameters=[params], output="screen"),
    ])
