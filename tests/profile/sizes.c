/* Allocates from a known set of sizes, for tests/profile/profile.sh.
 *
 *   sizes plain     holds i + 1 blocks of each size in {24, 40, 136, 1000, 5000} (1..5 blocks,
 *                   10 rounds: requests 10 * (i + 1), peak i + 1), frees them; no stdio
 *   sizes threads   4 threads hold 1000 blocks of 72 B each at once, then 64 more each (the
 *                   profile must see a peak of 4000-4256 and exactly 4256 requests)
 *   sizes fork      the parent holds 10 blocks of 200 B, 3 children each allocate 20 of 200 B
 *                   and 5 of 3000 B (children exit with exit(0)); merged: 200 B -> 70 requests,
 *                   peak 70; 3000 B -> 15 requests, peak 15
 *   sizes churn     200 threads one after another, each allocates and frees 10 blocks of 96 B:
 *                   96 B -> 2000 requests, peak 10, and the threads reuse one table
 *   sizes forkthreads  a thread holds 30 blocks of 400 B while the main thread forks; the child
 *                   allocates 5 of 400 B, then a new thread 7 more: the child's file has 400 B ->
 *                   12 requests, peak 12 (the 30 inherited blocks are not counted again) and no
 *                   table more than the parent (the vanished thread's table is reused) */
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

static void *churn_main(void *arg) {
  (void)arg;
  void *v[10];
  hold(v, 10, 96);
  release(v, 10);
  return NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage;

static void stage_set(int s) {
  pthread_mutex_lock(&lock);
  stage = s;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
}

static void stage_wait(int s) {
  pthread_mutex_lock(&lock);
  while (stage < s) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
}

static void *holder_main(void *arg) {
  (void)arg;
  void *v[30];
  hold(v, 30, 400);
  stage_set(1);
  stage_wait(2);
  release(v, 30);
  return NULL;
}

static void *child_thread_main(void *arg) {
  void **v = arg;
  hold(v, 7, 400);
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
  } else if (!strcmp(mode, "churn")) {
    for (int i = 0; i < 200; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, churn_main, NULL)) die("pthread_create failed\n");
      pthread_join(t, NULL);
    }
  } else if (!strcmp(mode, "forkthreads")) {
    pthread_t holder, t;
    if (pthread_create(&holder, NULL, holder_main, NULL)) die("pthread_create failed\n");
    stage_wait(1);
    pid_t pid = fork();
    if (pid < 0) die("fork failed\n");
    if (pid == 0) {
      void *mine[5], *its[7];
      hold(mine, 5, 400);
      if (pthread_create(&t, NULL, child_thread_main, its)) die("pthread_create failed\n");
      pthread_join(t, NULL);
      release(its, 7);
      release(mine, 5);
      exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) die("child failed\n");
    stage_set(2);
    pthread_join(holder, NULL);
  } else {
    die("usage: sizes plain|threads|fork|churn|forkthreads\n");
  }
  return 0;
}
