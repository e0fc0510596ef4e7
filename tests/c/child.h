/* child.h: runs a case in a forked child with its stderr (fd 2) and a second pipe (fd 3, where
 * a case writes the pointer it passes) captured: for the tests of what stops the program. */
#ifndef CHILD_H
#define CHILD_H
#include <sys/wait.h>
#include <unistd.h>

/* Reads fd to its end into buf (NUL-terminated, at most size - 1 bytes); returns the length. */
static inline size_t child_slurp(int fd, char *buf, size_t size) {
  size_t n = 0;
  ssize_t r;
  while (n + 1 < size && (r = read(fd, buf + n, size - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  return n;
}

/* Runs body(arg) in a child, which exits with what it returns; line gets the child's stderr,
 * p what it wrote to fd 3. Returns the child's wait status, -1 when no child could start. */
static inline int child_run(int (*body)(const void *), const void *arg, char *line, size_t nline, char *p, size_t np) {
  int err[2], ptr[2];
  if (pipe(err) || pipe(ptr)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(err[0]);   /* first: one of them may be fd 3 */
    close(ptr[0]);
    dup2(err[1], 2);
    dup2(ptr[1], 3);
    _exit(body(arg));
  }
  close(err[1]);
  close(ptr[1]);
  child_slurp(err[0], line, nline);
  child_slurp(ptr[0], p, np);
  close(err[0]);
  close(ptr[0]);
  int st;
  return waitpid(pid, &st, 0) == pid ? st : -1;
}
#endif
