"""Conversions of the input kinds tessera accepts into the dicts of the C++ core.

Accepted kinds (docs/python.md, "Input kinds"):

- ``(coords, values, shape)``: NumPy arrays (or anything ``numpy.asarray`` takes), 0-based
  integer coordinates of any integer dtype, shaped ``(nnz, N)`` (one row per nonzero, as
  pyttb's ``subs``) or ``(N, nnz)`` (one row per mode, as pydata ``sparse.COO.coords``);
  when ``nnz == N`` the array is read as ``(nnz, N)``. Values of any real dtype.
- a ``scipy.sparse`` COO array or matrix (2-way; other formats are converted with
  ``tocoo()``),
- a pydata ``sparse.COO``,
- a path (``str`` or ``os.PathLike``) to a ``.tns``, ``.tns.gz`` or ``.h5`` file, read by the
  library itself (every rank passes the same path),
- any object with pyttb sptensor fields ``subs`` (nnz x N), ``vals`` (nnz or nnz x 1) and
  ``shape``,
- a dense ``numpy.ndarray`` of order 3 to 16 (any integer, boolean or real dtype, either
  byte order): converted here to the COO of its nonzeros (float32 values stay float32,
  others become float64). The dense array and its COO are both in memory for the call;
  above DENSE_NOTE_BYTES a warning (once per process) says so.

Sparse arrays are handed over as they are (no transpose or dtype copy on the Python side);
the core reads them in place and copies once into its per-mode arrays.
"""

import operator
import os
import warnings

import numpy as np

# The size (bytes) of a dense input above which tessera warns, once per process, that the
# COO form of the tensor would save memory.
DENSE_NOTE_BYTES = 1 << 30
_MAX_ORDER = 16  # tensor::kMaxOrder
_MAX_DIM = 1 << 32  # the longest mode (32-bit coordinates)
_dense_noted = False


def _layout(coords, nnz, order, known=None, name="X"):
    """"nnz_by_mode" or "mode_by_nnz". `known`: the layout of a converter that knows it
    (dense, scipy.sparse, pydata sparse: (N, nnz); pyttb, COOResult: (nnz, N)), so that
    nnz == N is not guessed; None for a user's (coords, values, shape), where nnz == N is
    read as (nnz, N) (docs/python.md)."""
    if coords.ndim != 2:
        raise ValueError(
            "%s: coords must be 2-D, (nnz, N) or (N, nnz); got %d dimension(s)"
            % (name, coords.ndim)
        )
    if known == "mode_by_nnz" and coords.shape == (order, nnz):
        return known
    if known == "nnz_by_mode" and coords.shape == (nnz, order):
        return known
    if coords.shape == (nnz, order):
        return "nnz_by_mode"
    if coords.shape == (order, nnz):
        return "mode_by_nnz"
    raise ValueError(
        "%s: coords has shape %s but values has %d entries and shape has %d modes: expected "
        "(%d, %d) or (%d, %d)" % (name, coords.shape, nnz, order, nnz, order, order, nnz)
    )


def _shape(shape, name):
    """The mode lengths as Python ints: integers only (TypeError otherwise); the C++ core
    checks their range, after the ones no int64 holds are refused here."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError("%s: shape must be a sequence of mode lengths, got %s"
                        % (name, type(shape).__name__))
    out = []
    for m, s in enumerate(shape):
        if isinstance(s, (bool, np.bool_)):
            raise TypeError("%s: shape[%d] = %r is not an integer" % (name, m, s))
        try:
            s = operator.index(s)
        except TypeError:
            raise TypeError("%s: shape[%d] = %r is not an integer" % (name, m, s)) from None
        if s < 1:
            raise ValueError("%s: shape[%d] = %d: every mode length must be at least 1"
                             % (name, m, s))
        if s > _MAX_DIM:
            raise ValueError("%s: shape[%d] = %d is over 2^32, the longest mode of 32-bit "
                             "coordinates" % (name, m, s))
        out.append(s)
    return tuple(out)


def _arrays(coords, values, shape, name, layout=None):
    coords = np.asarray(coords)
    values = np.asarray(values)
    if values.ndim == 2 and values.shape[1] == 1:  # pyttb keeps vals as a column
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError("%s: values must be 1-D, got shape %s" % (name, values.shape))
    # dtypes (docs/python.md, "What the module refuses"): coordinates of any integer dtype
    # and byte order, read exactly by the core; floats (even whole ones), booleans and
    # objects are refused, since no conversion of them is sure to be exact. Values of any
    # boolean, integer or real dtype and byte order, converted to float64 by NumPy.
    if coords.dtype.kind not in "iu":
        if coords.size == 0 and coords.dtype.kind in "biuf":
            coords = coords.astype(np.int64)
        else:
            raise TypeError(
                "%s: coords must be an integer array, got dtype %s%s" % (
                    name, coords.dtype, "; convert whole-number floats with "
                    "coords.astype(numpy.int64)" if coords.dtype.kind == "f" else ""))
    if values.dtype.kind not in "biuf":
        raise TypeError("%s: values must be real numbers (a boolean, integer or real dtype), "
                        "got dtype %s" % (name, values.dtype))
    shape = _shape(shape, name)
    if coords.size == 0 and values.size == 0:  # numpy.asarray([]) too: no nonzeros
        coords = np.zeros((0, len(shape)), dtype=np.int64)
        layout = None
    layout = _layout(coords, values.shape[0], len(shape), layout, name)
    return {"coords": coords, "values": values, "shape": shape, "layout": layout, "name": name}


def _size(n):
    return "%.1f GiB" % (n / float(1 << 30)) if n >= 1 << 30 else "%.1f MiB" % (n / float(1 << 20))


def _dense(X, name):
    """A dense ndarray as (coords (N, nnz) int64, values, shape): its nonzeros."""
    global _dense_noted
    if X.ndim < 3 or X.ndim > _MAX_ORDER:
        raise ValueError(
            "%s: a dense array with %d dimension(s) (shape %s): tessera decomposes tensors of "
            "order 3 to %d; pass a dense array of that order, or (coords, values, shape) / a "
            "scipy.sparse matrix for a sparse one" % (name, X.ndim, X.shape, _MAX_ORDER))
    kind = X.dtype.kind
    if kind not in "biuf":
        raise ValueError("%s: a dense array of dtype %s: expected an integer, boolean or real "
                         "dtype" % (name, X.dtype))
    if kind == "f" and X.size:
        finite = np.isfinite(X)
        if not finite.all():
            at = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise ValueError("%s: dense%s = %r is not a finite number" % (
                name, list(at), float(X[at])))
    if X.nbytes > DENSE_NOTE_BYTES and not _dense_noted:
        _dense_noted = True
        warnings.warn(
            "%s: a dense array of %s is converted to the COO of its nonzeros (%d bytes per "
            "nonzero), and both are in memory during the call; passing (coords, values, "
            "shape) or a path to a .tns/.h5 file instead saves the dense copy (docs/python.md, "
            "\"Input kinds\")" % (name, _size(X.nbytes), 8 * (X.ndim + 1)),
            ResourceWarning, stacklevel=4)
    coords = np.stack(np.nonzero(X)).astype(np.int64, copy=False)
    values = X[tuple(coords)]
    dtype = np.float32 if kind == "f" and X.dtype.itemsize == 4 else np.float64
    values = values.astype(dtype, copy=False)  # native byte order
    return coords, values, X.shape


def to_core(X, name="X"):
    """The dict the C++ core takes for one input (None stays None)."""
    if X is None:
        return None
    if isinstance(X, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(X))
        if "\0" in path:
            raise ValueError("%s: the path %r contains a NUL character" % (name, path))
        return {"path": path}
    if isinstance(X, tuple) and len(X) == 3:
        return _arrays(X[0], X[1], X[2], name)
    if isinstance(X, np.ma.MaskedArray):
        # Its mask would be dropped: the masked entries' data would be taken as values.
        raise TypeError(
            "%s: a masked array: tessera does not take masks (the masked entries would be "
            "read as values); pass X.filled(0) for a tensor whose masked entries are zero, or "
            "the observed entries as (coords, values, shape) with observed_only=True for "
            "completion" % name)
    if isinstance(X, (np.ndarray, np.generic)):  # a NumPy scalar is a 0-d array
        return _arrays(*_dense(np.asarray(X), name), name, layout="mode_by_nnz")
    mod = type(X).__module__ or ""
    # pydata sparse.COO: coords (N, nnz), data, shape; its implicit entries must be 0.
    if mod.startswith("sparse") and hasattr(X, "coords") and hasattr(X, "data"):
        fill = getattr(X, "fill_value", 0)
        if fill is not None and np.asarray(fill).size == 1 and float(fill) != 0:
            raise ValueError(
                "%s: a sparse.COO with fill_value %r: tessera's sparse tensors are zero off "
                "their stored entries; pass one with fill_value 0" % (name, fill))
        return _arrays(X.coords, X.data, X.shape, name, layout="mode_by_nnz")
    # scipy.sparse (2-way): COO row/col/data.
    if mod.startswith("scipy.sparse"):
        coo = X if getattr(X, "format", None) == "coo" else X.tocoo()
        coords = np.stack([np.asarray(coo.row), np.asarray(coo.col)], axis=0)
        return _arrays(coords, coo.data, coo.shape, name, layout="mode_by_nnz")
    # pyttb.sptensor or anything with its fields: subs (nnz, N).
    if hasattr(X, "subs") and hasattr(X, "vals") and hasattr(X, "shape"):
        return _arrays(X.subs, X.vals, X.shape, name, layout="nnz_by_mode")
    # tessera's own COOResult (read_tensor, contract) or anything with its fields: (nnz, N).
    if hasattr(X, "coords") and hasattr(X, "values") and hasattr(X, "shape"):
        return _arrays(X.coords, X.values, X.shape, name, layout="nnz_by_mode")
    raise TypeError(
        "%s: unsupported input of type %s; pass (coords, values, shape) NumPy arrays, a "
        "scipy.sparse COO array/matrix, a pydata sparse.COO, a path to a .tns/.tns.gz/.h5 "
        "file, an object with pyttb sptensor fields (subs, vals, shape), or a dense "
        "numpy.ndarray of order 3 to 16" % (name, type(X))
    )
