/* status.h: a field of /proc/self/status in KiB (VmRSS:, VmHWM:), for latency.c and scale.c
 * (static; include after the system headers). Reads into a stack buffer: no allocation. */
#ifndef BENCH_STATUS_H
#define BENCH_STATUS_H
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The number after field, or -1 when it cannot be read. */
static long status_kb(const char *field)
{
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = 0;
  char *p = strstr(buf, field);
  if (!p)
    return -1;
  return strtol(p + strlen(field), NULL, 10);
}
#endif
