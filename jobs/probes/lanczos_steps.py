#!/usr/bin/env python3
"""How many Lanczos steps Tucker's Gram eigen-solves would need (issue 43, point 3).

Runs Tucker-HOOI (ranks 16,16,16, Gram eigen-solves in double, numpy) on a 3-mode tensor
and, at iterations 1, 2, 3, 5 and the last, for each mode's Gram S = Y^T Y (256 x 256),
counts the steps of Lanczos with full reorthogonalisation (twice), from a random start,
until the top 16 Ritz pairs have residuals |beta_m z_m| <= 1e-6 and <= 1e-7 of lambda_1
(the one-block solver's float eigenpairs have 1.4-3.4e-7). The library's solver reduces
S to a tridiagonal in 255 dependent steps (docs/perf/gpu-h200-tucker.md, "Session 42").

  python3 jobs/probes/lanczos_steps.py ../shared/data/kg-fb15k-237_head-rel-tail.tns.gz 10
  python3 jobs/probes/lanczos_steps.py random:12092x9184x28818x3000000 3   # uniform, values [0, 1)
  python3 jobs/probes/lanczos_steps.py <tensor> <iterations> warm

With `warm`, each count is followed by the count from a warm start: the columns of
B = Y^T U (U the factor being updated), each scaled to unit norm, summed with keyed signs
(docs/perf/gpu-h200-tucker.md, session 44: 1-3 steps fewer).

Needs numpy and scipy (python3-numpy, python3-scipy). A host model of the numbers, not a
timing.
"""
import gzip
import sys

import numpy as np
import scipy.sparse as sp


def load(path):
    if path.startswith("random:"):
        d0, d1, d2, nnz = map(int, path[7:].split("x"))
        g = np.random.default_rng(5)
        idx = np.stack([g.integers(0, d, nnz) for d in (d0, d1, d2)], 1)
        return idx, g.random(nnz)
    rows = np.loadtxt(gzip.open(path), dtype=np.float64)
    return rows[:, :3].astype(np.int64) - 1, rows[:, 3]


def main():
    path, iters = sys.argv[1], int(sys.argv[2])
    warm = len(sys.argv) > 3 and sys.argv[3] == "warm"
    idx, val = load(path)
    dims = idx.max(0) + 1
    R = k = 16
    rng = np.random.default_rng(1)
    U = [np.linalg.qr(rng.standard_normal((d, R)))[0] for d in dims]

    def ttmc(n, chunk=1 << 21):  # chunks of 2M nonzeros: about 4 GB of products at a time
        a, b = [m for m in range(3) if m != n]
        Y = np.zeros((dims[n], R * R))
        for s in range(0, len(val), chunk):
            c = slice(s, min(s + chunk, len(val)))
            cnt = c.stop - c.start
            prod = (U[a][idx[c, a]][:, :, None] * U[b][idx[c, b]][:, None, :]).reshape(cnt, R * R)
            prod *= val[c, None]
            P = sp.csr_matrix((np.ones(cnt), (idx[c, n], np.arange(cnt))), shape=(dims[n], cnt))
            Y += P @ prod
        return Y

    def lanczos_steps(S, q0=None):
        n = S.shape[0]
        w = np.linalg.eigvalsh(S)[::-1]
        q = rng.standard_normal(n) if q0 is None else q0
        Q = np.zeros((n, n))
        Q[:, 0] = q / np.linalg.norm(q)
        a, b, first = [], [], None
        for j in range(n):
            v = S @ Q[:, j]
            a.append(Q[:, j] @ v)
            for _ in range(2):
                v -= Q[:, :j + 1] @ (Q[:, :j + 1].T @ v)
            bj = np.linalg.norm(v)
            m = j + 1
            if m >= k:
                T = np.diag(a) + np.diag(b, 1) + np.diag(b, -1)
                _, Z = np.linalg.eigh(T)
                r = (np.abs(bj * Z[-1, ::-1][:k]) / w[0]).max()
                if r < 1e-6 and first is None:
                    first = m
                if r < 1e-7:
                    return first, m, w
            if j + 1 < n:
                b.append(bj)
                Q[:, j + 1] = v / max(bj, 1e-300)
        return first, n, w

    name = path.split("/")[-1][:24]
    for it in range(1, iters + 1):
        for n in range(3):
            Y = ttmc(n)
            S = Y.T @ Y
            if it in (1, 2, 3, 5, iters):
                m6, m7, w = lanczos_steps(S)
                print(f"{name} iteration {it} mode {n} ({dims[n]} rows): Lanczos steps to 1e-6 / "
                      f"1e-7 of lambda_1: {m6} / {m7}; lambda_16 / lambda_17 {w[15] / w[16]:.3f}",
                      flush=True)
                if warm:
                    B = Y.T @ U[n]
                    B /= np.linalg.norm(B, axis=0)
                    w6, w7, _ = lanczos_steps(S, B @ np.where(rng.random(R) < 0.5, -1.0, 1.0))
                    print(f"  from a warm start: {w6} / {w7}", flush=True)
            _, V = np.linalg.eigh(S)
            U[n] = np.linalg.qr(Y @ V[:, ::-1][:, :R])[0]


if __name__ == "__main__":
    main()
