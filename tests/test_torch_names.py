#!/usr/bin/env python3
"""The PyTorch helper (examples/torch_allocator/gpumem_torch.py and
train.py): both compile, and, where torch is importable, every PyTorch
name the helper uses exists in that version (private setters of global
mode included, as methods of the pluggable allocator's class). Without
torch it says so plainly and checks only what it can. Prints
"N passed, N failed" last."""
import importlib
import os
import py_compile
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HELPER = os.path.join(ROOT, "examples", "torch_allocator")
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL %s" % what)


for f in ("gpumem_torch.py", "train.py"):
    try:
        py_compile.compile(os.path.join(HELPER, f), doraise=True)
        check(True, f)
    except py_compile.PyCompileError as e:
        check(False, "%s does not compile: %s" % (f, e))

try:
    import torch  # noqa: F401
except ImportError:
    print("note: torch is not importable here: the names gpumem_torch.py uses were not checked against a torch")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)

sys.path.insert(0, HELPER)
gm = importlib.import_module("gpumem_torch")
ver = gm.version()
print("torch %s" % torch.__version__)
for name, since in gm.NAMES:
    if ver < since:
        continue
    obj, ok = None, True
    parts = name.split(".")
    try:
        obj = importlib.import_module(parts[0])
        for p in parts[1:]:
            obj = getattr(obj, p)
    except (ImportError, AttributeError):
        ok = False
    check(ok, "torch %s has no %s" % (torch.__version__, name))
cls = getattr(torch._C, "_CUDAPluggableAllocator", None)
for setter in gm.SETTERS:
    check(cls is not None and hasattr(cls, setter), "torch %s: the pluggable allocator has no %s" % (torch.__version__, setter))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
