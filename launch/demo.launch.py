"""ros2 launch allday_ros demo.launch.py: the simulated closed loop (sim_node + vln_node) on a ROS 2 install."""

import os

from ament_index_python.packages import get_package_share_directory
from launch_ros.actions import LifecycleNode, Node

from launch import LaunchDescription


def generate_launch_description():
    params = os.path.join(get_package_share_directory("allday_ros"), "config", "demo_params.yaml")
    return LaunchDescription([
        Node(package="allday_ros", executable="sim_node", name="sim_node", parameters=[params], output="screen"),
        LifecycleNode(package="allday_ros", executable="vln_node", name="vln_node", namespace="",
                      parameters=[params], output="screen"),
    ])
