# tests for gpu (owner fills in)
