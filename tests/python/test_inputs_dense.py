"""Dense numpy.ndarray inputs (docs/python.md, "Input kinds"): the same results as the COO
of their nonzeros, for every integer/real dtype and byte order; errors; the memory note."""

import warnings

import numpy as np
import pytest
from conftest import random_sparse, tessera

import tessera._inputs as inputs

CPU1 = dict(backend="cpu", threads=1)


def dense_of(coords, vals, shape, dtype=np.float64):
    d = np.zeros(shape, dtype=dtype)
    d[tuple(coords.T)] = vals
    return d


def same_cp(a, b):
    assert a.fit == b.fit
    assert np.array_equal(a.weights, b.weights)
    for fa, fb in zip(a.factors, b.factors):
        assert np.array_equal(fa, fb)


def test_dense_gives_the_cp_of_its_coo(small):
    coords, vals, shape = small
    ref = tessera.cp_als((coords, vals, shape), rank=3, iters=8, **CPU1)
    dense = dense_of(coords, vals, shape)
    same_cp(tessera.cp_als(dense, rank=3, iters=8, **CPU1), ref)
    # Any layout and byte order: a Fortran copy, a big-endian copy, a strided view.
    same_cp(tessera.cp_als(np.asfortranarray(dense), rank=3, iters=8, **CPU1), ref)
    same_cp(tessera.cp_als(dense.astype(">f8"), rank=3, iters=8, **CPU1), ref)
    wide = np.zeros((shape[0], shape[1], 2 * shape[2]))
    wide[:, :, ::2] = dense
    same_cp(tessera.cp_als(wide[:, :, ::2], rank=3, iters=8, **CPU1), ref)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, ">i4", np.int64, np.bool_, np.float16,
                                   np.float32, ">f4"])
def test_dense_dtypes(dtype):
    coords, _, shape = random_sparse((5, 4, 3), 25, seed=7)
    vals = np.arange(1, 26) % 3 + 1  # 1, 2, 3: exact in every dtype (bool: all True)
    dense = dense_of(coords, vals, shape, dtype=dtype)
    as_float = np.float32 if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize == 4 \
        else np.float64
    core = inputs.to_core(dense)
    assert core["values"].dtype == as_float and core["values"].dtype.isnative
    ref_vals = dense[tuple(coords.T)].astype(as_float)
    ref = tessera.cp_als((coords, ref_vals, shape), rank=2, iters=5, **CPU1)
    same_cp(tessera.cp_als(dense, rank=2, iters=5, **CPU1), ref)


def test_dense_tucker_and_contract(small):
    coords, vals, shape = small
    dense = dense_of(coords, vals, shape)
    a = tessera.tucker_hooi(dense, [2, 2, 2], iters=5, **CPU1)
    b = tessera.tucker_hooi((coords, vals, shape), [2, 2, 2], iters=5, **CPU1)
    assert a.fit == b.fit
    z = tessera.contract(dense, dense, "ijk,ljk->il", **CPU1)
    assert np.allclose(z.todense(), np.einsum("ijk,ljk->il", dense, dense), rtol=1e-12)


@pytest.mark.parametrize("shape", [(), (4,), (3, 4), (1,) * 17])
def test_dense_of_wrong_order_is_a_value_error(shape):
    with pytest.raises(ValueError, match=r"X: a dense array with %d dimension\(s\).*order 3 "
                       r"to 16" % len(shape)):
        tessera.cp_als(np.ones(shape), rank=2, **CPU1)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_dense_not_finite_is_a_value_error(bad):
    d = np.ones((3, 4, 5))
    d[1, 2, 3] = bad
    with pytest.raises(ValueError, match=r"X: dense\[1, 2, 3\] = %s is not a finite number"
                       % bad):
        tessera.cp_als(d, rank=2, **CPU1)
    with pytest.raises(ValueError, match=r"Y: dense\[1, 2, 3\]"):
        tessera.contract(np.ones((3, 4, 5)), d, "ijk,ljk->il", **CPU1)


def test_dense_complex_is_a_value_error():
    with pytest.raises(ValueError, match="dtype complex128"):
        tessera.cp_als(np.ones((2, 2, 2), dtype=complex), rank=1, **CPU1)


def test_large_dense_gets_one_memory_note(small, monkeypatch):
    coords, vals, shape = small
    dense = dense_of(coords, vals, shape)
    monkeypatch.setattr(inputs, "DENSE_NOTE_BYTES", dense.nbytes - 1)
    monkeypatch.setattr(inputs, "_dense_noted", False)
    with pytest.warns(ResourceWarning, match=r"X: a dense array of [0-9.]+ MiB .*COO"):
        tessera.cp_als(dense, rank=2, iters=2, **CPU1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        tessera.cp_als(dense, rank=2, iters=2, **CPU1)
