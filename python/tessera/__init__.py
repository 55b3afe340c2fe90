"""Tessera from Python: CP-ALS, Tucker-HOOI and sparse tensor contraction of sparse tensors,
on the same C++ library (and backends) as the ``tessera`` command. See docs/python.md.

    import numpy as np, tessera
    coords = np.array([[0, 0, 0], [1, 2, 0], [2, 1, 1]])
    m = tessera.cp_als((coords, np.array([1.0, 2.0, 3.0]), (3, 3, 2)), rank=2)
    print(m.fit, m.weights, [f.shape for f in m.factors])

Defaults are the CLI's (``tessera cp --help``): iters 50, tol 1e-5, seed 1, backend
"auto" (cuda when a GPU is present, else cpu), precision "double".

Under ``mpirun -np P python3 script.py`` every rank calls the same function: the input on
rank 0 (other ranks pass None; ``distributed="root"``, the default), or every rank's share
of the nonzeros with global coordinates (``distributed="share"``); a path is read by all
ranks together. Results are returned on every rank. ``comm`` takes an mpi4py
communicator (default: MPI_COMM_WORLD); MPI is initialised here when mpi4py has not.

Errors: ValueError for bad input (the messages of the CLI, naming the file and line or the
array field and entry), RuntimeError for device, MPI or internal failures,
KeyboardInterrupt on Ctrl-C (checked after every iteration). The GIL is released while the
library computes.
"""

import atexit as _atexit
import math as _math
import numbers as _numbers
import os as _os
import warnings as _warnings

from . import _tessera
from ._inputs import to_core as _to_core
from ._results import COOResult, CPResult, TuckerResult, _record

__all__ = [
    "cp_als",
    "cp_apr",
    "gcp",
    "tucker_hooi",
    "contract",
    "read_tensor",
    "load_model",
    "save_model",
    "CPResult",
    "TuckerResult",
    "COOResult",
    "OutputExistsError",
    "cuda_built",
    "build_info",
]

__version__ = "0.1.0"

# The error of a refused output (save_model's path, a run's checkpoint): an input of the
# call, never replaced, or an existing file Tessera did not write, replaced only with
# force=True. A FileExistsError and a ValueError; the message is the CLI's.
OutputExistsError = _tessera.OutputExistsError

_atexit.register(_tessera.finalize_mpi)  # only when this module initialised MPI


def _comm_handle(comm):
    if comm is None:
        return 0
    try:
        from mpi4py import MPI  # noqa: PLC0415
    except ImportError:
        raise ValueError("comm= needs mpi4py (an mpi4py communicator)") from None
    return int(MPI._handleof(comm))


def _share(distributed):
    if distributed in (False, None, "root"):
        return False
    if distributed in (True, "share"):
        return True
    raise ValueError('distributed=%r: expected "root" (input on rank 0) or "share" (each '
                     "rank's share)" % (distributed,))


_INT_MAX = (1 << 31) - 1


def _threads(threads, comm_handle):
    # Capped to the CPUs this process may use by the CLI's rule (util::cap_threads), with
    # its warning as a RuntimeWarning (rank 0); 0 and None: OpenMP's default.
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, _numbers.Integral):
        raise TypeError("threads=%r: expected None or an integer >= 0" % (threads,))
    n = int(threads)
    if n < 0:
        raise ValueError("threads=%d: expected None or an integer >= 0" % n)
    if n == 0:
        return 0
    capped, warning = _tessera.cap_threads(min(n, _INT_MAX), "threads=%d" % n, comm_handle)
    if warning:
        _warnings.warn(warning, RuntimeWarning, stacklevel=3)
    return capped


def _int_arg(v, name, lo, hi):
    # An integer keyword in the range of its C++ type; the library checks its meaning.
    if isinstance(v, bool) or not isinstance(v, _numbers.Integral):
        raise TypeError("%s=%r: expected an integer" % (name, v))
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError("%s=%d: expected %d to %d" % (name, v, lo, hi))
    return v


def _float_arg(v, name):
    if isinstance(v, bool) or not isinstance(v, _numbers.Real):
        raise TypeError("%s=%r: expected a number" % (name, v))
    return float(v)


def _str_arg(v, name):
    if not isinstance(v, str):
        raise TypeError("%s=%r: expected a string" % (name, v))
    return v


def _bool_arg(v, name):
    if not isinstance(v, bool) and type(v).__name__ != "bool_":
        raise TypeError("%s=%r: expected True or False" % (name, v))
    return bool(v)


def _path_arg(path, name):
    # A file name as the library takes it (str); a NUL byte would cut it short there.
    try:
        p = _os.fsdecode(_os.fspath(path))
    except TypeError:
        raise TypeError("%s=%r: expected a path (str or os.PathLike)" % (name, path)) from None
    if "\0" in p:
        raise ValueError("%s=%r: a path cannot contain a NUL character" % (name, p))
    return p


def _opt_path(path, name):
    return None if path is None else _path_arg(path, name)


def _input_files(*paths):
    # The files a run read (its tensor, the checkpoint it resumed): save_model never
    # replaces them.
    # Absolute (resolved now): a later os.chdir must not point the guard elsewhere.
    return tuple(_os.path.abspath(_os.fsdecode(_os.fspath(p))) for p in paths
                 if isinstance(p, (str, bytes, _os.PathLike)))


# The kernel tuning keyword arguments of cp_als, tucker_hooi and contract with their
# defaults: the knobs of kernels::Tuning, from their table (kernels/tuning.hpp: the CLI's
# "Kernel tuning" options, e.g. cuda_layout for --cuda-layout, and the run record's "tuning"
# keys), and nccl_timeout (--nccl-timeout, seconds, 0: no limit). The cuda MTTKRP on tensor
# cores (docs/tensor-core-mttkrp.md): tensor_cores ("auto" | "on" | "off"), tc_precision
# ("auto": 3xtf32 for float, fp64 for double | "3xtf32" | "tf32" | "bf16" | "fp64") and
# tc_tile_density (a number in (0, 1]: the density at or above which a 16 x 16 tile goes to
# tensor cores); gather_precision ("full" | "fp16" | "bf16": the factor rows the cuda
# MTTKRP and Tucker's tensor-core TTMc gather, float tensors; docs/reduced-precision.md).
TUNING = dict(_tessera.tuning_defaults(), nccl_timeout=1800.0)


def _tuning_arg(tuning, others=None):
    # others: the function's other keyword arguments of a table (cp_als: CP_OPTIONS).
    unknown = sorted(k for k in tuning if k not in TUNING)
    if unknown:
        raise TypeError("unexpected keyword argument%s %s (%stuning arguments: %s)" % (
            "s" if len(unknown) > 1 else "", ", ".join(repr(k) for k in unknown),
            "CP arguments: %s; " % ", ".join(others) if others else "", ", ".join(TUNING)))
    return dict(tuning)


def _init_arg(init):
    if init is None or isinstance(init, str):
        return init
    import numpy as np  # noqa: PLC0415

    if not hasattr(init, "__iter__") or isinstance(init, (bytes, np.ndarray)):
        raise TypeError("init=%s: expected \"random\", \"nvecs\", a model file or a list "
                        "of one factor matrix per mode" % type(init).__name__)
    out = []
    for n, f in enumerate(init):
        a = np.asarray(f)
        if a.dtype.kind not in "biuf":
            raise TypeError("init[%d]: expected a real matrix, got dtype %s" % (n, a.dtype))
        out.append(np.ascontiguousarray(a, dtype=np.float64))
    return out


def _modes_arg(nonneg):
    if nonneg is True:
        return "all"
    if nonneg is False or nonneg is None:
        return "none"
    if isinstance(nonneg, str):
        return nonneg
    try:
        return ",".join(str(int(m)) for m in nonneg)
    except (TypeError, ValueError):
        raise ValueError("nonneg=%r: expected True, False or a list of modes" % (nonneg,)) from None


LOSSES = ("gaussian", "poisson", "bernoulli", "gamma", "rayleigh", "huber")
SOLVERS = ("auto", "als", "apr", "gcp")


def _loss_arg(loss):
    if loss not in LOSSES:
        raise ValueError('loss=%r: expected "gaussian" (least squares), "poisson" (counts), '
                         '"bernoulli" (0/1), "gamma", "rayleigh" (positive values) or "huber" '
                         "(least squares robust to outliers)" % (loss,))
    return loss


def _solver_arg(solver):
    if solver not in SOLVERS:
        raise ValueError('solver=%r: expected "auto" (als for gaussian, apr for poisson, gcp '
                         'otherwise), "als", "apr" or "gcp"' % (solver,))
    return solver


def _checkpoint_every(v):
    return 0 if v is None else _int_arg(v, "checkpoint_every", 0, _INT_MAX)


def _callback_arg(cb):
    if cb is not None and not callable(cb):
        raise TypeError("callback=%r: expected None or a callable taking one dict" % (cb,))
    return cb


def _per_mode_arg(v, name):
    if isinstance(v, str):
        return v
    try:
        vals = [float(v)] if isinstance(v, _numbers.Real) else [float(x) for x in v]
    except (TypeError, ValueError):
        raise ValueError("%s=%r: expected a number or one number per mode" % (name, v)) from None
    return ",".join(repr(x) for x in vals)


# The plain CP-ALS keyword arguments and their defaults: the rows of run::kCpValues
# (src/engine/run/cp_options.hpp), which are also the CLI's options of the same names
# (max_seconds for --max-seconds) and the run record's "options" keys. A row added there is
# a keyword of cp_als here, listed in its docstring. CP_VALUES: key -> (default, help, CLI
# flag, accepted values).
CP_VALUES = _tessera.cp_values()
CP_OPTIONS = {k: v[0] for k, v in CP_VALUES.items()}


def _cp_value(v):
    # NumPy scalars as Python numbers; the table's checks say what is wrong with the rest.
    if isinstance(v, _numbers.Integral) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, _numbers.Real) and not isinstance(v, bool):
        return float(v)
    return v


def cp_als(X, rank=16, *, backend="auto", init="random", precision="double", threads=None,
           comm_strategy="auto", index_base="1", checkpoint=None, checkpoint_every=None,
           resume=None, callback=None, verbose=False, distributed="root", comm=None,
           nonneg=False, l1=0.0, l2=None, loss="gaussian", solver="auto", force=False,
           comm_hierarchy="auto", emulate_nodes=0, comm_overlap="auto", **options):
    """CP-ALS of a sparse tensor (the algorithm and defaults of ``tessera cp``).

    X: an input kind (see tessera._inputs). rank: R (1 to 4096). init: "random" (keyed by
    seed, mode and row: the same factors as the CLI on any rank count), "nvecs" (leading
    singular vectors of each unfolding) or a list of N initial factor arrays (I_n x R).
    checkpoint / checkpoint_every / resume: as the CLI's --checkpoint / --checkpoint-every
    (default 1 when a checkpoint file is given) / --resume. callback(info) runs on every rank
    after every iteration with {"iteration", "fit", "delta", "rank"}; an exception it raises
    stops the run on every rank. verbose: print the CLI's per-iteration lines (rank 0), every
    print_every iterations (and the last). Returns a CPResult; its stop_reason says why the
    iterations stopped ("converged", "iteration limit", "time limit" or "degenerate": every
    weight is zero, e.g. penalties that zeroed the factors; a warning is printed).

    Constrained, regularised and weighted CP (the CLI's options of the same names; see
    docs/constrained-cp.md): nonneg: True (every mode), False, or a list of modes; l1, l2:
    one penalty for every mode or a list with one per mode (l2=None: 0, or 0.01 with
    observed_only, the CLI's default). With holdout (below) the
    held-out RMSE after each iteration is in history ("validation_rmse") and
    CPResult.validation_rmse (with mean_predictor_rmse, the RMSE of predicting the training
    mean).

    loss: "gaussian" (least squares, CP-ALS) or "poisson" (counts >= 0: CP-APR's
    multiplicative updates, the CLI's --loss poisson; cp_apr below). With
    "poisson", tol is the KKT tolerance, the apr_* keywords below apply, each history entry
    has "loglik", "kkt_violation" and "inner_iterations", and CPResult.loglik is the final
    log-likelihood; nonneg is accepted (the factors are >= 0 anyway); with holdout each
    history entry also has "holdout_loss" (the mean Poisson loss m - x log(m) on the held-out
    entries and as many sampled zeros) and "auc", and CPResult.holdout_loss and .auc are the
    last iteration's, as GCP's; l1, l2, observed_only and init="nvecs" are refused.
    loss "bernoulli" (0/1 data, logit link), "gamma", "rayleigh" (values >= 0) or "huber"
    (huber_delta): generalized CP by stochastic gradients with Adam (GCP-SGD, the CLI's
    --solver gcp; gcp below), as is solver="gcp" with "gaussian" or "poisson". solver: "auto"
    (als for gaussian, apr for poisson, gcp otherwise), "als", "apr" or "gcp". With GCP,
    iters counts epochs (gcp_epoch_iters Adam steps each), tol is the relative change of the
    loss estimate, the gcp_* keywords below apply, each history entry has "loss" and
    "step_size" (with holdout also "holdout_loss" and "auc"), and CPResult.loss_estimate,
    .holdout_loss and .auc are the last epoch's; l1, l2, observed_only and init="nvecs" are
    refused, and nonneg too but for "gamma" and "rayleigh" (whose factors are kept >= 0).

    Keyword arguments of the CP option table (CP_VALUES; None: the default):
{values}

    Kernel tuning (keyword arguments, the CLI's "Kernel tuning" options; see TUNING and
    force: replace an existing checkpoint file that Tessera did not write (the CLI's
    --force); the input is never replaced. A refused checkpoint is an OutputExistsError.

    comm_hierarchy ("auto" | "flat" | "node") and emulate_nodes (0: the real nodes; N: the
    ranks as N nodes of consecutive ranks): the CLI's --comm-hierarchy and --emulate-nodes,
    how the collectives of ranks on several nodes are issued (docs/multi-gpu.md, "Across
    nodes"); they matter under MPI (comm=, distributed=) on several nodes.
    comm_overlap ("auto" | "on" | "off"): the CLI's --comm-overlap, a large mode's
    all-reduce in row pieces while its MTTKRP computes (several GPUs; auto: on across nodes;
    docs/multi-gpu.md, "Overlap").

    Kernel tuning (keyword arguments, the CLI's "Kernel tuning" options; see TUNING and
    docs/python.md): cuda_layout, cuda_block_rows, cuda_l2_hint, mttkrp_kernel,
    tensor_cores, tc_precision, tc_tile_density, gather_precision, ttmc_kernel, eig_solver,
    ttmc_tile, sptc_pool, sptc_tc_threshold, cpu_isa, trace, nccl_timeout. tensor_cores ("auto" | "on" | "off"),
    tc_precision ("auto" | "3xtf32" | "tf32" | "bf16" | "fp64") and tc_tile_density (in
    (0, 1]) steer the cuda MTTKRP on tensor cores (docs/tensor-core-mttkrp.md); with a cuda
    backend the record's "tc_split" holds the split per mode.
    """
    share = _share(distributed)
    values = {k: _cp_value(options.pop(k)) for k in list(options) if k in CP_OPTIONS}
    values["rank"] = _cp_value(rank)
    handle = _comm_handle(comm)
    tuning = _tuning_arg(options, CP_OPTIONS)
    tuning["comm_hierarchy"] = comm_hierarchy
    tuning["emulate_nodes"] = emulate_nodes
    tuning["comm_overlap"] = comm_overlap
    r = _tessera.cp_als(
        _to_core(X), values, _init_arg(init), _str_arg(backend, "backend"),
        _str_arg(precision, "precision"), _threads(threads, handle),
        _str_arg(comm_strategy, "comm_strategy"), str(index_base),
        _opt_path(checkpoint, "checkpoint"), _checkpoint_every(checkpoint_every),
        _opt_path(resume, "resume"), _callback_arg(callback), bool(verbose), share, handle,
        _modes_arg(nonneg), _per_mode_arg(l1, "l1"),
        "" if l2 is None else _per_mode_arg(l2, "l2"), _loss_arg(loss), _solver_arg(solver),
        _bool_arg(force, "force"),
        tuning)
    rec = _record(r)
    res = CPResult(r["weights"], r["factors"], r["fit"], r["iterations"], r["converged"],
                   r["history"], rec, stop_reason=r["stop_reason"])
    res.validation_rmse = r["validation_rmse"]
    res.mean_predictor_rmse = r["mean_predictor_rmse"]
    res.loglik = r["loglik"]
    res.loss_estimate = r["loss_estimate"]
    res.holdout_loss = r["holdout_loss"]
    res.auc = r["auc"]
    res.inputs = _input_files(X, resume)
    return res


cp_als.__doc__ = cp_als.__doc__.replace("{values}", "\n".join(
    "    %s=%r (%s%s): %s." % (k, v[0], v[2], ", " + v[3] if v[3] else "", v[1])
    for k, v in CP_VALUES.items()))


def cp_apr(X, rank=16, **kwargs):
    """Poisson CP of a count tensor by CP-APR (Chi and Kolda 2012; Tensor Toolbox cp_apr
    'mu'): cp_als(X, rank, loss="poisson", **kwargs). Returns a CPResult with ``loglik`` (the
    final log-likelihood) and, per iteration in ``history``, "loglik", "kkt_violation" and
    "inner_iterations"; with holdout > 0 (a fraction of the nonzeros left out of the fit) also
    ``holdout_loss`` and ``auc`` (per iteration in ``history`` too), as gcp's. The model is normalised as cp_als's (unit 2-norm columns, weights
    descending)."""
    if "loss" in kwargs:
        raise TypeError("cp_apr: unexpected keyword argument 'loss' (cp_apr is loss=\"poisson\")")
    return cp_als(X, rank, loss="poisson", **kwargs)


def gcp(X, rank=16, loss="bernoulli", **kwargs):
    """Generalized CP (Hong, Kolda and Duersch 2020) by stochastic gradients with Adam
    (GCP-SGD; Kolda and Hong 2020): cp_als(X, rank, loss=loss, solver="gcp", **kwargs).
    loss: "bernoulli" (0/1 data; the model is the log-odds), "poisson" (counts; the model is
    the log-rate), "gaussian", "gamma", "rayleigh" (values >= 0; nonnegative factors) or
    "huber" (huber_delta). iters counts epochs of gcp_epoch_iters Adam steps; the gcp_*
    keywords set the samples, the step size and its decreases (docs/counts.md, "GCP").
    Returns a CPResult with ``loss_estimate`` (the last epoch's estimate of the summed loss)
    and, with holdout > 0, ``holdout_loss`` and ``auc``; per epoch in ``history``, "loss" and
    "step_size" (and "holdout_loss", "auc"). ``fit`` is the least-squares fit of the model."""
    if "solver" in kwargs:
        raise TypeError("gcp: unexpected keyword argument 'solver' (gcp is solver=\"gcp\")")
    return cp_als(X, rank, loss=_loss_arg(loss), solver="gcp", **kwargs)


def tucker_hooi(X, ranks, *, backend="auto", iters=50, tol=1e-5, seed=1, init="random",
                svd="gram", subspace_steps=3, max_mem=None, precision="double", threads=None,
                index_base="1", checkpoint=None, checkpoint_every=None, resume=None,
                callback=None, verbose=False, distributed="root", comm=None, force=False,
                **tuning):
    """Tucker-HOOI of a sparse tensor (the algorithm and defaults of ``tessera tucker``).

    ranks: one int for every mode, a list (R_1..R_N), or "16,16,4". init: "random" or
    "hosvd"; svd: "gram", "subspace" or "scalapack"; max_mem: bytes per rank ("8G"; default:
    the planner's measured host limit). Other arguments (kernel tuning and force included) as
    cp_als.
    Returns a TuckerResult.
    """
    share = _share(distributed)
    handle = _comm_handle(comm)
    r = _tessera.tucker_hooi(
        _to_core(X), _ranks_arg(ranks), _int_arg(iters, "iters", -_INT_MAX, _INT_MAX),
        _float_arg(tol, "tol"), _int_arg(seed, "seed", 0, (1 << 64) - 1),
        _str_arg(init, "init"), _str_arg(svd, "svd"),
        _int_arg(subspace_steps, "subspace_steps", -_INT_MAX, _INT_MAX),
        _str_arg(max_mem or "", "max_mem"), _str_arg(backend, "backend"),
        _str_arg(precision, "precision"), _threads(threads, handle), str(index_base),
        _opt_path(checkpoint, "checkpoint"), _checkpoint_every(checkpoint_every),
        _opt_path(resume, "resume"), _callback_arg(callback), bool(verbose), share, handle,
        _bool_arg(force, "force"), _tuning_arg(tuning))
    rec = _record(r)
    res = TuckerResult(r["core"], r["factors"], r["fit"], r["iterations"], r["converged"],
                       r["history"], rec, stop_reason=rec.get("stop_reason"))
    res.inputs = _input_files(X, resume)
    return res


def _ranks_arg(ranks):
    bad = ValueError("ranks=%r: expected an int, a list of ints or \"R1,R2,...\"" % (ranks,))
    if isinstance(ranks, str):
        return ranks
    if isinstance(ranks, _numbers.Integral) and not isinstance(ranks, bool):
        if not 0 <= int(ranks) <= _INT_MAX:
            raise bad
        return int(ranks)
    if not isinstance(ranks, (list, tuple)):
        raise bad
    for r in ranks:
        if (isinstance(r, bool) or not isinstance(r, _numbers.Integral)
                or not 0 <= int(r) <= _INT_MAX):
            raise bad
    return [int(r) for r in ranks]


def contract(X, Y, einsum, *, backend="auto", precision="double", threads=None,
             extend_dims=False, mem_limit=None, index_base="1", verbose=False,
             distributed="root", comm=None, **tuning):
    """Sparse tensor contraction Z = X x Y by an einsum spec (``tessera contract``), e.g.
    "ijy,kjy->ik": letters in both inputs and not in the output are summed, letters in both
    and in the output are batch modes. Pass the same object as X and Y for a
    self-contraction. Kernel tuning keyword arguments as cp_als. Returns a COOResult
    (sorted, no repeats, exact zeros dropped) on every rank."""
    share = _share(distributed)
    same = X is Y
    handle = _comm_handle(comm)
    r = _tessera.contract(
        _to_core(X, "X"), None if same else _to_core(Y, "Y"), same, _str_arg(einsum, "einsum"),
        bool(extend_dims), _str_arg(mem_limit or "", "mem_limit"), _str_arg(backend, "backend"),
        _str_arg(precision, "precision"), _threads(threads, handle), str(index_base),
        bool(verbose), share, handle, _tuning_arg(tuning))
    rec = _record(r)
    return COOResult(r["coords"], r["values"], r["shape"], rec)


def read_tensor(path, *, index_base="1"):
    """Reads a .tns / .tns.gz (FROSTT text; index_base "1", "0" or "auto") or .h5 tensor
    store into a COOResult (0-based coordinates, in file order, repeats kept)."""
    r = _tessera.read_tensor(_path_arg(path, "path"), str(index_base))
    return COOResult(r["coords"], r["values"], r["shape"])


def load_model(path):
    """Reads a model file written by ``tessera cp/tucker --out`` or save_model: a CPResult
    or a TuckerResult (history holds the fits; record["options"] the run's options)."""
    import json  # noqa: PLC0415

    r = _tessera.load_model(_path_arg(path, "path"))
    try:
        options = json.loads(r["options_json"])
    except ValueError:
        options = {}
    rec = {"options": options, "fit": r["fit"], "iterations": r["iterations"]}
    hist = [{"iter": i + 1, "fit": f} for i, f in enumerate(r["fit_history"])]
    if r["kind"] == "cp":
        return CPResult(r["weights"], r["factors"], r["fit"], r["iterations"], False, hist, rec)
    return TuckerResult(r["core"], r["factors"], r["fit"], r["iterations"], False, hist, rec)


def save_model(result, path, *, comm=None, force=False):
    """Writes a CPResult or TuckerResult as a model file (the HDF5 layout of ``--out``,
    docs/formats.md), through a temporary renamed when complete. Collective under MPI:
    rank 0 writes.

    The CLI's output guard (docs/reliability.md, "Outputs") decides first: an existing file
    is replaced only when Tessera wrote it as a model (or checkpoint), or with force=True;
    the files the result was computed from (result.inputs: its tensor file, the checkpoint
    it resumed) are never replaced, not even with force=True. A refusal of an existing file
    raises OutputExistsError (a FileExistsError and a ValueError) with the CLI's message."""
    import json  # noqa: PLC0415

    if not isinstance(result, (CPResult, TuckerResult)):
        raise TypeError("save_model: expected a CPResult or TuckerResult, got %s"
                        % type(result).__name__)
    path = _path_arg(path, "path")
    force = _bool_arg(force, "force")
    # The result's fields are public: what is written is checked here (real, finite, the
    # right number of dimensions), as a run would have made it.
    factors = [_model_array(f, "factors[%d]" % n, 2) for n, f in enumerate(result.factors)]
    fit = _float_arg(result.fit, "fit")
    if not _math.isfinite(fit):
        raise ValueError("save_model: fit = %r is not a finite number" % fit)
    m = {
        "kind": result.kind,
        "factors": factors,
        "fit": fit,
        "iterations": int(result.iterations),
        "fit_history": [float(h["fit"]) for h in result.history],
        "options_json": json.dumps(result.record.get("options", {})),
    }
    if result.kind == "cp":
        m["weights"] = _model_array(result.weights, "weights", 1)
        if m["weights"].shape[0] < 1:
            raise ValueError("save_model: weights: a CP model has rank 1 or more, got 0")
    else:
        m["core"] = _model_array(result.core, "core", len(factors))
    _tessera.save_model(m, path, _comm_handle(comm), force, list(result.inputs))


def _model_array(v, what, ndim):
    # A model's array as save_model writes it: float64, `ndim` dimensions, finite values.
    import numpy as np  # noqa: PLC0415

    a = np.asarray(v)
    if a.dtype.kind not in "biuf":
        raise TypeError("save_model: %s: expected a real array, got %s of dtype %s"
                        % (what, type(v).__name__, a.dtype))
    if a.ndim != ndim:
        raise ValueError("save_model: %s must have %d dimension(s), got shape %s"
                         % (what, ndim, a.shape))
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        at = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        raise ValueError("save_model: %s%s = %r is not a finite number"
                         % (what, list(at), float(a[at])))
    return a


def cuda_built():
    """True when this build has the CUDA backend."""
    return bool(_tessera.cuda_built())


def build_info():
    """This build and the libraries it runs (``python -m tessera`` prints it): version,
    commit, build_type, compiler; cuda {built, architectures, runtime, driver, devices};
    nccl; mpi {library, standard}; blas and lapack {vendor, path, config} (the libraries
    the loader resolved); scalapack; openmp {version, max_threads, usable_cpus}; hdf5
    {version, parallel}. Local to this process: no MPI initialisation, no collective."""
    import json  # noqa: PLC0415

    return json.loads(_tessera.build_info())
