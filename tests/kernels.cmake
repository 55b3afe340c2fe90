# tests for kernels (owner fills in)
