"""CP-ALS of a small sparse tensor in ten lines (PYTHONPATH=build/python python3 examples/cp_basic.py)."""
import numpy as np

import tessera

rng = np.random.default_rng(0)
coords = rng.integers(0, [30, 20, 10], size=(500, 3))  # (nnz, N), 0-based
values = rng.random(500)
m = tessera.cp_als((coords, values, (30, 20, 10)), rank=4, iters=30, seed=1)
print(f"fit {m.fit:.4f} after {m.iterations} iterations; weights {np.round(m.weights, 3)}")
print("factor shapes:", [f.shape for f in m.factors])
