/* The only file that calls mmap, madvise, mincore, getrandom, getrlimit, getauxval,
 * sched_getaffinity, sched_getcpu and clock_gettime, and reads the kernel's memory settings. */
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

void *os_reserve(size_t size, int commit) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void *p = mmap(NULL, size, commit ? PROT_READ | PROT_WRITE : PROT_NONE, flags, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void *os_reserve_hugetlb(size_t size) {
  int saved = errno;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  errno = saved;
  return p == MAP_FAILED ? NULL : p;
}

/* A virtual machine may back a populated page only at its first write (7.5-10 us on the test
 * host, no fault counted in the guest): each page is written once, which on a range advised
 * onto huge pages faults in a huge page at the first write of each. */
void os_populate(void *p, size_t size) {
  for (size_t at = 0, page = os_page_size(); at < size; at += page) *((volatile char *)p + at) = 0;
}

/* The first line of a small file of sysfs or procfs into buf, NUL-ended; false when unreadable. */
static bool read_line(const char *path, char *buf, size_t size) {
  int saved = errno, fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
  if (fd >= 0) close(fd);
  errno = saved;
  if (n <= 0) return false;
  buf[n] = 0;
  for (ssize_t i = 0; i < n; i++)
    if (buf[i] == '\n') buf[i] = 0;
  return true;
}

static uint64_t read_u64(const char *path) {
  char buf[32];
  uint64_t n = 0;
  if (!read_line(path, buf, sizeof buf)) return 0;
  for (const char *s = buf; *s >= '0' && *s <= '9'; s++) n = n * 10 + (uint64_t)(*s - '0');
  return n;
}

size_t os_thp_size(bool *always) {
  char mode[64];
  *always = false;
  if (!read_line("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof mode)) return 0;
  if (strstr(mode, "[never]")) return 0;   /* "always [madvise] never": the bracketed one is in force */
  *always = strstr(mode, "[always]") != NULL;
  return (size_t)read_u64("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
}

bool os_advise_huge(void *p, size_t size, bool huge) {
  int saved = errno;
  bool ok = madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
  errno = saved;
  return ok;
}

size_t os_hugetlb_size(uint64_t *free) {
  char buf[4096];
  int saved = errno, fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);   /* "Hugepagesize:  2048 kB", 20-odd lines down */
  if (fd >= 0) close(fd);
  errno = saved;
  *free = 0;
  const char *s = n > 0 ? (buf[n] = 0, strstr(buf, "Hugepagesize:")) : NULL;
  if (!s) return 0;
  size_t kb = 0;
  for (s += 13; *s == ' '; s++) {}
  for (; *s >= '0' && *s <= '9'; s++) kb = kb * 10 + (size_t)(*s - '0');
  char path[96], digits[24];
  size_t len = strlen(strcpy(path, "/sys/kernel/mm/hugepages/hugepages-"));
  int d = 0;
  for (size_t v = kb; v || !d; v /= 10) digits[d++] = (char)('0' + v % 10);
  while (d) path[len++] = digits[--d];
  strcpy(path + len, "kB/free_hugepages");
  *free = read_u64(path);
  return kb << 10;
}

uint64_t os_hugetlb_pages(uint64_t *free) {
  os_hugetlb_size(free);
  return read_u64("/proc/sys/vm/nr_hugepages");
}

size_t os_huge_resident(const void *p, size_t size) {
  uintptr_t lo = (uintptr_t)p, hi = lo + size, from = 0, to = 0;
  size_t total = 0;
  int saved = errno, fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return 0;
  }
  char buf[4096], line[256];
  size_t len = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (len < sizeof line - 1) line[len++] = buf[i];
        continue;
      }
      line[len] = 0;
      len = 0;
      const char *s = line;
      uintptr_t a = 0, b = 0;
      bool hex = true;
      for (; hex && *s && *s != '-'; s++) {
        unsigned v = *s >= '0' && *s <= '9' ? (unsigned)(*s - '0') : *s >= 'a' && *s <= 'f' ? (unsigned)(*s - 'a' + 10) : 16;
        if (v == 16) hex = false;
        a = a * 16 + v;
      }
      if (hex && *s == '-') {   /* a mapping's first line: "from-to perms ..." */
        for (s++; *s && *s != ' '; s++) b = b * 16 + (unsigned)(*s <= '9' ? *s - '0' : *s - 'a' + 10);
        from = a;
        to = b;
        continue;
      }
      const char *key = strncmp(line, "AnonHugePages:", 14) == 0 ? line + 14
                        : strncmp(line, "Private_Hugetlb:", 16) == 0 ? line + 16 : NULL;
      if (!key || to <= lo || from >= hi) continue;
      size_t kb = 0;
      for (s = key; *s == ' '; s++) {}
      for (; *s >= '0' && *s <= '9'; s++) kb = kb * 10 + (size_t)(*s - '0');
      total += kb << 10;
    }
    if (n < 0) break;
  }
  close(fd);
  errno = saved;
  return total;
}

void os_unreserve(void *p, size_t size) {
  int saved = errno;
  munmap(p, size);
  errno = saved;
}

bool os_commit(void *p, size_t size) {
  int saved = errno;
  bool ok = mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
  errno = saved;
  return ok;
}

bool os_overcommit_strict(void) {
  char c = 0;
  int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, &c, 1);
  close(fd);
  return n == 1 && c == '2';
}

bool os_release(void *p, size_t size) {
  int saved = errno;
  bool ok = madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  return ok;
}

size_t os_resident(const void *p, size_t size) {
  size_t page = os_page_size(), total = 0;
  unsigned char vec[4096];
  uintptr_t a = (uintptr_t)p & ~(page - 1), end = (uintptr_t)p + size;
  while (a < end) {
    size_t n = (end - a + page - 1) / page;
    if (n > sizeof vec) n = sizeof vec;
    if (mincore((void *)a, n * page, vec) != 0) break;
    for (size_t i = 0; i < n; i++) total += (vec[i] & 1) * page;
    a += n * page;
  }
  return total;
}

unsigned os_cpus(void) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  return n > 0 ? (unsigned)n : 1;
}

unsigned os_cpu(void) {
  int e = errno, c = sched_getcpu();
  errno = e;
  return c > 0 ? (unsigned)c : 0;
}

size_t os_page_size(void) {
  static size_t page;
  if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
  return page;
}

uint64_t os_clock_ms(void) {
  int saved = errno;
  struct timespec t;
  uint64_t ms = clock_gettime(CLOCK_MONOTONIC_COARSE, &t) == 0 ? (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000 : 0;
  errno = saved;
  return ms;
}

uint64_t os_physical_memory(void) {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return 1ull << 30;
  return (uint64_t)si.totalram * si.mem_unit;
}

uint64_t os_address_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return (uint64_t)r.rlim_cur;
}

bool os_secure(void) { return getauxval(AT_SECURE) != 0; }

uint64_t os_random(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) r = (uint64_t)(uintptr_t)&r * 0x9e3779b97f4a7c15ull;
  return r | 1;  /* never 0, never a plausible aligned pointer */
}

void os_write(int fd, const char *s, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    s += w;
    n -= (size_t)w;
  }
  errno = saved;
}

int os_getpid(void) { return (int)getpid(); }

int os_create(const char *path) {
  int saved = errno, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  errno = saved;
  return fd;
}

void os_close(int fd) {
  int saved = errno;
  close(fd);
  errno = saved;
}

int os_open_read(const char *path) {
  int saved = errno, fd = open(path, O_RDONLY | O_CLOEXEC);
  errno = saved;
  return fd;
}

long os_read(int fd, char *buf, size_t n) {
  int saved = errno;
  ssize_t r;
  while ((r = read(fd, buf, n)) < 0 && errno == EINTR) {}
  errno = saved;
  return (long)r;
}

void os_on_signal(int sig, void (*fn)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

bool os_cwd(char *buf, size_t size) {
  int saved = errno;
  bool ok = getcwd(buf, size) != NULL;   /* with a buffer, glibc's getcwd does not allocate */
  errno = saved;
  return ok;
}

int os_dup_high(int fd) {
  int saved = errno, d = fcntl(fd, F_DUPFD_CLOEXEC, 512);
  if (d < 0) d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  errno = saved;
  return d < 0 ? fd : d;
}
