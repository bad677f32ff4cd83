/* GPUMEM_DEBUG: misuse asserts, with a message. Each case runs in a child
   process, which must die of the assertion (SIGABRT) and say why on
   stderr; the library stays silent without GPUMEM_DEBUG (test_misuse). */
#define _GNU_SOURCE /* before the first system header, for gpumem.h */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#define GPUMEM_DEBUG
#undef NDEBUG
#include "gm_kept.h"

/* Runs fn in a child with stderr in a pipe; whether it died of SIGABRT,
   and what it said. */
static int dies_saying(void (*fn)(void), const char* words) {
    int fd[2], status = 0;
    char out[4096];
    ssize_t n, got = 0;
    pid_t pid;
    if (pipe(fd) != 0) return 0;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        _exit(0); /* no assertion: the case fails */
    }
    close(fd[1]);
    while (got < (ssize_t)sizeof out - 1 && (n = read(fd[0], out + got, sizeof out - 1 - (size_t)got)) > 0) got += n;
    out[got] = 0;
    close(fd[0]);
    waitpid(pid, &status, 0);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)) printf("child did not abort (status %#x)\n", status);
    if (!strstr(out, words)) printf("child said: %s\n", out);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(out, words) != NULL;
}

static void alloc_after_shutdown(void) {
    gm_context* ctx = t_setup(t_desc());
    void* p;
    gm_shutdown(ctx);
    gm_alloc(ctx, &p, 100, NULL);
}

static void shutdown_twice(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_shutdown(ctx);
    gm_shutdown(ctx);
}

static void tensor_after_shutdown(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_tensor t;
    gm_tensor_create(ctx, &t, 4096);
    gm_shutdown(ctx);
    gm_tensor_destroy(ctx, t);
}

int main(void) {
    gm_context* ctx;
    void* p;
    /* The forked checks first: CUDA does not survive fork(), so a child may
       use CUDA only if this process has not (the runtime then fails every
       call in the child with an initialization error); and no thread of
       the runtime's exists yet, which ThreadSanitizer needs to fork. */
    T_CHECK(dies_saying(alloc_after_shutdown, "already shut down"));
    T_CHECK(dies_saying(shutdown_twice, "already shut down"));
    T_CHECK(dies_saying(tensor_after_shutdown, "already shut down"));
    /* a live context works as usual */
    ctx = t_setup(t_desc());
    T_OK(gm_alloc(ctx, &p, 100, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
    t_kept_free();
    return t_done();
}
