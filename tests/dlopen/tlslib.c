/* A library with dynamic TLS: glibc allocates each thread's block of it with malloc. */
__thread char tls_big[65536];
__thread unsigned long tls_tag = 7;

unsigned long tls_touch(unsigned long tag) {
  for (int i = 0; i < 65536; i += 4096) tls_big[i] = (char)tag;
  unsigned long old = tls_tag;
  tls_tag = tag;
  return old;
}

unsigned long tls_sum(void) {
  unsigned long s = tls_tag;
  for (int i = 0; i < 65536; i += 4096) s += (unsigned char)tls_big[i];
  return s;
}
