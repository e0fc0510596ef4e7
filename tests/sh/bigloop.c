/* bigloop: allocate a big buffer, touch every page, free it; LOOPS times. Prints the minor page
 * faults taken during the loops (getrusage), and during the first loop alone, so one_pool.sh can
 * check that an allocator keeps the pages of a freed big block instead of giving them back and
 * faulting them in again on every loop.
 *
 * usage: bigloop LOOPS [MIB]   prints "bigloop: loops=L mib=M first=F total=T checksum=C" */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bigloop LOOPS [MIB]\n");
        return 2;
    }
    long loops = strtol(argv[1], NULL, 10);
    size_t size = (size_t)(argc > 2 ? strtol(argv[2], NULL, 10) : 10) << 20;
    uint64_t checksum = 0;
    long first = 0;
    long start = minflt();
    for (long l = 0; l < loops; l++) {
        /* volatile: the compiler may not drop the block or the stores */
        volatile unsigned char *p = malloc(size);
        if (!p) {
            fprintf(stderr, "bigloop: malloc(%zu) returned NULL in loop %ld\n", size, l);
            return 1;
        }
        for (size_t off = 0; off < size; off += 4096)
            p[off] = (unsigned char)(l + (off >> 12));
        p[size - 1] = (unsigned char)l;
        for (size_t off = 0; off < size; off += 4096)
            checksum += p[off];
        free((void *)p);
        if (l == 0)
            first = minflt() - start;
    }
    long total = minflt() - start;
    printf("bigloop: loops=%ld mib=%zu first=%ld total=%ld checksum=%llu\n", loops, size >> 20, first,
           total, (unsigned long long)checksum);
    return 0;
}
