/* Checking mode's block layout and validation (check.c), which described mode (vg.c) shares. */
#ifndef FM_CHECK_H
#define FM_CHECK_H
#include "internal.h"
#include "vg.h"

struct check_hdr {
  uint64_t size;
  uint32_t magic;
  uint32_t off16 : 24;   /* (h - b) / 16 */
  uint32_t kind : 8;     /* enum check_kind */
};

enum check_verdict { V_OK, V_FREED, V_FOREIGN, V_INTERIOR, V_MISALIGNED, V_OVERRUN, V_ARENA };

hidden uint32_t check_magic(const struct check_hdr *h, bool live);   /* the header's magic, live or freed */
hidden uint8_t *check_block_end(uint8_t *b, int cls);                /* end of underlying block b */
hidden void check_canary_fill(uint8_t *user, size_t size, uint8_t *end);
hidden bool check_canary_ok(const uint8_t *user, size_t size, uint8_t *end);   /* also arena.c's */
hidden size_t check_block_lead(size_t align);   /* bytes before the program's, at most */
hidden uint8_t *check_room_end(uint8_t *b, int cls, const uint8_t *user);   /* end of the program's bytes and canary */
/* A block of size bytes aligned to align with its header: the program's pointer, the block in *bp. */
hidden uint8_t *check_alloc(size_t size, size_t align, enum check_kind kind, bool direct, uint8_t **bp);
/* Writes the header of a block of size bytes aligned to align in underlying block b; returns
 * the program's pointer. */
hidden uint8_t *check_head(uint8_t *b, size_t size, size_t align, enum check_kind kind);
hidden enum check_verdict check_find(void *p, struct check_block *f);   /* fills f when V_OK */
hidden bool check_kind_fits(enum check_kind have, enum check_kind release);
/* A release through the wrong family: checking mode stops; otherwise one line. */
hidden void check_mismatch(void *p, struct check_block *f, enum check_kind release, bool realloc_call);
/* Validates p for a release through the family of release (realloc names itself): true when p
 * may be released; checking mode stops on a bad pointer. */
hidden bool check_take(void *p, struct check_block *f, int release, bool realloc_call);
hidden void check_fault(enum check_verdict v, void *p, int cls);   /* checking mode: stops */
hidden size_t check_usable_fault(enum check_verdict v, void *p, int cls);   /* checking mode: stops */
hidden bool check_guards(void);   /* malloc(0)'s guards and the large quarantine's hidden pages are on */
hidden cold __attribute__((noreturn)) void check_size_fault(void *p, const struct check_block *f, size_t size, const char *call);
#endif
