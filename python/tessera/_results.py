"""Result classes of tessera's Python API (docs/python.md, "Results")."""

import json

import numpy as np


class CPResult:
    """A CP (Kruskal) model: X ~ sum_r weights[r] * factors[0][:, r] o ... o factors[N-1][:, r].

    Attributes: ``weights`` (R,), ``factors`` (list of I_n x R arrays), ``fit``,
    ``iterations``, ``converged``, ``stop_reason`` ("converged", "iteration limit", "time
    limit", "degenerate": the model is zero everywhere; None for a model not made by a run), ``history`` (one dict per iteration:
    ``iter``, ``fit``, ``delta``, ``seconds``, ``kernel``, ``comm``, ``solve``; with
    loss="poisson" also ``loglik``, ``kkt_violation``, ``inner_iterations``), ``loglik`` (the
    final Poisson log-likelihood with loss="poisson", else None), ``loss_estimate`` (GCP:
    the last epoch's loss estimate, else None), ``holdout_loss`` and ``auc`` (GCP or
    loss="poisson" with a holdout: the held-out mean loss and AUC, else None), ``record``
    (the run record, as the CLI's ``--json`` writes it, as a dict).
    """

    kind = "cp"
    # The files the run read (its tensor file, the checkpoint it resumed), as paths;
    # save_model never replaces them. Empty for arrays and for loaded models.
    inputs = ()

    def __init__(self, weights, factors, fit, iterations=0, converged=False, history=(),
                 record=None, stop_reason=None):
        self.stop_reason = stop_reason
        # Set by cp_als with holdout > 0: RMSE on the held-out entries, and of the mean.
        self.validation_rmse = None
        self.mean_predictor_rmse = None
        # Set by cp_als with loss="poisson" (cp_apr): the final log-likelihood.
        self.loglik = None
        # Set by cp_als with solver="gcp" (gcp): the loss estimate; with holdout (GCP or
        # loss="poisson"), the held-out mean loss and AUC.
        self.loss_estimate = None
        self.holdout_loss = None
        self.auc = None
        self.weights = np.asarray(weights, dtype=np.float64)
        self.factors = [np.asarray(f, dtype=np.float64) for f in factors]
        self.fit = float(fit)
        self.iterations = int(iterations)
        self.converged = bool(converged)
        self.history = list(history)
        self.record = dict(record or {})

    @property
    def rank(self):
        return int(self.weights.shape[0])

    @property
    def shape(self):
        return tuple(int(f.shape[0]) for f in self.factors)

    def to_tensorly(self):
        """TensorLy's CPTensor ``(weights, factors)``: a ``tensorly.cp_tensor.CPTensor`` when
        TensorLy is installed, else the plain tuple (which TensorLy accepts)."""
        try:
            from tensorly.cp_tensor import CPTensor  # noqa: PLC0415
        except ImportError:
            return (self.weights.copy(), [f.copy() for f in self.factors])
        return CPTensor((self.weights.copy(), [f.copy() for f in self.factors]))

    def to_pyttb(self):
        """A ``pyttb.ktensor`` when pyttb is installed, else the keyword arguments of
        ``pyttb.ktensor(factors, weights)`` as a dict."""
        kwargs = {"factors": [f.copy() for f in self.factors], "weights": self.weights.copy()}
        try:
            import pyttb  # noqa: PLC0415
        except ImportError:
            return kwargs
        return pyttb.ktensor(**kwargs)

    def full(self):
        """The dense tensor of the model (small shapes only)."""
        out = np.zeros(self.shape)
        letters = "abcdefghijklmnop"[: len(self.factors)]
        spec = ",".join(l + "r" for l in letters) + ",r->" + letters
        out += np.einsum(spec, *self.factors, self.weights)
        return out

    def __repr__(self):
        return "CPResult(shape=%s, rank=%d, fit=%.6f, iterations=%d)" % (
            self.shape, self.rank, self.fit, self.iterations)


class TuckerResult:
    """A Tucker model: X ~ core x_1 factors[0] ... x_N factors[N-1] (orthonormal columns).

    Attributes: ``core`` (R_1 x ... x R_N), ``factors``, ``fit``, ``iterations``,
    ``converged``, ``stop_reason`` (as CPResult's; "degenerate": a zero core), ``history``
    (``kernel`` is the TTMc time, ``solve`` the SVD time), ``record``.
    """

    kind = "tucker"
    inputs = ()  # as CPResult.inputs

    def __init__(self, core, factors, fit, iterations=0, converged=False, history=(),
                 record=None, stop_reason=None):
        self.stop_reason = stop_reason
        self.core = np.asarray(core, dtype=np.float64)
        self.factors = [np.asarray(f, dtype=np.float64) for f in factors]
        self.fit = float(fit)
        self.iterations = int(iterations)
        self.converged = bool(converged)
        self.history = list(history)
        self.record = dict(record or {})

    @property
    def ranks(self):
        return tuple(int(r) for r in self.core.shape)

    @property
    def shape(self):
        return tuple(int(f.shape[0]) for f in self.factors)

    def to_tensorly(self):
        """TensorLy's TuckerTensor ``(core, factors)`` (a plain tuple without TensorLy)."""
        try:
            from tensorly.tucker_tensor import TuckerTensor  # noqa: PLC0415
        except ImportError:
            return (self.core.copy(), [f.copy() for f in self.factors])
        return TuckerTensor((self.core.copy(), [f.copy() for f in self.factors]))

    def to_pyttb(self):
        """A ``pyttb.ttensor`` when pyttb is installed, else its keyword arguments."""
        kwargs = {"core": self.core.copy(), "factors": [f.copy() for f in self.factors]}
        try:
            import pyttb  # noqa: PLC0415
        except ImportError:
            return kwargs
        return pyttb.ttensor(pyttb.tensor(kwargs["core"]), kwargs["factors"])

    def full(self):
        """The dense tensor of the model (small shapes only)."""
        out = self.core
        for n, U in enumerate(self.factors):
            out = np.moveaxis(np.tensordot(U, out, axes=(1, n)), 0, n)
        return out

    def __repr__(self):
        return "TuckerResult(shape=%s, ranks=%s, fit=%.6f, iterations=%d)" % (
            self.shape, self.ranks, self.fit, self.iterations)


class COOResult:
    """A sparse result in coordinate form: ``coords`` (nnz x N, int64, 0-based, sorted
    lexicographically, no repeats), ``values`` (nnz,), ``shape``; ``record`` as above."""

    def __init__(self, coords, values, shape, record=None):
        self.coords = np.asarray(coords)
        self.values = np.asarray(values)
        self.shape = tuple(int(s) for s in shape)
        self.record = dict(record or {})

    @property
    def nnz(self):
        return int(self.values.shape[0])

    def __iter__(self):  # coords, values, shape = result
        return iter((self.coords, self.values, self.shape))

    def to_scipy(self):
        """A ``scipy.sparse.coo_array`` (2-way results only)."""
        import scipy.sparse  # noqa: PLC0415

        if len(self.shape) != 2:
            raise ValueError("to_scipy: the result has %d modes; scipy.sparse holds 2"
                             % len(self.shape))
        make = getattr(scipy.sparse, "coo_array", scipy.sparse.coo_matrix)
        return make((self.values, (self.coords[:, 0], self.coords[:, 1])), shape=self.shape)

    def to_sparse(self):
        """A pydata ``sparse.COO``."""
        import sparse  # noqa: PLC0415

        return sparse.COO(self.coords.T, self.values, shape=self.shape)

    def todense(self):
        out = np.zeros(self.shape)
        if self.nnz:
            out[tuple(self.coords.T)] = self.values
        return out

    def __repr__(self):
        return "COOResult(shape=%s, nnz=%d)" % (self.shape, self.nnz)


def _record(d):
    return json.loads(d.pop("record_json", "{}"))
