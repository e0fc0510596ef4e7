// C++ new and delete under flatmalloc: every operator form, a leak through operator new for
// memcheck to find, and (with an argument) a release through the wrong function.
#include <malloc.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

struct alignas(64) wide { char c[64]; };
static int *volatile sink;
static int handler_calls;

// Out of memory: nothrow new returns NULL, new throws std::bad_alloc, after calling the
// new_handler until it gives up.
static int out_of_memory() {
  char *q = new (std::nothrow) char[1ul << 40];
  std::printf("nothrow: %s\n", q ? "not NULL" : "NULL");
  try {
    sink = reinterpret_cast<int *>(new char[1ul << 40]);
    std::puts("no exception");
  } catch (const std::bad_alloc &) {
    std::puts("bad_alloc");
  }
  std::set_new_handler([] { if (++handler_calls == 3) std::set_new_handler(nullptr); });
  try {
    sink = reinterpret_cast<int *>(new char[1ul << 40]);
    std::puts("no exception");
  } catch (const std::bad_alloc &) {
    std::printf("bad_alloc after %d new_handler calls\n", handler_calls);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!std::strcmp(c, "out-of-memory")) return out_of_memory();
  if (!std::strcmp(c, "free-of-new[]")) { sink = new int[4]; std::free(sink); return 0; }
  if (!std::strcmp(c, "delete-of-malloc")) { int *a = static_cast<int *>(std::malloc(16)); delete a; return 0; }
  if (!std::strcmp(c, "delete[]-of-new")) { int *a = new int(1); delete[] a; return 0; }
  if (!std::strcmp(c, "delete-of-new[]")) { int *a = new int[8]; delete a; return 0; }
  if (!std::strcmp(c, "realloc-of-new[]")) {   /* the moved block is memcheck's: free, realloc, delete */
    int *a = new int[4];
    a[0] = 1;
    a = static_cast<int *>(std::realloc(a, 64));
    a = static_cast<int *>(std::realloc(a, 128));
    if (a[0] != 1 || malloc_usable_size(a) < 128) return 3;
    std::free(a);
    return 0;
  }
  for (int i = 0; i < 1000; i++) {
    int *a = new int(i), *b = new int[i + 1];
    wide *w = new wide, *v = new wide[3];
    int *n = new (std::nothrow) int[10];
    if (reinterpret_cast<unsigned long>(w) % 64 || reinterpret_cast<unsigned long>(v) % 64) return 3;
    b[i] = *a;
    ::operator delete(a, sizeof *a);   // sized delete
    delete[] b;
    delete w;
    delete[] v;
    delete[] n;
  }
  sink = new int[25];                  // 100 bytes definitely lost, allocated by operator new[]
  sink = nullptr;
  std::puts("cxx done");
  return 0;
}
