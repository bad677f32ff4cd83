// The header compiles and runs as C++11: a smoke test of the C API from C++.
#include "gm_test.h"

int main() {
    gm_desc d = t_desc();
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    gm_context* ctx = nullptr;
    T_OK(gm_setup(&ctx, &d));
    void* p = nullptr;
    T_OK(gm_alloc(ctx, &p, 1000, nullptr));
    T_CHECK(p != nullptr);
    T_OK(gm_free(ctx, p));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    return t_done();
}
