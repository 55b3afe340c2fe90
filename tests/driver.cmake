# tests for driver (owner fills in)
