// bench/arena_parser: the parser write-up's workload. An expression tree kept flat, as
// std::vectors of child indexes (a function call's arguments, an operator's operands), built
// from a generated 45,000-line input 300 times; lines per second.
//
//   arena_parser std|pmr|alloc [passes] [lines]
//     std    std::allocator (new/delete: whichever allocator LD_PRELOAD puts under malloc)
//     pmr    std::pmr::polymorphic_allocator over flatmalloc::arena_resource, reset after each pass
//     alloc  flatmalloc::arena_allocator (the write-up's plain allocator over the same resource)
// prints CSV rows: parser_<mode>,lines_per_s,...  ,ms,...  ,cpu_ms,...  ,checksum,...
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory_resource>
#include <string>
#include <string_view>
#include <vector>

#include "flatmalloc.hpp"

namespace {

enum Kind : uint8_t { NUM, IDENT, CALL, BINOP, ASSIGN };

template <class A>
using rebind = typename std::allocator_traits<A>::template rebind_alloc<uint32_t>;

template <class A>
struct Node {
  Kind kind;
  char op;
  uint32_t token;   // offset in the line
  std::vector<uint32_t, rebind<A>> kids;
  Node(Kind k, char o, uint32_t t, const A &a) : kind(k), op(o), token(t), kids(a) {}
};

template <class A>
struct Parser {
  using NodeAlloc = typename std::allocator_traits<A>::template rebind_alloc<Node<A>>;
  std::vector<Node<A>, NodeAlloc> nodes;
  A alloc;
  std::string_view s;
  size_t i = 0;
  explicit Parser(const A &a) : nodes(NodeAlloc(a)), alloc(a) {}

  void skip() {
    while (i < s.size() && s[i] == ' ') i++;
  }
  uint32_t add(Kind k, char op, uint32_t tok) {
    nodes.emplace_back(k, op, tok, alloc);
    return uint32_t(nodes.size() - 1);
  }
  uint32_t primary() {
    skip();
    uint32_t at = uint32_t(i);
    if (s[i] == '(') {
      i++;
      uint32_t e = expr();
      skip();
      i++;   // ')'
      return e;
    }
    if (s[i] >= '0' && s[i] <= '9') {
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') i++;
      return add(NUM, 0, at);
    }
    while (i < s.size() && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
    skip();
    if (i < s.size() && s[i] == '(') {   // a call: its arguments' indexes in a vector of their own
      i++;
      std::vector<uint32_t, rebind<A>> args(alloc);
      skip();
      while (s[i] != ')') {
        args.push_back(expr());
        skip();
        if (s[i] == ',') i++;
        skip();
      }
      i++;
      uint32_t n = add(CALL, 0, at);
      nodes[n].kids = std::move(args);
      return n;
    }
    return add(IDENT, 0, at);
  }
  static int prec(char c) { return c == '+' || c == '-' ? 1 : c == '*' || c == '/' ? 2 : 0; }
  uint32_t binary(int min) {
    uint32_t l = primary();
    for (;;) {
      skip();
      if (i >= s.size()) return l;
      char c = s[i];
      int p = prec(c);
      if (p < min || p == 0) return l;
      i++;
      uint32_t r = binary(p + 1);
      uint32_t n = add(BINOP, c, uint32_t(i));
      nodes[n].kids.reserve(2);
      nodes[n].kids.push_back(l);
      nodes[n].kids.push_back(r);
      l = n;
    }
  }
  uint32_t expr() { return binary(1); }
  uint32_t statement(std::string_view line) {
    s = line;
    i = 0;
    uint32_t lhs = primary();
    skip();
    i++;   // '='
    uint32_t rhs = expr();
    uint32_t n = add(ASSIGN, '=', 0);
    nodes[n].kids.push_back(lhs);
    nodes[n].kids.push_back(rhs);
    return n;
  }
};

std::string generate(int lines) {
  std::string out;
  uint64_t x = 12345;
  auto rnd = [&](int n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return int((x >> 33) % uint64_t(n));
  };
  const char *names[] = {"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"};
  const char *fns[] = {"sqrt", "max", "min", "clamp", "lerp", "dot"};
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    int r = rnd(depth > 2 ? 2 : 5);
    if (r == 0) return std::to_string(rnd(1000));
    if (r == 1) return names[rnd(8)];
    if (r == 2) {
      std::string c = std::string(fns[rnd(6)]) + "(";
      int n = 1 + rnd(3);
      for (int k = 0; k < n; k++) c += (k ? ", " : "") + gen(depth + 1);
      return c + ")";
    }
    if (r == 3) return "(" + gen(depth + 1) + " + " + gen(depth + 1) + ")";
    return gen(depth + 1) + " * " + gen(depth + 1);
  };
  for (int l = 0; l < lines; l++) out += std::string(names[rnd(8)]) + std::to_string(l % 97) + " = " + gen(0) + "\n";
  return out;
}

template <class A>
uint64_t pass(const std::vector<std::string_view> &lines, const A &a) {
  Parser<A> p(a);
  uint64_t sum = 0;
  for (auto l : lines) sum += p.statement(l);
  for (auto &n : p.nodes) sum += n.kids.size() * 7 + n.kind;
  return sum + p.nodes.size();
}

}  // namespace



int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "std";
  int passes = argc > 2 ? atoi(argv[2]) : 300, nlines = argc > 3 ? atoi(argv[3]) : 45000;
  std::string text = generate(nlines);
  std::vector<std::string_view> lines;
  for (size_t b = 0, e; b < text.size(); b = e + 1) {
    e = text.find('\n', b);
    lines.emplace_back(text.data() + b, e - b);
  }
  flatmalloc::arena_resource res(64 << 20);
  uint64_t check = 0;
  auto run = [&](int n) {
    for (int k = 0; k < n; k++) {
      if (mode == "std") {
        check += pass(lines, std::allocator<uint32_t>());
      } else if (mode == "pmr") {
        check += pass(lines, std::pmr::polymorphic_allocator<uint32_t>(&res));
        res.reset();
      } else if (mode == "alloc") {
        check += pass(lines, flatmalloc::arena_allocator<uint32_t>(&res));
        res.reset();
      } else {
        std::fprintf(stderr, "usage: arena_parser std|pmr|alloc [passes] [lines]\n");
        std::exit(2);
      }
    }
  };
  run(1);   // warm
  struct timespec c0, c1;   // the process's CPU time too (exact, not ticks): for a busy host
  auto t0 = std::chrono::steady_clock::now();
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  run(passes);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("parser_%s,lines_per_s,%.0f\n", mode.c_str(), double(lines.size()) * passes / s);
  std::printf("parser_%s,ms,%.1f\n", mode.c_str(), s * 1e3);
  std::printf("parser_%s,cpu_ms,%.1f\n", mode.c_str(), double(c1.tv_sec - c0.tv_sec) * 1e3 + double(c1.tv_nsec - c0.tv_nsec) / 1e6);
  std::printf("parser_%s,checksum,%llu\n", mode.c_str(), (unsigned long long)(check % 1000000007ull));
  return 0;
}
