# Tensor-core instructions per kernel in `cuobjdump --dump-sass` output: one line per kernel build,
# "ARCH<tab>HMMA<tab>HGMMA<tab>MANGLED-NAME". A kernel's counts are printed when the next kernel or the next
# code section begins (each section, one per translation unit and architecture, names its architecture
# before its kernels), or at the end. Used by scripts/gpu_check.sh.
function flush() {
  if (name != "") printf "%s\t%d\t%d\t%s\n", arch, h, g, name
  name = ""
  h = g = 0
}
/code for sm_/ { flush(); arch = $NF; next }
/Function :/   { flush(); name = $NF; next }
/HGMMA/        { ++g; next }
/HMMA/         { ++h }
END            { flush() }
