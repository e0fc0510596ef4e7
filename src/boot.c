/* The bootstrap buffer: calls made before the pool exists (the dynamic loader, dlsym, our own
 * set-up, or environ not set yet) are served here. Each block is preceded by a 16-byte header
 * holding its size; blocks are never reused, and free() and realloc() recognise them forever. */
#include <errno.h>

#include "internal.h"

static _Alignas(4096) char boot[FM_BOOT_BYTES];
static _Atomic size_t boot_used;

void *boot_alloc(size_t size, size_t align) {
  if (align < FM_ALIGN) align = FM_ALIGN;
  if (size > FM_BOOT_BYTES || align > FM_BOOT_BYTES) goto full;
  size_t need = (size + FM_ALIGN - 1) & ~(size_t)(FM_ALIGN - 1);
  size_t old = atomic_load(&boot_used), at;
  do {
    at = ((uintptr_t)boot + old + FM_ALIGN + align - 1) / align * align - (uintptr_t)boot;
    if (at + need > FM_BOOT_BYTES) goto full;
  } while (!atomic_compare_exchange_weak(&boot_used, &old, at + need));
  ((size_t *)(boot + at))[-1] = need;
  return boot + at;
full:
  errno = ENOMEM;
  return NULL;
}

bool boot_owns(const void *p) { return (uintptr_t)p - (uintptr_t)boot < FM_BOOT_BYTES; }
size_t boot_usable(const void *p) { return ((const size_t *)p)[-1]; }
