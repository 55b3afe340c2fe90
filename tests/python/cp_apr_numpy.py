"""CP-APR ('mu': multiplicative updates) in NumPy, float64, on COO data (no dense tensor):
an independent oracle for Tessera's --loss poisson, written from Chi and Kolda, "On tensors,
sparsity, and nonnegative factorizations" (SIMAX 2012), Algorithm 3, and the Tensor
Toolbox's cp_apr (tt_cp_apr_mu), not from Tessera's C++.

The model is lambda and factors A_n whose columns sum to 1. Per outer iteration and mode n:
  (after the first outer iteration) A_n[i, r] += kappa where A_n[i, r] < kappa_tol and the
      mode's last Phi[i, r] > 1 (inadmissible zeros);
  B = A_n diag(lambda); Pi = the Khatri-Rao rows of the other modes at the nonzeros;
  up to `inner` times: Phi = X_(n) ./ max(B Pi', eps) * Pi (only the nonzeros);
      stop when max |min(B, 1 - Phi)| < tol, else B = B .* Phi;
  lambda = column sums of B, A_n = B diag(1/lambda).
Converged when no mode updated in an iteration. Log-likelihood after each iteration:
sum_k x_k log(max(m_k, eps)) - sum of all model entries.
"""

import numpy as np


def _column_sum_normalise(A):
    s = A.sum(axis=0)
    inv = np.divide(1.0, s, out=np.zeros_like(s), where=s > 0)
    return A * inv, s


def model_at(coords, lam, A):
    """The model's values at the coordinates (nnz,)."""
    K = np.tile(lam, (coords.shape[0], 1))
    for n, F in enumerate(A):
        K = K * F[coords[:, n]]
    return K.sum(axis=1)


def loglik(coords, vals, lam, A, eps):
    m = model_at(coords, lam, A)
    total = lam.copy()
    for F in A:
        total = total * F.sum(axis=0)
    return float(np.sum(vals * np.log(np.maximum(m, eps))) - total.sum())


def cp_apr(coords, vals, shape, lam0, factors0, iters, inner=10, tol=1e-5, kappa=1e-2,
           kappa_tol=1e-10, eps=1e-10):
    """Returns (lam, factors, history) with the model normalised to columns summing to 1;
    history: one dict per outer iteration (loglik, kkt_violation, inner_iterations,
    shifted: entries moved off inadmissible zeros)."""
    coords = np.asarray(coords, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.float64)
    N = len(shape)
    lam = np.array(lam0, dtype=np.float64)
    A = []
    for F in factors0:
        F, s = _column_sum_normalise(np.array(F, dtype=np.float64))
        A.append(F)
        lam = lam * s
    R = lam.shape[0]
    Phi = [None] * N
    history = []
    for it in range(iters):
        converged = True
        kkt = np.zeros(N)
        n_inner = 0
        shifted = 0
        for n in range(N):
            if it > 0:
                V = (Phi[n] > 1) & (A[n] < kappa_tol)
                shifted += int(V.sum())
                A[n] = np.where(V, A[n] + kappa, A[n])
            B = A[n] * lam
            Pi = np.ones((coords.shape[0], R))
            for m in range(N):
                if m != n:
                    Pi *= A[m][coords[:, m]]
            rows = coords[:, n]
            for _ in range(inner):
                n_inner += 1
                w = vals / np.maximum(np.sum(B[rows] * Pi, axis=1), eps)
                P = np.empty((shape[n], R))
                for r in range(R):
                    P[:, r] = np.bincount(rows, weights=w * Pi[:, r], minlength=shape[n])
                Phi[n] = P
                kkt[n] = np.max(np.abs(np.minimum(B, 1.0 - P)))
                if kkt[n] < tol:
                    break
                converged = False
                B = B * P
            A[n], lam = _column_sum_normalise(B)
        history.append({"loglik": loglik(coords, vals, lam, A, eps),
                        "kkt_violation": float(kkt.max()), "inner_iterations": n_inner,
                        "shifted": shifted})
        if converged:
            break
    return lam, A, history


def normalise_conventional(lam, factors):
    """Unit 2-norm columns (norms into the weights), weights sorted descending."""
    lam = np.array(lam, dtype=np.float64)
    F = [np.array(f, dtype=np.float64) for f in factors]
    for n in range(len(F)):
        s = np.linalg.norm(F[n], axis=0)
        F[n] = F[n] * np.divide(1.0, s, out=np.zeros_like(s), where=s > 0)
        lam = lam * s
    order = np.argsort(-lam, kind="stable")
    return lam[order], [f[:, order] for f in F]
