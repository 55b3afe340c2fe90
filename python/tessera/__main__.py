"""``python -m tessera``: what this installation is (docs/python.md): the version, the
build's capabilities (CUDA and its architectures, NCCL, MPI, BLAS/LAPACK, OpenMP, HDF5),
where the module was loaded from and which interpreter runs it. ``--json`` prints the same
as one JSON object. Exit status 0."""

import json
import os
import sys


def _or(v, none="-"):
    return none if v is None or v == "" else str(v)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print("usage: python -m tessera [--json]\n\n" + __doc__.strip())
        return 0
    import numpy as np  # noqa: PLC0415

    import tessera  # noqa: PLC0415

    info = tessera.build_info()
    info["module"] = os.path.dirname(os.path.abspath(tessera.__file__))
    info["extension"] = os.path.abspath(tessera._tessera.__file__)
    info["python"] = {"executable": sys.executable, "version": sys.version.split()[0],
                      "prefix": sys.prefix, "numpy": np.__version__}
    if "--json" in argv:
        print(json.dumps(info, indent=2))
        return 0
    cuda, mpi, omp, h5 = info["cuda"], info["mpi"], info["openmp"], info["hdf5"]
    if cuda["built"]:
        cuda_line = "built (arch %s; runtime %s, driver %s; %d device(s) visible)" % (
            _or(cuda["architectures"]), _or(cuda["runtime"]), _or(cuda["driver"]),
            cuda["devices"])
    else:
        cuda_line = "not built (backend=\"cuda\" raises ValueError)"

    def lib(d):
        text = "%s (%s)" % (d["vendor"], _or(d["path"], "linked statically"))
        return text + ("; " + d["config"] if d["config"] else "")

    rows = [
        ("tessera", "%s (commit %s, %s, %s)" % (info["version"], info["commit"][:12],
                                               info["build_type"], _or(info["compiler"]))),
        ("CUDA", cuda_line),
        ("NCCL", _or(info["nccl"], "not built") if cuda["built"] else "not built"),
        ("MPI", "%s (MPI %s)" % (_or(mpi["library"]), mpi["standard"])),
        ("BLAS", lib(info["blas"])),
        ("LAPACK", lib(info["lapack"])),
        ("ScaLAPACK", "built" if info["scalapack"] else "not built (svd=\"scalapack\" unavailable)"),
        ("OpenMP", "%s, %d thread(s) by default (%d usable CPU(s))" % (
            omp["version"], omp["max_threads"], omp["usable_cpus"])),
        ("HDF5", "%s%s" % (_or(h5["version"]), ", parallel" if h5["parallel"] else "")),
        ("module", info["module"]),
        ("python", "%s (%s; NumPy %s)" % (sys.executable, info["python"]["version"],
                                         np.__version__)),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print("%-*s  %s" % (width, k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
