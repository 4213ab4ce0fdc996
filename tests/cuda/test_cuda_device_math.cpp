// The decoders and activations that the generated kernels run, expanded here as host C++
// from the same macros the generators paste into the CUDA and Metal source
// (backends/gpu/device_math.hpp), and compared bit for bit with core's dequantize and
// activations. Only the primitives (aligned loads, half -> float, bit cast) and the dialect
// macros differ between the two sides; the decoders' sizes are core's dtype table's.
#include <actsparse/backends/gpu/device_math.hpp>  // first: it stringifies the macros unexpanded

#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <doctest/doctest.h>

#include <math.h>  // NOLINT: the snippets call the C functions expf, tanhf, fmaf, as CUDA does

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace host_mirror {

inline unsigned short actsparse_load_u16(const unsigned char* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float actsparse_load_f32(const unsigned char* p) {
  float v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float actsparse_half_to_float(unsigned short h) { return actsparse::to_f32(actsparse::f16{h}); }
inline float actsparse_bits_to_float(unsigned int b) { return std::bit_cast<float>(b); }
inline unsigned int actsparse_float_to_bits(float f) { return std::bit_cast<unsigned int>(f); }

// The sizes the generators write before a decoder, from the same table.
constexpr unsigned int actsparse_f32_bytes = actsparse::block_bytes(actsparse::dtype::f32);
constexpr unsigned int actsparse_f16_bytes = actsparse::block_bytes(actsparse::dtype::f16);
constexpr unsigned int actsparse_bf16_bytes = actsparse::block_bytes(actsparse::dtype::bf16);
constexpr unsigned int actsparse_q8_0_bytes = actsparse::block_bytes(actsparse::dtype::q8_0);
constexpr unsigned int actsparse_q8_0_values = actsparse::block_values(actsparse::dtype::q8_0);
constexpr unsigned int actsparse_q4_0_bytes = actsparse::block_bytes(actsparse::dtype::q4_0);
constexpr unsigned int actsparse_q4_0_values = actsparse::block_values(actsparse::dtype::q4_0);

#define GPU_FN inline
#define GPU_GLOBAL
#define GPU_THREAD
#define GPU_FMA fmaf
#define GPU_EXP expf
#define GPU_TANH tanhf
ACTSPARSE_GPU_DECODE_F32
ACTSPARSE_GPU_DECODE_F16
ACTSPARSE_GPU_DECODE_BF16
ACTSPARSE_GPU_DECODE_Q8_0
ACTSPARSE_GPU_DECODE_Q4_0
ACTSPARSE_GPU_ACTIVATIONS
ACTSPARSE_GPU_ORDER_KEY
#undef GPU_FN
#undef GPU_GLOBAL
#undef GPU_THREAD
#undef GPU_FMA
#undef GPU_EXP
#undef GPU_TANH

}  // namespace host_mirror

namespace {

using decoder = void (*)(const unsigned char*, unsigned int, float*);

template <class T>
void check_decoder(decoder decode) {
  constexpr std::size_t cols = 96;  // 3 blocks of the quantized types
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0F, 2.0F);
  std::vector<float> x(cols);
  for (auto& v : x) v = dist(rng);
  x[5] = 0.0F;
  x[40] = -0.0F;
  x[70] = 1e-6F;  // a subnormal f16 scale or value
  constexpr std::size_t bv = actsparse::dtype_traits<T>::block_values;
  std::vector<T> row(cols / bv);
  actsparse::quantize_row(x.data(), row.data(), cols);
  std::vector<float> expected(cols);
  actsparse::dequantize_row(row.data(), expected.data(), cols);

  std::vector<float> got(cols);
  const auto* bytes = reinterpret_cast<const unsigned char*>(row.data());
  for (unsigned e = 0; e < cols / bv; ++e) decode(bytes, e, got.data() + e * bv);
  for (std::size_t i = 0; i < cols; ++i) {
    CAPTURE(i);
    CHECK(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(expected[i]));
  }
}

}  // namespace

TEST_CASE("cuda: the kernels' decoders match core's dequantize bit for bit (host expansion)") {
  check_decoder<float>(host_mirror::actsparse_decode_f32);
  check_decoder<actsparse::f16>(host_mirror::actsparse_decode_f16);
  check_decoder<actsparse::bf16>(host_mirror::actsparse_decode_bf16);
  check_decoder<actsparse::block_q8_0>(host_mirror::actsparse_decode_q8_0);
  check_decoder<actsparse::block_q4_0>(host_mirror::actsparse_decode_q4_0);

  // A hand-made q4_0 block pins the nibble order: low nibbles are values 0..15.
  actsparse::block_q4_0 b{};
  b.d = actsparse::to_f16(0.5F);
  for (int i = 0; i < 16; ++i) b.qs[i] = static_cast<std::uint8_t>((15 - i) << 4 | i);
  float w[32];
  host_mirror::actsparse_decode_q4_0(reinterpret_cast<const unsigned char*>(&b), 0, w);
  for (int i = 0; i < 16; ++i) {
    CHECK(w[i] == static_cast<float>(i - 8) * 0.5F);
    CHECK(w[16 + i] == static_cast<float>(7 - i) * 0.5F);
  }
}

TEST_CASE("cuda: the kernels' activations match core's bit for bit (host expansion)") {
  std::vector<float> gs = {0.0F, -0.0F, 1.0F, -1.0F, 3.5F, -20.0F, 20.0F, 88.0F, -88.0F, 1e-30F};
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0F, 4.0F);
  for (int i = 0; i < 1000; ++i) gs.push_back(dist(rng));
  for (const float g : gs) {
    CAPTURE(g);
    CHECK(std::bit_cast<std::uint32_t>(host_mirror::actsparse_silu(g)) ==
          std::bit_cast<std::uint32_t>(actsparse::silu(g)));
    CHECK(std::bit_cast<std::uint32_t>(host_mirror::actsparse_gelu(g)) ==
          std::bit_cast<std::uint32_t>(actsparse::gelu(g)));
    CHECK(std::bit_cast<std::uint32_t>(host_mirror::actsparse_relu(g)) ==
          std::bit_cast<std::uint32_t>(actsparse::relu(g)));
  }
}

TEST_CASE("cuda: the top_k kernel's order key matches the selectors' bit for bit (host expansion)") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0F, -0.0F, 1.0F, -1.0F, 1e-45F, -1e-45F, 3e38F, -3e38F, inf, -inf};
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0F, 10.0F);
  for (int i = 0; i < 1000; ++i) xs.push_back(dist(rng));
  for (const float a : xs) {
    CAPTURE(a);
    CHECK(host_mirror::actsparse_order_key(a) == actsparse::detail::order_key(a));
    for (const float b : {0.0F, -1.0F, 2.5F})
      CHECK((a < b) == (host_mirror::actsparse_order_key(a) < host_mirror::actsparse_order_key(b)));
  }
}
