/*
 * What the kernel costs on this host, for reading the Redis figures (README, Redis section): the time of a
 * system call that does nothing (getppid), and of a round trip between two processes over two pipes (each
 * side sleeps in read() until the other writes: two wake-ups). On a guest whose every kernel entry switches
 * page tables (PTI without PCID, as /proc/cpuinfo's flags and dmesg's "pti" lines tell), both cost an order
 * of magnitude more than on bare metal, and so does each read, write and epoll_wait of a Redis call.
 *
 *   cc -O2 bench/tools/host-costs.c -o /tmp/host-costs && /tmp/host-costs
 */
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void) {
  const int calls = 200000, trips = 50000;
  double t0 = now_us();
  for (int i = 0; i < calls; i++) syscall(SYS_getppid);
  printf("system call (getppid): %.2f us\n", (now_us() - t0) / calls);
  fflush(stdout); /* the child would print it again from its copy of the buffer */
  int ab[2], ba[2];
  char c = 0;
  if (pipe(ab) != 0 || pipe(ba) != 0) return 1;
  if (fork() == 0) {
    for (int i = 0; i < trips; i++) {
      if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) return 1;
    }
    return 0;
  }
  t0 = now_us();
  for (int i = 0; i < trips; i++) {
    if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return 1;
  }
  printf("pipe round trip between two processes (two wake-ups): %.1f us\n", (now_us() - t0) / trips);
  return 0;
}
