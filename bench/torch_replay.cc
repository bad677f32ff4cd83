// bench/torch_replay: the request streams bench/cuda_replay writes (its
// EVENTS_DIR), replayed through PyTorch's own CUDA caching allocator from
// C++ (c10::cuda::CUDACachingAllocator's raw_alloc and raw_delete on the
// current stream: no Python in the timed loop), measured the way
// cuda_replay measures gpumem: ns per operation from an empty cache
// (emptyCache before each run) and the same trace again on the warm cache,
// median of three; fragmentation 1 - peak live / peak reserved; device
// allocations and frees (cudaMalloc and cudaFree) per operation.
//
// Build against the torch beside python3 (see bench/gpu-figures.sh):
//   g++ -O2 -std=c++17 bench/torch_replay.cc -I$T/include -L$T/lib -lc10 -lc10_cuda ...
// usage: torch_replay FILE.ev...
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace A = c10::cuda::CUDACachingAllocator;

struct Ev {
    uint32_t id, is_free;
    uint64_t size;
};

static double now_ns() {
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double median3(double* v) {
    std::sort(v, v + 3);
    return v[1];
}

int main(int argc, char** argv) {
    A::init(c10::cuda::device_count());
    printf("PyTorch's CUDA caching allocator (c10, default settings), nothing touched; ns per operation, median of 3\n\n");
    printf("%-40s %6s | %7s | %8s | again: %8s | calls/op: %6s %6s\n", "trace", "ops", "frag", "torch", "torch", "cold",
           "again");
    for (int a = 1; a < argc; a++) {
        FILE* f = fopen(argv[a], "rb");
        if (!f) {
            perror(argv[a]);
            return 1;
        }
        std::vector<Ev> ev;
        Ev e;
        uint32_t nids = 0;
        while (fread(&e, sizeof e, 1, f) == 1) {
            ev.push_back(e);
            if (e.id + 1 > nids) nids = e.id + 1;
        }
        fclose(f);
        std::vector<void*> ptr(nids, nullptr);
        double cold[3], again[3], frag = 0, calls = 0, calls_again = 0;
        for (int k = 0; k < 3; k++) {
            A::emptyCache();
            A::resetPeakStats(0);
            A::resetAccumulatedStats(0);
            uint64_t live = 0, peak_live = 0;
            for (int pass = 0; pass < 2; pass++) {
                double t0 = now_ns();
                for (const Ev& x : ev) {
                    if (!x.is_free) {
                        ptr[x.id] = A::raw_alloc(x.size ? x.size : 1);
                        live += x.size;
                        if (live > peak_live) peak_live = live;
                    } else if (ptr[x.id]) {
                        A::raw_delete(ptr[x.id]);
                        ptr[x.id] = nullptr;
                        live -= x.size;
                    }
                }
                double ns = (now_ns() - t0) / (double)ev.size();
                for (uint32_t i = 0; i < nids; i++)
                    if (ptr[i]) {
                        A::raw_delete(ptr[i]);
                        ptr[i] = nullptr;
                    }
                live = 0;
                auto st = A::getDeviceStats(0);
                double c = (double)(st.num_device_alloc + st.num_device_free) / (double)ev.size();
                if (pass == 0) {
                    cold[k] = ns;
                    frag = 1.0 - (double)peak_live / (double)st.reserved_bytes[0].peak;
                    calls = c;
                } else {
                    again[k] = ns;
                    calls_again = c - calls;
                }
            }
        }
        const char* name = strrchr(argv[a], '/');
        name = name ? name + 1 : argv[a];
        printf("%-40.40s %6zu | %6.2f%% | %8.0f |        %8.0f |           %6.3f %6.3f\n", name, ev.size(), 100 * frag,
               median3(cold), median3(again), calls, calls_again);
        fflush(stdout);
    }
    A::emptyCache();
    return 0;
}
