/* gm-viz's snapshot reader and the segment map it draws: any text is
   either refused with a message or read into segments whose blocks and
   pages lie inside them, and then drawn. */
#define FUZZ_NAME "snapshot"
#include "../../tools/gm_snapshot.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    gms_snapshot d;
    size_t i, k;
    uint64_t total = 0;
    FILE* f;
    if (!gms_parse((const char*)data, size, &d)) {
        FUZZ_ASSERT(d.error[0] && !d.segs && !d.nsegs);
        return 0;
    }
    for (i = 0; i < d.nsegs; i++) {
        const gms_seg* g = &d.segs[i];
        for (k = 0; k < g->nblocks; k++)
            FUZZ_ASSERT(g->blocks[k].offset <= g->size && g->blocks[k].size <= g->size - g->blocks[k].offset &&
                        g->blocks[k].requested <= g->blocks[k].size);
        for (k = 0; k < g->npages; k++)
            FUZZ_ASSERT(g->pages[2 * k] <= g->size && g->pages[2 * k + 1] <= g->size - g->pages[2 * k]);
        FUZZ_ASSERT(g->size <= UINT64_MAX - total);
        total += g->size;
    }
    FUZZ_ASSERT(total == d.total);
    f = fopen("/dev/null", "w");
    if (f) {
        gms_draw(f, &d, 1000);
        fclose(f);
    }
    gms_free(&d);
    return 0;
}
