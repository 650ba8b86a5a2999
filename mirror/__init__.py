"""The mirror engine: rename policy, topic planner, offset progress, the python engine, MirrorMaker 1 compatibility."""
