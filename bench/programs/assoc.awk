# bench/programs/assoc.awk: gawk associative arrays for bench/programs.sh, as
# `gawk -v n=N -v rounds=R -f assoc.awk`. Each round fills an array of n string keys with
# growing strings, splits every value, deletes a third of the keys by pattern, builds a second
# array keyed by value length, and deletes both. Prints a checksum independent of the allocator.
BEGIN {
  if (n == "") n = 200000
  if (rounds == "") rounds = 4
  for (r = 1; r <= rounds; r++) {
    for (i = 1; i <= n; i++) {
      k = "k" ((i * 7919) % (2 * n)) "_" r
      a[k] = a[k] i "," (i * 2) "," substr("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, i % 40)
    }
    for (k in a) {
      m = split(a[k], f, ",")
      sum += m
      a[k] = a[k] toupper(k)
    }
    for (k in a)
      if (k ~ /3_/) delete a[k]
    for (k in a)
      b[length(a[k])] = b[length(a[k])] " " k
    for (k in b) sum += length(b[k]) % 97
    delete a
    delete b
  }
  print sum
}
