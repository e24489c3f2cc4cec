"""allday ROS 2 nodes. Nodes import agents and sim, never training."""
