/* Allocates from a known set of sizes, for tests/profile/profile.sh.
 *
 *   sizes plain     holds i + 1 blocks of each size in {24, 40, 136, 1000, 5000} (1..5 blocks,
 *                   10 rounds: requests 10 * (i + 1), peak i + 1), frees them; no stdio
 *   sizes threads   4 threads hold 1000 blocks of 72 B each at once, then 64 more each (the
 *                   profile must see a peak of 4000-4256 and exactly 4256 requests)
 *   sizes fork      the parent holds 10 blocks of 200 B, 3 children each allocate 20 of 200 B
 *                   and 5 of 3000 B (children exit with exit(0)); merged: 200 B -> 70 requests,
 *                   peak 70; 3000 B -> 15 requests, peak 15 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *m) {
  write(2, m, strlen(m));
  _exit(2);
}

static void hold(void **v, int n, size_t size) {
  for (int i = 0; i < n; i++)
    if (!(v[i] = malloc(size))) die("malloc failed\n");
  for (int i = 0; i < n; i++) memset(v[i], 1, size);
}

static void release(void **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
}

static pthread_barrier_t barrier;

static void *thread_main(void *arg) {
  (void)arg;
  static __thread void *v[1064];
  hold(v, 1000, 72);
  pthread_barrier_wait(&barrier);
  hold(v + 1000, 64, 72);
  pthread_barrier_wait(&barrier);
  release(v, 1064);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  if (!strcmp(mode, "plain")) {
    static const size_t sizes[] = {24, 40, 136, 1000, 5000};
    void *v[5][5];
    for (int round = 0; round < 10; round++) {
      for (int s = 0; s < 5; s++) hold(v[s], s + 1, sizes[s]);
      for (int s = 0; s < 5; s++) release(v[s], s + 1);
    }
  } else if (!strcmp(mode, "threads")) {
    pthread_t t[4];
    pthread_barrier_init(&barrier, NULL, 4);
    for (int i = 0; i < 4; i++)
      if (pthread_create(&t[i], NULL, thread_main, NULL)) die("pthread_create failed\n");
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  } else if (!strcmp(mode, "fork")) {
    void *mine[10], *kid[25];
    hold(mine, 10, 200);
    for (int c = 0; c < 3; c++) {
      pid_t pid = fork();
      if (pid < 0) die("fork failed\n");
      if (pid == 0) {
        hold(kid, 20, 200);
        hold(kid + 20, 5, 3000);
        release(kid, 25);
        exit(0);
      }
      int st;
      if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) die("child failed\n");
    }
    release(mine, 10);
  } else {
    die("usage: sizes plain|threads|fork\n");
  }
  return 0;
}
