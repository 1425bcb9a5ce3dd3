/*
 * A fixed-rate HTTP/1.1 load generator that accounts for coordinated omission (the wrk2 model; wrk2 is not a
 * Debian package): C connections, connection c sends its k-th request at the intended time
 * t0 + (k * C + c) / rate, and every response's latency is taken from that intended time, not from when the
 * request actually left. A server that stalls therefore pays for every request that should have been sent
 * during the stall, as the users of a real service would.
 *
 *   fixed-rate HOST PORT RATE SECONDS CONNECTIONS KEYS [WARMUP_S]
 *
 * GET /v1/check?policy=free&key=k<n>, n uniform in [0, KEYS) (xorshift32, seed 1), or key=hot when KEYS is 1.
 * One request in flight per connection (no pipelining). Prints one JSON line: requests intended and answered
 * after the warm-up, and p50 / p99 / p99.9 / max of the corrected latency in ms (exact: every latency kept
 * and sorted). Build: cc -O2 -o fixed-rate fixed-rate.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int fd;
  uint64_t k;          /* requests sent on this connection */
  int busy;            /* a request is in flight */
  uint64_t intended;   /* ns: the in-flight request's intended send time */
  char buf[16384];
  size_t len;
} conn_t;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint32_t rng = 1;
static uint32_t xorshift32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The length of the first complete response in buf, or 0 if it is not all there yet. */
static size_t response_length(const char *buf, size_t len) {
  const char *end = memmem(buf, len, "\r\n\r\n", 4);
  if (end == NULL) return 0;
  size_t head = (size_t)(end - buf) + 4;
  size_t body = 0;
  const char *cl = memmem(buf, head, "content-length:", 15);
  if (cl == NULL) cl = memmem(buf, head, "Content-Length:", 15);
  if (cl != NULL) body = (size_t)strtoul(cl + 15, NULL, 10);
  return len >= head + body ? head + body : 0;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: fixed-rate HOST PORT RATE SECONDS CONNECTIONS KEYS [WARMUP_S]\n");
    return 2;
  }
  const char *host = argv[1];
  int port = atoi(argv[2]);
  double rate = atof(argv[3]), seconds = atof(argv[4]);
  int nconn = atoi(argv[5]);
  unsigned keys = (unsigned)atoi(argv[6]);
  double warmup = argc > 7 ? atof(argv[7]) : 0.2;
  uint64_t interval = (uint64_t)(1e9 / rate);     /* ns between two intended sends, over all connections */
  uint64_t total = (uint64_t)(rate * (seconds + warmup));
  uint64_t *lat = calloc(total + 1, sizeof(uint64_t));
  size_t nlat = 0;
  uint64_t intended_after_warmup = 0;

  int ep = epoll_create1(0);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)nconn};
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  conn_t *c = calloc((size_t)nconn, sizeof(conn_t));
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &addr.sin_addr);
  for (int i = 0; i < nconn; i++) {
    c[i].fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(c[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c[i].fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
      perror("connect");
      return 1;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &e);
  }
  const uint64_t t0 = now_ns() + 1000000;  /* 1 ms from now */
  const uint64_t t_warm = t0 + (uint64_t)(warmup * 1e9);
  const uint64_t t_end = t_warm + (uint64_t)(seconds * 1e9);
  char req[256];
  struct epoll_event events[256];
  for (;;) {
    uint64_t now = now_ns();
    /* send every request that is due on an idle connection; find the next due time */
    uint64_t next = UINT64_MAX;
    int all_done = 1;
    for (int i = 0; i < nconn; i++) {
      uint64_t due = t0 + (c[i].k * (uint64_t)nconn + (uint64_t)i) * interval;
      if (due < t_end) all_done = 0;
      if (c[i].busy || due >= t_end) continue;
      if (due <= now) {
        int n = keys <= 1 ? snprintf(req, sizeof req, "GET /v1/check?policy=free&key=hot HTTP/1.1\r\nHost: b\r\n\r\n")
          : snprintf(req, sizeof req, "GET /v1/check?policy=free&key=k%u HTTP/1.1\r\nHost: b\r\n\r\n", xorshift32() % keys);
        if (write(c[i].fd, req, (size_t)n) != n) {
          perror("write");
          return 1;
        }
        c[i].busy = 1;
        c[i].intended = due;
        c[i].k++;
        if (due >= t_warm) intended_after_warmup++;
      } else if (due < next) next = due;
    }
    int busy = 0;
    for (int i = 0; i < nconn; i++) busy |= c[i].busy;
    if (all_done && !busy) break;
    if (now > t_end + 5000000000ull) break; /* answers 5 s overdue: give up on them (counted as not answered) */
    if (next != UINT64_MAX) {
      struct itimerspec its = {.it_value = {.tv_sec = (time_t)(next / 1000000000ull), .tv_nsec = (long)(next % 1000000000ull)}};
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    }
    int n = epoll_wait(ep, events, 256, 100);
    for (int e = 0; e < n; e++) {
      uint32_t i = events[e].data.u32;
      if (i == (uint32_t)nconn) {
        uint64_t x;
        while (read(tfd, &x, sizeof x) > 0) {}
        continue;
      }
      conn_t *k = &c[i];
      ssize_t r = read(k->fd, k->buf + k->len, sizeof k->buf - k->len);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        fprintf(stderr, "connection %u closed by the server\n", i);
        return 1;
      }
      k->len += (size_t)r;
      size_t m = response_length(k->buf, k->len);
      if (m == 0) continue;
      uint64_t done = now_ns();
      if (k->intended >= t_warm) lat[nlat++] = done - k->intended;
      memmove(k->buf, k->buf + m, k->len - m);
      k->len -= m;
      k->busy = 0;
    }
  }
  qsort(lat, nlat, sizeof lat[0], cmp);
#define PCT(p) (nlat == 0 ? 0.0 : lat[(size_t)((double)(nlat - 1) * (p))] / 1e6)
  printf("{\"intended\":%llu,\"answered\":%zu,\"seconds\":%.3f,\"p50\":%.4f,\"p99\":%.4f,\"p999\":%.4f,\"max\":%.4f}\n",
         (unsigned long long)intended_after_warmup, nlat, seconds, PCT(0.5), PCT(0.99), PCT(0.999), nlat ? lat[nlat - 1] / 1e6 : 0.0);
  return 0;
}
