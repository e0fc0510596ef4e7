/* Functions the core's files share. Each carries its file's noun. */
#ifndef FM_INTERNAL_H
#define FM_INTERNAL_H
#include <stddef.h>
#include "types.h"

/* options.c */
hidden void options_read(struct fm_options *o);
hidden cold __attribute__((noreturn)) void options_fail(const char *name, const char *value, const char *why);

/* pool.c: start-up and the bootstrap buffer */
hidden bool pool_ready(void);
hidden bool pool_init(void);          /* false: use the bootstrap buffer for now */
hidden void *boot_alloc(size_t size, size_t align);
hidden bool boot_owns(const void *p);
hidden size_t boot_usable(const void *p);

/* class.c: size classes and their shared stores */
/* Lays the classes out from start; returns the bytes they use, 0 if small_size is too small. */
hidden size_t class_setup(const struct fm_options *o, uintptr_t start, size_t small_size, uint8_t *cls_of,
                          uint8_t *chunk_cls, unsigned chunk_shift);
hidden unsigned class_of(size_t size);
/* Class of the block holding p, or -1 when p is outside the small area. */
hidden int class_at(const void *p);
hidden void *class_index_to_ptr(uint64_t idx);
hidden unsigned class_take(unsigned c, void **head);     /* a batch into head, returns its count */
hidden void class_give(unsigned c, void *head, unsigned count);
hidden uint64_t class_carved(unsigned c);
hidden int class_check(unsigned c);
hidden int class_check_list(unsigned c, void *head, uint64_t count);

/* tcache.c: thread caches */
hidden void tcache_setup(void);
hidden void *tcache_alloc(unsigned c, bool borrow);
hidden void tcache_free(void *p, unsigned c);
hidden uint64_t tcache_cached(unsigned c);
hidden int tcache_check(void);

/* large.c */
hidden void large_setup(uintptr_t base, uintptr_t end, size_t retain);
hidden void *large_alloc(size_t size, size_t align);
hidden void *large_calloc(size_t size);
hidden void large_free(void *p);
hidden bool large_owns(const void *p);
hidden size_t large_usable(const void *p);
hidden bool large_resize(void *p, size_t size);
hidden int large_trim(void);
hidden void large_after_fork(void);
struct large_stats { size_t in_use, peak, free, top, blocks, committed_end; uintptr_t base; };
hidden void large_stats(struct large_stats *s);
hidden int large_check(void);

/* check.c: checking mode, memcheck, misuse reports */
hidden cold __attribute__((noreturn)) void check_fault(const char *what, const void *p, int cls);
hidden void *check_malloc(size_t size, size_t align);
hidden void check_free(void *p);
hidden void *check_realloc(void *p, size_t size);
hidden size_t check_usable(void *p);
hidden void check_pool_start(void);


/* stats.c */
hidden void stats_setup(void);

/* profile.c: FLATMALLOC_PROFILE; check.c reports each block's requested size */
hidden void profile_setup(void);
hidden void profile_alloc(size_t size);
hidden void profile_free(size_t size);

/* api.c slow paths, behind the inline fast paths of fast.h */
hidden void *alloc_block(size_t size);
hidden noinline void *fm_malloc_slow(size_t size);
hidden noinline void fm_free_slow(void *p);
#endif
