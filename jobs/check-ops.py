#!/usr/bin/env python3
"""Checks that every operation declared in kernels/ops/ (a signature macro
TESSERA_<NAME>_OP(T) given to TESSERA_DECLARE_OP; kernels/ops/common.hpp) has, in each
backend's folder (kernels/reference/, kernels/cpu/, kernels/cuda/), a definition that writes
the signature out as declared, so that a tags file, clangd or grep finds e.g.
tessera::kernels::cuda::mttkrp with its parameters, followed by
TESSERA_INSTANTIATE_OP(TESSERA_<NAME>_OP), which compiles only if the written signature is
the declared one.

Usage: jobs/check-ops.py [--tags]
  --tags   also run universal-ctags (jobs/tags.sh's options) and check that it lists each
           definition as a function of tessera::kernels::<backend> with the declared
           parameters (skipped with a note when ctags is not installed)
Exit status 1, with one line per operation and backend that has no such definition.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BACKENDS = {"reference": ("*.cpp",), "cpu": ("*.cpp",), "cuda": ("*/*.cu",)}
# universal-ctags reads .cu as CUDA without namespace scopes; as C++ it gives them.
CTAGS_ARGS = ["--langmap=C++:+.cu.cuh", "--fields=+nS", "--kinds-C++=f"]


def squash(s):
    return re.sub(r"\s+", " ", s).strip()


def declared_ops():
    """{macro: signature text} of every TESSERA_DECLARE_OP'd signature macro."""
    macros, declared = {}, set()
    for h in sorted(glob.glob(os.path.join(ROOT, "kernels", "ops", "*.hpp"))):
        text = open(h, encoding="utf-8").read()
        for m in re.finditer(r"^#define (TESSERA_\w+_OP)\(T\)((?:.*\\\n)*.*)$", text, re.M):
            macros[m.group(1)] = squash(m.group(2).replace("\\\n", " "))
        declared.update(re.findall(r"^TESSERA_DECLARE_OP\((TESSERA_\w+_OP)\)", text, re.M))
    return {k: macros[k] for k in sorted(declared)}


def name_and_params(signature):
    m = re.match(r"(.*?)\b(\w+)\((.*)\)$", signature)
    return m.group(2), m.group(3)


def main():
    ops = declared_ops()
    if not ops:
        sys.exit("check-ops: no TESSERA_DECLARE_OP found under kernels/ops/")
    missing = []
    for backend, patterns in BACKENDS.items():
        files = [f for p in patterns for f in glob.glob(os.path.join(ROOT, "kernels", backend, p))]
        texts = {f: squash(open(f, encoding="utf-8").read()) for f in files}
        for macro, sig in ops.items():
            written = "template <typename T> " + sig + " {"
            where = [f for f, t in texts.items() if written in t]
            if not where:
                missing.append(f"kernels/{backend}: no definition written as `{sig}`")
            elif f"TESSERA_INSTANTIATE_OP({macro});" not in texts[where[0]]:
                rel = os.path.relpath(where[0], ROOT)
                missing.append(f"{rel}: {name_and_params(sig)[0]} is not followed by "
                               f"TESSERA_INSTANTIATE_OP({macro})")
    if "--tags" in sys.argv[1:]:
        if shutil.which("ctags") is None:
            print("check-ops: ctags not found: the tags check is skipped")
        else:
            out = subprocess.run(["ctags", "--output-format=json", *CTAGS_ARGS, "-f", "-", "-R",
                                  *(os.path.join("kernels", b) for b in BACKENDS)],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
            tags = set()
            for line in out.splitlines():
                t = json.loads(line)
                if t.get("kind") == "function" and "scope" in t:
                    tags.add((t["scope"], t["name"], re.sub(r"\s", "", t.get("signature", ""))))
            for backend in BACKENDS:
                for sig in ops.values():
                    name, params = name_and_params(sig)
                    key = (f"tessera::kernels::{backend}", name, "(" + re.sub(r"\s", "", params) + ")")
                    if key not in tags:
                        missing.append(f"ctags: no function {key[0]}::{name}{key[2]}")
    for m in missing:
        print(m)
    print(f"check-ops: {len(ops)} operations x {len(BACKENDS)} backends, "
          f"{len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
