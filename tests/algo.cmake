# tests for algo (owner fills in)
