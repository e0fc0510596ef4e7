/* The only door to the operating system. Nothing here allocates. */
#ifndef FM_OS_H
#define FM_OS_H
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "types.h"

/* Reserves size bytes of zeroed address space, readable and writable and committed on first
 * touch when commit is set, else inaccessible until os_commit (os_populate makes it resident).
 * Returns NULL when the kernel refuses. */
hidden void *os_reserve(size_t size, int commit);
/* Reserves size bytes (a multiple of the hugetlb page size) from the kernel's reserved huge
 * pages (MAP_HUGETLB, its default size), readable and writable; the pages are the kernel's to
 * give at mmap, so a first touch never fails. NULL when it has too few free. */
hidden void *os_reserve_hugetlb(size_t size);
/* Writes each page of [p, p+size) once, so every page is resident (prefault). */
hidden void os_populate(void *p, size_t size);
/* Transparent huge pages: the size the kernel offers (hpage_pmd_size), 0 when its mode is
 * "never" or it has none; *always: the mode is "always" (every range gets them unless advised
 * otherwise), else "madvise". Read once. */
hidden size_t os_thp_size(bool *always);
/* Advises [p, p+size) onto huge pages at their first touch (MADV_HUGEPAGE), or never
 * (MADV_NOHUGEPAGE). p and size are multiples of the huge page. False when refused. */
hidden bool os_advise_huge(void *p, size_t size, bool huge);
/* The kernel's reserved huge pages (hugetlb) of its default size: that size (0: none), and
 * how many of them are free now. */
hidden size_t os_hugetlb_size(uint64_t *free);
/* How many huge pages of the default size the kernel keeps reserved (vm.nr_hugepages), and
 * in *free how many of them no one uses. */
hidden uint64_t os_hugetlb_pages(uint64_t *free);
/* Bytes of [p, p+size) that lie on huge pages, transparent or hugetlb (/proc/self/smaps).
 * Allocates nothing; 0 when it cannot be read. */
hidden size_t os_huge_resident(const void *p, size_t size);
/* Gives back [p, p+size) of a reservation of os_reserve, address space and all. */
hidden void os_unreserve(void *p, size_t size);
/* Makes [p, p+size) readable and writable (page multiples); false when the kernel's commit
 * limit refuses. Keeps errno. */
hidden bool os_commit(void *p, size_t size);
/* vm.overcommit_memory is 2: every writable private page counts against the commit limit,
 * MAP_NORESERVE or not, and again in each forked child. */
hidden bool os_overcommit_strict(void);
/* Gives the pages of [p, p+size) back; they read as zero afterwards, whatever was written
 * there (MADV_DONTNEED on private anonymous memory), and a range without pages costs a walk of
 * its page tables only. p and size are page multiples. False when the kernel refused (locked
 * pages): then nothing is known. Keeps errno. */
hidden bool os_release(void *p, size_t size);
/* Bytes of [p, p+size) that are resident. */
hidden size_t os_resident(const void *p, size_t size);
hidden size_t os_page_size(void);
/* CPUs the process may run on (sched_getaffinity at the first call), at least 1. */
hidden unsigned os_cpus(void);
/* The CPU the calling thread runs on now (glibc reads it from the rseq area where the kernel
 * offers it, else through the vDSO), 0 when it cannot be told. Keeps errno. */
hidden unsigned os_cpu(void);
/* Milliseconds on a clock that never goes back (CLOCK_MONOTONIC_COARSE: a few milliseconds'
 * resolution, read in the vDSO without a system call where the kernel offers it). Allocates
 * nothing, keeps errno; 0 when the clock cannot be read. */
hidden uint64_t os_clock_ms(void);
hidden uint64_t os_physical_memory(void);
/* The soft RLIMIT_AS in bytes (the process's whole address space), UINT64_MAX when unlimited. */
hidden uint64_t os_address_limit(void);
/* The program runs in secure mode (AT_SECURE: setuid or setgid, or file capabilities): its
 * environment comes from a less privileged user. */
hidden bool os_secure(void);
hidden uint64_t os_random(void);
hidden void os_write(int fd, const char *s, size_t n);
hidden int os_getpid(void);
/* Creates (or truncates) path for writing, close-on-exec, not through a symbolic link; -1 on
 * failure. Keeps errno. */
hidden int os_create(const char *path);
hidden void os_close(int fd);
/* Opens path for reading, close-on-exec; -1 on failure. Keeps errno. */
hidden int os_open_read(const char *path);
/* Reads up to n bytes (retrying on EINTR); 0 at the end, -1 on failure. Keeps errno. */
hidden long os_read(int fd, char *buf, size_t n);
/* Runs fn on signal sig (SA_RESTART). Async-signal-safe callers only. */
hidden void os_on_signal(int sig, void (*fn)(int));
/* The current directory into buf; false when it does not fit or cannot be read. */
hidden bool os_cwd(char *buf, size_t size);
/* A close-on-exec copy of fd, numbered high out of the program's way; fd itself on failure. */
hidden int os_dup_high(int fd);
#endif
