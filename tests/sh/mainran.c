/* mainran: proves main() ran: first writes "main ran" to stdout (write(2): no stdio, no malloc)
 * and creates the file named by its first argument, if any; then allocates and frees a few
 * blocks (small ones and one of 1 MiB) so a statistics report has something to show.
 * options.sh runs it under rejected settings, where nothing of this may happen. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static const char msg[] = "main ran\n";
    if (write(1, msg, sizeof msg - 1) != (ssize_t)(sizeof msg - 1))
        return 1;
    if (argc > 1) {
        int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            return 1;
        close(fd);
    }
    void *volatile blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = malloc((size_t)16 << (i % 9));
        if (!blocks[i])
            return 1;
        memset(blocks[i], i, 16);
    }
    void *volatile big = malloc(1 << 20);
    if (!big)
        return 1;
    memset(big, 1, 1 << 20);
    free(big);
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
    return 0;
}
