// bf16 tile products for the CPU kernels: Intel AMX where the CPU has it, and the same data layout
// multiplied by portable loops (to test the layout and the kernels built on it on any machine).
//
// An AMX tile multiply (TDPBF16PS) takes bf16 operands and accumulates their products in fp32:
// C[16 x 16] += A[16 x 32] * B[32 x 16]. A tile is 16 rows of 64 bytes. The B tile is stored in pairs of
// rows: row kk holds, for each column i, the two elements B[2 kk][i] and B[2 kk + 1][i] side by side, so
// that each 4-byte column of a B row lines up with a 4-byte pair of an A row. A core multiplies about 1000
// bf16 FLOP per cycle this way, over ten times its fp32 AVX-512 rate.
//
// Operands of bf16_gemm:
//   A   row-major bf16 [m x k], any row stride;
//   B   packed (pack_kt, pack_v) into 1 KiB tiles: tile (kc, nc) holds rows [32 kc, 32 kc + 32) and
//       columns [16 nc, 16 nc + 16) of B, at element offset (nc * k / 32 + kc) * 512, element (kk, 2 i + e)
//       of the tile being B[32 kc + 2 kk + e][16 nc + i];
//   C   row-major fp32 [m x n].
// m, n and k are multiples of 32 (kBf16TileAlign): the kernels pad their tiles with zero rows and keys.
#pragma once

#include <cstdint>

namespace flashattn::detail::cpu {

// How the CPU kernels multiply tiles of bf16 and fp16 inputs.
enum class Bf16Products {
  kFp32,      // rows converted to fp32, then the fp32 micro-kernels of tile_gemm (any CPU)
  kAmx,       // AMX tile multiplies on the bf16 values themselves
  kEmulated,  // the AMX path's packing and padding, with portable loops for the multiplies (tests only)
};
const char* bf16_products_name(Bf16Products products);  // "fp32", "amx" or "emulated"

// Whether this build, this CPU and this operating system run AMX bf16 multiplies (the first call asks
// Linux for the tile-data permission of the process).
bool amx_bf16_supported();

// What the kernels use for bf16 and fp16 inputs: kAmx where supported unless the environment variable
// FLASHATTN_CPU_AMX is "0" (read once), else kFp32; or what override_bf16_products last set.
Bf16Products bf16_products();
// For tests and benchmarks: makes bf16_products() return `products` (kAmx where AMX is not supported
// gives kFp32) until clear_bf16_products_override(). Not safe while kernels run on other threads.
void override_bf16_products(Bf16Products products);
void clear_bf16_products_override();

constexpr int64_t kBf16TileAlign = 32;
inline int64_t round_up_to_tile(int64_t n) { return (n + kBf16TileAlign - 1) / kBf16TileAlign * kBf16TileAlign; }

// Loads the AMX tile configuration into the calling thread (for kAmx; nothing otherwise) and releases the
// tiles when it goes out of scope, so an idle thread carries no tile state through context switches.
class Bf16TileScope {
 public:
  explicit Bf16TileScope(Bf16Products products);
  ~Bf16TileScope();
  Bf16TileScope(const Bf16TileScope&) = delete;
  Bf16TileScope& operator=(const Bf16TileScope&) = delete;

 private:
  bool amx_ = false;
};

// K rows (key r at k + r * ldk, d values each) as packed B of S = Q K^T: B is [d x keys_pad], B[j][r] =
// K[r][j], zero for keys r >= keys. d and keys_pad are multiples of 32.
void pack_kt(Bf16Products products, const uint16_t* k, int64_t ldk, int64_t keys, int64_t keys_pad, int64_t d,
             uint16_t* dst);
// V rows as packed B of O = P V: B is [keys_pad x d], B[r][j] = V[r][j], zero rows for r >= keys.
void pack_v(Bf16Products products, const uint16_t* v, int64_t ldv, int64_t keys, int64_t keys_pad, int64_t d,
            uint16_t* dst);

// One row of probabilities for P V, straight from a row of scores: p[c] = 2^(s[c] * scale - shift) for the
// columns c in [begin, end), 0 for the others in [0, n_pad) (n_pad a multiple of 32; s is read in [begin,
// end) only). p is written as two bf16 terms: hi = p rounded to bf16, lo = (p - hi) rounded to bf16, so
// hi + lo carries 16 significant bits and P V loses nothing that an fp32 P would keep at bf16 output
// precision. Returns the sum of the p[c] in fp32 (in an order of its own: results depend on the products
// that run, not on the thread count). Relative error of each p[c] below 4 ulp of fp32 before the split.
float exp2_split_row(Bf16Products products, const float* s, int64_t n_pad, int64_t begin, int64_t end, float scale,
                     float shift, uint16_t* hi, uint16_t* lo);

// The backward's step on one row of n columns, in place: p = 2^(s * scale - shift) into s, then
// ds = p (ds - delta) into ds (the exponentials as in exp2_split_row).
void exp2_ds_row(Bf16Products products, float* s, float* ds, int64_t n, float scale, float shift, float delta);

// Rows [0, rows) and columns [0, n) of x (row stride ldx) as two bf16 terms, hi = x rounded to bf16 and
// lo = (x - hi) rounded to bf16 (row stride ld); columns [n, n_pad) of both are 0.
void split_rows(Bf16Products products, const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t n_pad,
                uint16_t* hi, uint16_t* lo, int64_t ld);
// The same terms of x transposed: row c of hi and lo (row stride ld) holds column c of x for c < cols,
// entries [0, rows) from x's rows and 0 up to rows_pad; rows [cols, cols_pad) are 0. rows_pad and cols_pad
// are multiples of 32.
void split_transposed(Bf16Products products, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                      int64_t rows_pad, int64_t cols_pad, uint16_t* hi, uint16_t* lo, int64_t ld);

// One operand of the products in one or two bf16 terms (lo null: one term); ld is the row stride of row-major
// terms (A operands).
struct Bf16Terms {
  const uint16_t* hi = nullptr;
  const uint16_t* lo = nullptr;
  int64_t ld = 0;
};

// Rows [0, count) of a bf16 or fp16 tensor (row stride ld elements, d values each, d a multiple of 16) as
// terms. bf16 rows are one term, read in place. fp16 rows split exactly into two: an fp16 value has 11
// significant bits and an exponent within bf16's range, so hi = the value rounded to bf16 and lo = the rest
// (at most 3 bits) are both exact; they are written to hi and lo (row stride d).
Bf16Terms bf16_terms(Bf16Products products, bool fp16, const uint16_t* rows, int64_t ld, int64_t count, int64_t d,
                     uint16_t* hi, uint16_t* lo);
// pack_kt and pack_v of each term of `rows` (keys rows), into hi and lo.
Bf16Terms pack_kt_terms(Bf16Products products, const Bf16Terms& rows, int64_t keys, int64_t keys_pad, int64_t d,
                        uint16_t* hi, uint16_t* lo);
Bf16Terms pack_v_terms(Bf16Products products, const Bf16Terms& rows, int64_t keys, int64_t keys_pad, int64_t d,
                       uint16_t* hi, uint16_t* lo);

// C = A B + A_lo B + A B_lo + (accumulate ? C : 0), the terms that are present (a_lo and b_lo may be null).
// The fourth term of (A + A_lo) (B + B_lo) is left out: a lo term is at most 2^-8 of its hi term, so
// A_lo B_lo is below 2^-16 of |A| |B|, under every input's own precision. A and a_lo share the row stride
// lda; B and b_lo are packed alike. Needs a Bf16TileScope of the same products on this thread.
void bf16_gemm(Bf16Products products, int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* a_lo,
               int64_t lda, const uint16_t* b_packed, const uint16_t* b_lo_packed, bool accumulate, float* c,
               int64_t ldc);
// The same with the operands as terms (A row-major with its ld, B packed).
inline void bf16_gemm(Bf16Products products, int64_t m, int64_t n, int64_t k, const Bf16Terms& a, const Bf16Terms& b,
                      bool accumulate, float* c, int64_t ldc) {
  bf16_gemm(products, m, n, k, a.hi, a.lo, a.ld, b.hi, b.lo, accumulate, c, ldc);
}

}  // namespace flashattn::detail::cpu
