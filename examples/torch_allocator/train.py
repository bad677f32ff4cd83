#!/usr/bin/env python3
"""Train a small model with gpumem as PyTorch's CUDA allocator.

    make torch-allocator                      # builds build/libgm_torch.so
    python3 examples/torch_allocator/train.py --compare

--compare runs the same training three times, each in a fresh process:
PyTorch's own caching allocator, gpumem with no budget, and gpumem under a
device budget of half the peak PyTorch reserved, where requests past the
budget are served by unified memory instead of raising OOM. It prints step
time and peak memory for each, and the ratios.

One run:  train.py --allocator gpumem --budget 2G   (or --allocator torch)

gpumem is installed by gpumem_torch.py beside this script. --mode mempool
(the default) keeps PyTorch's allocator global and makes the model, its
optimizer state and the steps allocate from a gpumem-backed MemPool
(from torch 2.8 the autograd engine's own thread is not routed, so
gradients made there come from PyTorch's allocator). --mode global makes
gpumem PyTorch's only allocator; there a request gpumem cannot serve
becomes a tensor at address 0, so gm.check() after every step turns the
library's failure count into a MemoryError with gpumem's reason (set
GM_TORCH_ON_FAIL=abort to stop at the failing request instead).
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIB = os.path.join(HERE, "..", "..", "build", "libgm_torch.so")
sys.path.insert(0, HERE)


def train(args):
    gm = None
    if args.allocator == "gpumem":
        if args.budget:
            os.environ["GPUMEM_CONF"] = "budget:%s" % args.budget + (
                "," + os.environ["GPUMEM_CONF"] if os.environ.get("GPUMEM_CONF") else "")
        import gpumem_torch as gm
        gm.install(args.lib, mode=args.mode)  # global mode: before anything allocates CUDA memory
    import torch
    import torch.nn as nn

    region = gm.region() if gm is not None and args.mode == "mempool" else contextlib.nullcontext()
    with region:
        out = run_steps(args, gm, torch, nn)
    print(json.dumps(out))


def run_steps(args, gm, torch, nn):

    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
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
        except RuntimeError as e:  # global mode: a NULL from the allocator surfaces here, if anywhere
            if gm is not None:
                gm.check()
            raise e
        if gm is not None:
            gm.check()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    times = sorted(times[2:]) or times
    out = {"allocator": args.allocator, "mode": args.mode, "budget": args.budget or "",
           "step_ms": 1e3 * times[len(times) // 2], "final_loss": losses[-1]}
    s = gm.stats() if gm is not None else None
    if s is not None:
        out["peak_reserved"] = s["peak_reserved"]
        out["unified_bytes_at_end"] = s["unified"]
        out["unified_fallbacks"] = s["unified_fallbacks"]
    else:
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
    return out


def compare(args):
    def run(extra):
        cmd = [sys.executable, os.path.abspath(__file__), "--lib", args.lib, "--mode", args.mode, "--steps", str(args.steps),
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
    ap.add_argument("--mode", choices=["mempool", "global"], default="mempool",
                    help="how gpumem is installed (gpumem_torch.py)")
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
