# The fa3 kernels' intra-warpgroup overlap as ptxas scheduled it, from `cuobjdump --dump-sass` output: after
# the wait for Q K^T (WARPGROUP.DEPBAR gsb0, 0x1) the softmax's start (its row max, FMNMX, or, in kernels
# that take the exponentials against the stored max first, Fa3Config::kStaleMax, its first MUFU.EX2) must
# come before the wait for P V (DEPBAR gsb0, 0x0), or the softmax does not run under P V. A main-loop wait is
# one with two wgmma groups issued since the last wait (Q K^T and P V, each opened by WARPGROUP.ARRIVE); one
# with a single group since (a tile's first block waiting for the older groups ahead of its deferred
# epilogue) is not. One line per fa3 kernel build:
# "GOOD BAD INSTRUCTIONS<tab>MANGLED-NAME": main-loop waits with the softmax before (GOOD) and after (BAD)
# the P V wait, and the build's SASS instruction count (a change of the compiled kernel shows there even
# where the source change is elsewhere). Run through scripts/sass_overlap.sh.
function flush() {
  if (name ~ /fa3_fwd_kernel/) printf "%5d %5d %6d\t%s\n", good, bad, n, name
  name = ""
  good = bad = st = n = groups = 0
}
/Function :/                    { flush(); name = $NF; next }
/\/\*[0-9a-f]+\*\/ /            { ++n }
/WARPGROUP.ARRIVE/              { ++groups; next }
/WARPGROUP.DEPBAR.LE gsb0, 0x1/ { st = groups >= 2 ? 1 : 0; groups = 0; next }
/FMNMX|MUFU\.EX2/               { if (st == 1) st = 2; next }
/WARPGROUP.DEPBAR.LE gsb0, 0x0/ { if (st == 2) ++good; else if (st == 1) ++bad; st = 0; groups = 0 }
END                             { flush() }
