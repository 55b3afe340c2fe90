"""Issue 41, point 1: the Python module's options go through the run layer's validation
(src/engine/run/validate.hpp) before any data is distributed, and raise ValueError with the
line the CLI prints for the same value (tests/driver/validate_driver_test.cpp runs the full
table through the binary)."""

import subprocess

import pytest
from conftest import tessera

CPU1 = dict(backend="cpu", threads=1)

# (Python call, the CLI's arguments after the input, the option named)
CASES = [
    (lambda X, d: tessera.cp_als(X, rank=2, l1="abc", **CPU1), ["cp", "--l1", "abc"], "--l1"),
    (lambda X, d: tessera.cp_als(X, rank=2, l2="-1", **CPU1), ["cp", "--l2=-1"], "--l2"),
    (lambda X, d: tessera.cp_als(X, rank=2, nonneg="0,x", **CPU1), ["cp", "--nonneg", "0,x"],
     "--nonneg"),
    (lambda X, d: tessera.cp_als(X, rank=2, resume=str(d / "none.ckpt.h5"), **CPU1),
     ["cp", "--resume", "{D}/none.ckpt.h5"], "--resume"),
    (lambda X, d: tessera.tucker_hooi(X, "2,,2", **CPU1), ["tucker", "-r", "2,,2"], "--ranks"),
    (lambda X, d: tessera.tucker_hooi(X, 2, max_mem="zz", **CPU1),
     ["tucker", "-r", "2", "--max-mem", "zz"], "--max-mem"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_python_raises_the_cli_line(case, small, tmp_path, tessera_bin):
    call, cli, option = CASES[case]
    with pytest.raises(ValueError) as e:
        call(small, tmp_path)
    text = str(e.value)
    assert option in text and ".cpp:" not in text
    # The CLI on an input that does not exist: the same line, about the option.
    args = [a.replace("{D}", str(tmp_path)) for a in cli]
    r = subprocess.run([tessera_bin, args[0], str(tmp_path / "missing.tns")] + args[1:] + ["-q"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("tessera: error")]
    assert lines == ["tessera: error: " + text]


def test_contract_spec_is_checked_before_the_inputs(small):
    with pytest.raises(ValueError, match="einsum spec 'ijk'"):
        tessera.contract(small, small, "ijk", **CPU1)


def test_comm_hierarchy_and_emulate_nodes_are_cp_keywords(small):
    # The CLI's --comm-hierarchy and --emulate-nodes (tessera cp only): checked by the run
    # layer, recorded; Tucker has no such keyword.
    r = tessera.cp_als(small, rank=2, iters=2, comm_hierarchy="flat", emulate_nodes=1, **CPU1)
    assert r.record["options"]["comm_hierarchy"] == "flat"
    assert r.record["options"]["emulate_nodes"] == 1
    with pytest.raises(ValueError, match="--comm-hierarchy sideways") as e:
        tessera.cp_als(small, rank=2, comm_hierarchy="sideways", **CPU1)
    assert ".cpp:" not in str(e.value)
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match="emulate_nodes="):
            tessera.cp_als(small, rank=2, emulate_nodes=bad, **CPU1)
    with pytest.raises(TypeError, match="comm_hierarchy"):
        tessera.tucker_hooi(small, 2, comm_hierarchy="node", **CPU1)
    # --comm-overlap likewise (on one rank of a host backend it changes nothing).
    r = tessera.cp_als(small, rank=2, iters=2, comm_overlap="on", **CPU1)
    assert r.record["options"]["comm_overlap"] == "on"
    with pytest.raises(ValueError, match="--comm-overlap sideways"):
        tessera.cp_als(small, rank=2, comm_overlap="sideways", **CPU1)
    with pytest.raises(ValueError, match="comm_overlap="):
        tessera.cp_als(small, rank=2, comm_overlap=1, **CPU1)
