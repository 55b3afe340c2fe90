# tests for io (owner fills in)
