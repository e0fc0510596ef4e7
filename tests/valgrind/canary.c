/* Checking mode: p[n] = 0 just past the requested size is caught for every n in 1..1024, and
 * the canary depends on the process's key, not only on the address. "show" prints a block's
 * first canary bytes (the driver compares two runs). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "show")) {
    volatile unsigned char *p = malloc(24);
    for (int i = 0; i < 8; i++) printf("%02x", p[24 + i]);
    puts("");
    return 0;
  }
  int missed = 0;
  for (int n = 1; n <= 1024; n++) {
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", 1);
      dup2(devnull, 2);
      volatile char *p = malloc((size_t)n);
      memset((char *)p, 'x', (size_t)n);
      p[n] = 0;                     /* the off-by-one terminating NUL */
      free((void *)p);
      _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
      printf("p[%d] = 0 not caught\n", n);
      missed++;
    }
  }
  printf("canary: %d of 1024 missed\n", missed);
  return missed != 0;
}
