#!/usr/bin/perl
# Allocation workload for programs_perl.sh: generates text deterministically, then builds hashes
# of words, runs regexes (matches, captures, substitutions, split/join) over it, and grows and
# drops big strings and arrays. The output is sorted wherever a hash is walked, so it does not
# depend on perl's per-process hash seed. usage: perl workload.pl [LINES]
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my $lines = shift // 60000;
my @syll = qw(ka ro mi tu se na lo pe ri vu da ze bo fi gu);
my $x = 12345;
sub nextrand { $x = ($x * 1103515245 + 12345) % 2147483648; return $x >> 4; }

my (@text, %freq, %bylen, %pairs);
for my $i (1 .. $lines) {
    my @words;
    my $n = 3 + nextrand() % 10;
    for (1 .. $n) {
        my $w = '';
        $w .= $syll[nextrand() % @syll] for 1 .. 1 + nextrand() % 4;
        push @words, $w;
    }
    my $line = join(' ', @words) . sprintf(' id=%06d v=%d.%02d', $i, nextrand() % 1000, nextrand() % 100);
    push @text, $line;
}

my $md5 = Digest::MD5->new;
my ($matched, $subst, $sumv) = (0, 0, 0);
for my $line (@text) {
    my @w = split /\s+/, $line;
    for my $w (@w) {
        next if $w =~ /=/;
        $freq{$w}++;
        push @{ $bylen{length $w} }, $w if length($w) > 4;
    }
    for my $k (0 .. $#w - 2) {
        $pairs{"$w[$k] $w[$k+1]"}++;
    }
    if ($line =~ /\b((?:ka|ro)\w*)\s+(\w+?mi)\b.*v=(\d+)\.(\d+)/) {
        $matched++;
        $sumv += $3 * 100 + $4;
        $md5->add("$1|$2");
    }
    (my $t = $line) =~ s/([aeiou])\1?/uc($1)/ge;
    $subst += ($t =~ tr/A-Z//);
    $md5->add($t) if $subst % 7 == 0;
}

# big strings and arrays that grow and go away
for my $round (1 .. 5) {
    my $big = '';
    $big .= $text[$_ * 7 % @text] . "\n" for 0 .. 40000;
    my @parts = split /\n/, $big;
    my %seen = map { substr($_, 0, 12) => 1 } @parts;
    $md5->add(scalar(@parts) . ':' . scalar(keys %seen) . ':' . length($big));
    undef $big;
}

my @top = (sort { $freq{$b} <=> $freq{$a} || $a cmp $b } keys %freq)[0 .. 9];
print "lines: $lines\n";
print "distinct words: ", scalar(keys %freq), "\n";
print "distinct pairs: ", scalar(keys %pairs), "\n";
print "top words: ", join(' ', map {"$_=$freq{$_}"} @top), "\n";
for my $len (sort { $a <=> $b } keys %bylen) {
    my %u = map { $_ => 1 } @{ $bylen{$len} };
    print "length $len: ", scalar(@{ $bylen{$len} }), " words, ", scalar(keys %u), " distinct\n";
}
print "matched: $matched sum: $sumv substituted vowels: $subst\n";
print "pairs digest: ", md5_hex(join("\n", map {"$_=$pairs{$_}"} sort keys %pairs)), "\n";
print "digest: ", $md5->hexdigest, "\n";
