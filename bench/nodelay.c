/* LD_PRELOAD shim for the bench's S3 server: sets TCP_NODELAY on every
 * accepted connection.
 *
 * s3s-fs 0.14 (the bench's default S3 server, README "Performance") does not
 * set TCP_NODELAY on the connections it accepts, and it writes a GET
 * response's head and body separately; Nagle's algorithm then holds the body
 * until the client's delayed ACK of the head, about 20-40 ms on Linux. That
 * stall would add to the bench's configured latency, once per GET, for every
 * contender. With this shim a GET takes about 1 ms of server time and the
 * latency proxy's delay is the latency, as intended.
 *
 * Built by `scripts/setup-tools.sh bench` into .tools/s3s-fs/libnodelay.so;
 * tests/support/serve.py preloads it for s3s-fs only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static void nodelay(int fd) {
    int one = 1;
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int accept(int s, struct sockaddr *a, socklen_t *l) {
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    int fd = real(s, a, l);
    nodelay(fd);
    return fd;
}

int accept4(int s, struct sockaddr *a, socklen_t *l, int flags) {
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    int fd = real(s, a, l, flags);
    nodelay(fd);
    return fd;
}
