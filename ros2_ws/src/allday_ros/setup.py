"""ament_python package of the allday ROS 2 nodes (built by colcon; see the top-level Makefile)."""

import os
from glob import glob

from setuptools import setup

PACKAGE = "allday_ros"
HERE = os.path.dirname(os.path.abspath(__file__))
# the customer's layout keeps launch files in the repository's top-level launch/ folder
LAUNCH = os.path.relpath(os.path.join(HERE, "..", "..", "..", "launch"), HERE)

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/config", glob("config/*")),
        (f"share/{PACKAGE}/launch", glob(os.path.join(LAUNCH, "*.launch.py"))),
    ],
    install_requires=["setuptools"],
    extras_require={"test": ["pytest"]},
    zip_safe=True,
    maintainer="allday developers",
    description="allday ROS 2 nodes",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "sim_node = allday_ros.sim_node:main",
            "vln_node = allday_ros.vln_node:main",
            "vla_node = allday_ros.vla_node:main",
            "recorder = allday_ros.recorder:main",
            "manip_sim_node = allday_ros.manip_sim_node:main",
            "bringup = allday_ros.bringup:main",
        ],
    },
)
