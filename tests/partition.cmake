# tests for partition (owner fills in)
