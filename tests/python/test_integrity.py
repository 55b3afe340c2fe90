"""Integrity guards seen from Python (issue 41, point 3): a model or checkpoint whose data
fails its checksum is refused by every reader with the CLI's line (docs/formats.md,
"Checksums of model files"), and a run whose model is zero stops as "degenerate"."""

import re

import numpy as np
import pytest
from conftest import tessera

CPU1 = dict(backend="cpu", threads=1)


def corrupt(path, values):
    """Flips one bit of the stored bytes of `values` (float64, found in the file)."""
    data = bytearray(path.read_bytes())
    want = np.ascontiguousarray(values, dtype="<f8").tobytes()
    at = data.find(want)
    assert at >= 0 and data.find(want, at + 1) < 0, "the dataset's values are not once in the file"
    data[at + 3] ^= 0x10
    path.write_bytes(bytes(data))


def test_every_reader_refuses_a_dataset_that_fails_its_checksum(small, tmp_path):
    # Python's readers: load_model (whose factors are Python's "--init file:") and resume.
    model, ck = tmp_path / "m.h5", tmp_path / "m.ckpt.h5"
    r = tessera.cp_als(small, rank=2, iters=3, checkpoint=str(ck), **CPU1)
    tessera.save_model(r, model)
    corrupt(model, r.factors[1])
    corrupt(ck, tessera.load_model(ck).factors[0])
    line = re.escape("'%s': checksum mismatch in dataset '/factors/mode_1' (stored " % model)
    with pytest.raises(ValueError, match=line):
        tessera.load_model(model)
    with pytest.raises(ValueError, match=re.escape("'%s': checksum mismatch in dataset "
                                                   "'/factors/mode_0'" % ck)):
        tessera.cp_als(small, rank=2, iters=5, resume=str(ck), **CPU1)
    t = tessera.tucker_hooi(small, 2, iters=3, **CPU1)
    tmodel = tmp_path / "t.h5"
    tessera.save_model(t, tmodel)
    corrupt(tmodel, t.core)
    with pytest.raises(ValueError, match=re.escape("'%s': checksum mismatch in dataset '/core'"
                                                   % tmodel)):
        tessera.load_model(tmodel)


def test_a_zero_model_is_degenerate(small, capfd):
    # l1 beyond every MTTKRP entry zeroes the factors; the fit stops changing at 0.
    r = tessera.cp_als(small, rank=2, iters=6, l1=1e9, l2=1e-3, **CPU1)
    assert r.stop_reason == "degenerate" and not r.converged
    assert r.record["stop_reason"] == "degenerate"
    assert not np.any(r.weights)
    out = capfd.readouterr()
    assert "degenerate run: the model is zero everywhere" in out.out + out.err
