/* The Makefile's probe: this builds and links only where liburing's
   headers and library are installed (Debian: liburing-dev). */
#include <liburing.h>
int main(void) {
    struct io_uring ring;
    return io_uring_queue_init(2, &ring, 0) == 0 ? 0 : 1;
}
