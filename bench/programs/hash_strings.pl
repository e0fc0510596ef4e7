# bench/programs/hash_strings.pl N [ROUNDS]: perl hash and string work for bench/programs.sh.
# Each round builds a hash of N string keys and joined values, splits and grows every value,
# deletes a third, sorts the keys and joins them into one long string, then drops it all.
# Prints a checksum that must not depend on the allocator.
use strict;
use warnings;

my $n = shift // 200000;
my $rounds = shift // 4;
my $sum = 0;
for my $r (1 .. $rounds) {
  my %h;
  for my $i (1 .. $n) {
    my $k = sprintf("k%07d_%d", ($i * 7919) % (2 * $n), $r);
    $h{$k} = join(",", $i, $i * 2, "x" x ($i % 40), lc($k));
  }
  for my $k (keys %h) {
    my @f = split /,/, $h{$k};
    $sum += scalar(@f);
    $h{$k} .= uc($f[3]) . reverse($f[2]);
  }
  delete @h{ grep { substr($_, 7, 1) eq '3' } keys %h };
  my @sorted = sort keys %h;
  my $all = join(";", @sorted[0 .. ($#sorted < 5000 ? $#sorted : 5000)]);
  $sum += length($all) + scalar(@sorted);
  my %inv;
  while (my ($k, $v) = each %h) { push @{ $inv{ length($v) } }, $k; }
  $sum += scalar(keys %inv);
}
print "$sum\n";
