#!/usr/bin/env python3
"""Train a small model with gpumem as PyTorch's CUDA allocator.

    make torch-allocator                      # builds build/libgm_torch.so
    python3 examples/torch_allocator/train.py --compare

--compare runs the same training three times, each in a fresh process
(PyTorch's allocator can only be swapped before the first CUDA allocation):
PyTorch's own caching allocator, gpumem with no budget, and gpumem under a
device budget of half the peak PyTorch reserved, where requests past the
budget are served by unified memory instead of raising OOM. It prints step
time and peak memory for each, and the ratios.

One run:  train.py --allocator gpumem --budget 2G   (or --allocator torch)

PyTorch does not check the pointer a pluggable allocator returns, so a
request gpumem cannot serve returns NULL and is counted by the library;
check() below turns that count into a MemoryError with gpumem's reason
after every step (set GM_TORCH_ON_FAIL=abort to stop at the failing
request instead).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIB = os.path.join(HERE, "..", "..", "build", "libgm_torch.so")


def install_gpumem(lib_path):
    """Swap gpumem in. Must run before anything allocates CUDA memory."""
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gm_torch_malloc", "gm_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    lib = ctypes.CDLL(lib_path)
    lib.gm_torch_failures.restype = ctypes.c_ulonglong
    lib.gm_torch_last_error.restype = ctypes.c_char_p
    lib.gm_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
    return lib


def check(lib, seen):
    """Raise if gpumem failed a request since the last check."""
    if lib is None:
        return seen
    n = lib.gm_torch_failures()
    if n != seen:
        raise MemoryError("gpumem could not serve %d request(s): %s" % (n - seen, lib.gm_torch_last_error().decode()))
    return n


def gm_stats(lib, device=0):
    v = (ctypes.c_longlong * 6)()
    if lib.gm_torch_stats(device, v) != 0:
        return None
    keys = ["allocated", "peak_allocated", "reserved", "peak_reserved", "unified", "unified_fallbacks"]
    return dict(zip(keys, list(v)))


def train(args):
    if args.allocator == "gpumem":
        if args.budget:
            os.environ["GPUMEM_CONF"] = "budget:%s" % args.budget + (
                "," + os.environ["GPUMEM_CONF"] if os.environ.get("GPUMEM_CONF") else "")
        lib = install_gpumem(args.lib)
    else:
        lib = None
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    seen = check(lib, 0)
    times, losses = [], []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
        except RuntimeError as e:  # a NULL from the allocator surfaces here, if anywhere
            check(lib, seen)
            raise e
        seen = check(lib, seen)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    times = sorted(times[2:]) or times
    out = {"allocator": args.allocator, "budget": args.budget or "", "step_ms": 1e3 * times[len(times) // 2],
           "final_loss": losses[-1]}
    if lib is not None:
        s = gm_stats(lib)
        out["peak_reserved"] = s["peak_reserved"]
        out["unified_bytes_at_end"] = s["unified"]
        out["unified_fallbacks"] = s["unified_fallbacks"]
    else:
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
    print(json.dumps(out))


def compare(args):
    def run(extra):
        cmd = [sys.executable, os.path.abspath(__file__), "--lib", args.lib, "--steps", str(args.steps),
               "--layers", str(args.layers), "--width", str(args.width), "--batch", str(args.batch)] + extra
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            raise SystemExit("a run failed: %s" % " ".join(extra))
        return json.loads(p.stdout.strip().splitlines()[-1])

    ref = run(["--allocator", "torch"])
    free = run(["--allocator", "gpumem"])
    half = max(1, ref["peak_reserved"] // 2 // (1 << 20))
    tight = run(["--allocator", "gpumem", "--budget", "%dM" % half])
    print("%-28s %10s %14s %10s %12s" % ("run", "step ms", "peak reserved", "x torch", "final loss"))
    for name, r in [("PyTorch allocator", ref), ("gpumem, no budget", free),
                    ("gpumem, budget %d MiB" % half, tight)]:
        print("%-28s %10.2f %11.0f MiB %10.2f %12.5f" % (name, r["step_ms"], r["peak_reserved"] / 2**20,
                                                          r["step_ms"] / ref["step_ms"], r["final_loss"]))
    print("under the budget: %d requests served by unified memory" % tight.get("unified_fallbacks", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allocator", choices=["gpumem", "torch"], default="gpumem")
    ap.add_argument("--budget", default="", help="gpumem device budget, e.g. 2G (GPUMEM_CONF budget:)")
    ap.add_argument("--lib", default=DEFAULT_LIB)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--compare", action="store_true", help="PyTorch vs gpumem vs gpumem under half the peak")
    args = ap.parse_args()
    if args.compare:
        compare(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
