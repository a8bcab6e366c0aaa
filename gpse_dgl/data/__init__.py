"""Graph sources: molecule skeletons, synthetic graphs, OGB datasets (submodules are imported on demand)."""
