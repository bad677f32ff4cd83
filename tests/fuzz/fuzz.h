/* The harness of the fuzz targets. Each target defines
   LLVMFuzzerTestOneInput and FUZZ_NAME, then includes this. Built with
   clang -fsanitize=fuzzer (GM_FUZZ_LIBFUZZER), libFuzzer drives it
   (`make fuzz`); built otherwise, main() replays every input kept under
   tests/fuzz/seed/NAME and tests/fuzz/regress/NAME (the crashes fuzzing
   once found), or the files and directories named on the command line, so
   the test suite runs them on every build. A target aborts on a broken
   invariant; a crash is a failure either way. */
#ifndef GM_FUZZ_H
#define GM_FUZZ_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* A broken invariant: say which, and stop (libFuzzer keeps the input). */
#define FUZZ_ASSERT(c)                                                                   \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #c);    \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* The input as a string: a copy with a terminator (the caller frees it). */
static inline char* fuzz_string(const uint8_t* data, size_t size) {
    char* s = (char*)malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#ifndef GM_FUZZ_LIBFUZZER
static inline int fuzz_one(const char* path) {
    FILE* f = fopen(path, "rb");
    uint8_t* buf = NULL;
    size_t n = 0, cap = 0, got;
    if (!f) return 0;
    do {
        if (n == cap) {
            uint8_t* b = (uint8_t*)realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!b) abort();
            buf = b;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static inline int fuzz_path(const char* path) {
    struct stat st;
    DIR* d;
    struct dirent* e;
    int n = 0;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return fuzz_one(path);
    if (!(d = opendir(path))) return 0;
    while ((e = readdir(d)) != NULL) {
        char sub[4096];
        if (e->d_name[0] == '.' || strlen(path) + strlen(e->d_name) + 2 > sizeof sub) continue;
        memcpy(sub, path, strlen(path));
        sub[strlen(path)] = '/';
        memcpy(sub + strlen(path) + 1, e->d_name, strlen(e->d_name) + 1);
        n += fuzz_path(sub);
    }
    closedir(d);
    return n;
}

int main(int argc, char** argv) {
    int i, n = 0;
    if (argc > 1) {
        for (i = 1; i < argc; i++) n += fuzz_path(argv[i]);
    } else {
        n += fuzz_path("tests/fuzz/seed/" FUZZ_NAME);
        n += fuzz_path("tests/fuzz/regress/" FUZZ_NAME);
        if (!n) printf("note: no inputs under tests/fuzz/seed/%s (run from the project root)\n", FUZZ_NAME);
    }
    printf("%s: %d inputs replayed\n", FUZZ_NAME, n);
    printf("%d passed, 0 failed\n", n);
    return 0;
}
#endif
#endif
