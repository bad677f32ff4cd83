"""gpumem_torch -- gpumem (build/libgm_torch.so) as PyTorch's CUDA allocator.

MemPool mode, the default (torch 2.5 or later; from 2.8 a region routes
only the allocations of the thread that opened it):

    import gpumem_torch as gm
    gm.install("build/libgm_torch.so")
    with gm.region():                  # allocations made here come from gpumem
        model = Model().cuda()
        opt = torch.optim.AdamW(model.parameters())
    g = torch.cuda.CUDAGraph()
    with gm.graph(g):                  # capture into gpumem's pool
        y = model(x)

PyTorch's own caching allocator stays global; a torch.cuda.MemPool per
device, backed by gm_torch_malloc and gm_torch_free, takes what is
allocated inside a region. PyTorch asks gpumem for whole segments and keeps
record_stream, CUDA graphs, out-of-memory exceptions (gpumem returns NULL
only after its own eviction and fallback; PyTorch then raises
torch.OutOfMemoryError), memory_stats and snapshots working. Memory goes
back when the pool is dropped (gm.release()), not with empty_cache.

Global mode, an explicit opt-in before the first CUDA allocation:

    gm.install("build/libgm_torch.so", mode="global")

makes gpumem PyTorch's only allocator (change_current_allocator) and sets
the record_stream, empty_cache, memory-fraction and init hooks through the
allocator's set_*_fn setters: private PyTorch API (checked below; a missing
setter is a warning). PyTorch's statistics, snapshots, cudnn.benchmark's
cache info, CUDA graphs and IPC raise or break there, and a request nothing
can serve becomes a tensor at address 0: call gm.check() between steps.

gm.stats() gives gpumem's own figures in either mode.
"""
import contextlib
import ctypes
import os
import warnings

import torch

# Every PyTorch name this module uses, with the version that brought it:
# tests/test_torch_names.py checks them against the installed torch.
NAMES = [
    ("torch.cuda.memory.CUDAPluggableAllocator", (2, 0)),
    ("torch.cuda.memory.change_current_allocator", (2, 0)),
    ("torch.cuda.MemPool", (2, 5)),
    ("torch.cuda.use_mem_pool", (2, 5)),
    ("torch.cuda.graph", (1, 10)),
    ("torch.cuda.current_device", (1, 0)),
    ("torch.cuda.device_count", (1, 0)),
    ("torch.cuda.device", (1, 0)),
]
# The private setters of global mode (methods of the pluggable allocator's
# _allocator), and the library function each one gets.
SETTERS = {
    "set_record_stream_fn": "gm_torch_record_stream",
    "set_reset_fn": "gm_torch_empty_cache",
    "set_memory_fraction_fn": "gm_torch_set_memory_fraction",
    "set_init_fn": "gm_torch_init",
}

_state = {"lib": None, "alloc": None, "mode": None, "pools": {}, "path": None}


def version():
    """torch's version as a tuple of ints: (2, 8) for "2.8.0+cu126"."""
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _library(path):
    if path is None:
        path = os.environ.get("GM_TORCH_LIB", "build/libgm_torch.so")
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.gm_torch_failures.restype = ctypes.c_ulonglong
    lib.gm_torch_last_error.restype = ctypes.c_char_p
    lib.gm_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
    lib.gm_torch_summary.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.gm_torch_summary.restype = ctypes.c_size_t
    return lib, os.path.abspath(path)


def install(path=None, mode="mempool", no_split=False):
    """Loads libgm_torch.so and makes it PyTorch's allocator, in MemPool mode
    (the default) or in global mode. Keeps the library and the allocator
    alive for the whole process (a cached block may be freed late)."""
    if _state["alloc"] is not None:
        if mode != _state["mode"]:
            raise RuntimeError("gpumem is installed in %s mode already" % _state["mode"])
        return
    if mode not in ("mempool", "global"):
        raise ValueError("mode is 'mempool' or 'global'")
    lib, path = _library(path)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "gm_torch_malloc", "gm_torch_free")
    _state.update(lib=lib, alloc=alloc, mode=mode, path=path, no_split=no_split)
    if mode == "mempool":
        if version() < (2, 5):
            raise RuntimeError("MemPool mode needs torch 2.5 or later (this is %s)" % torch.__version__)
        if version() < (2, 8):
            warnings.warn("torch %s routes every thread's allocations into an open region, not only the caller's"
                          % torch.__version__)
        return
    torch.cuda.memory.change_current_allocator(alloc)
    inner = getattr(alloc, "_allocator", None)
    for name, export in SETTERS.items():  # private API: present from torch 2.5 to 2.15 at least
        fn = getattr(lib, export)
        setter = getattr(inner, name, None)
        if setter is None:
            warnings.warn("torch %s has no %s: that hook of global mode is missing" % (torch.__version__, name))
            continue
        setter(ctypes.cast(fn, ctypes.c_void_p).value)


def pool(device=None):
    """The device's torch.cuda.MemPool backed by gpumem (MemPool mode)."""
    if _state["mode"] != "mempool":
        raise RuntimeError("pool() is for MemPool mode: call install() first")
    dev = torch.cuda.current_device() if device is None else int(device)
    if dev not in _state["pools"]:
        kw = {"no_split": True} if _state["no_split"] and version() >= (2, 10) else {}
        with torch.cuda.device(dev):
            _state["pools"][dev] = torch.cuda.MemPool(_state["alloc"].allocator(), **kw)
    return _state["pools"][dev]


@contextlib.contextmanager
def region(device=None):
    """Allocations made inside (on this thread, from torch 2.8) come from
    gpumem. Blocks freed later go back to the pool, not to PyTorch's cache."""
    p = pool(device)
    with torch.cuda.use_mem_pool(p, device=device):
        yield p


def graph(g, device=None, **kw):
    """torch.cuda.graph(g, pool=gpumem's pool): the graph's memory comes from
    gpumem, whose malloc is safe during capture."""
    p = pool(device)
    return torch.cuda.graph(g, pool=p if version() >= (2, 14) else p.id, **kw)


def release(device=None):
    """Drops the device's pool: once its tensors are dead, PyTorch gives its
    segments back to gpumem (what empty_cache does not do for a live pool)."""
    dev = torch.cuda.current_device() if device is None else int(device)
    _state["pools"].pop(dev, None)


def stats(device=0):
    """gpumem's figures for a device: allocated, peak allocated, reserved,
    peak reserved, bytes in unified memory, unified-memory fallbacks."""
    out = (ctypes.c_longlong * 6)()
    if _state["lib"] is None or _state["lib"].gm_torch_stats(int(device), out) != 0:
        return None
    keys = ("allocated", "peak_allocated", "reserved", "peak_reserved", "unified", "unified_fallbacks")
    return dict(zip(keys, list(out)))


def summary(device=0):
    """gpumem's text summary of a device's allocator."""
    lib = _state["lib"]
    if lib is None:
        return ""
    n = lib.gm_torch_summary(int(device), None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.gm_torch_summary(int(device), buf, n + 1)
    return buf.value.decode()


def check():
    """Global mode: raises MemoryError when a request could not be served
    since the last check (PyTorch does not check a pluggable allocator's
    NULL)."""
    lib = _state["lib"]
    if lib is not None and lib.gm_torch_failures():
        raise MemoryError(lib.gm_torch_last_error().decode())
