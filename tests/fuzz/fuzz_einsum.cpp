// libFuzzer harness of the einsum spec parser (kernels::parse_contract_spec, kernels/sptc.cpp)
// and of the contraction kernels on the specs it accepts.
//
// Input: the spec is the text up to the first newline (the whole input when there is none);
// the bytes after it shape two tiny tensors (mode lengths 1..3, up to 12 nonzeros each).
// An accepted spec must be canonical (parsing its text gives the same spec), consistent
// (every letter placed once), and give the same output on the reference kernel and on the
// OpenMP kernel (with and without swapping the inputs, dense and hashed accumulators).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "kernels/sptc.hpp"

namespace {

using tessera::fuzz::finding;
using tessera::kernels::ContractSpec;

/// Reads bytes of the tail one by one (0 once exhausted).
struct Bytes {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

void check_spec(const ContractSpec& sp) {
  const ContractSpec again = tessera::kernels::parse_contract_spec(sp.text);
  if (again.text != sp.text || again.x != sp.x || again.y != sp.y || again.out != sp.out ||
      again.x_key != sp.x_key || again.y_key != sp.y_key || again.key_batch != sp.key_batch ||
      again.x_free != sp.x_free || again.y_free != sp.y_free || again.out_from_y != sp.out_from_y ||
      again.out_mode != sp.out_mode)
    finding("the canonical text '" + sp.text + "' parses to another spec");
  const int nx = sp.x_order(), ny = sp.y_order(), no = sp.out_order();
  if (nx < 1 || ny < 1 || no < 1 || nx > tessera::kMaxOrder || ny > tessera::kMaxOrder ||
      no > tessera::kMaxOrder)
    finding("spec '" + sp.text + "' accepted with an order outside 1..16");
  if (sp.x_key.size() + sp.x_free.size() != static_cast<std::size_t>(nx) ||
      sp.y_key.size() + sp.y_free.size() != static_cast<std::size_t>(ny) ||
      sp.x_key.size() != sp.y_key.size() || sp.key_batch.size() != sp.x_key.size() ||
      sp.out_mode.size() != static_cast<std::size_t>(no) ||
      static_cast<std::size_t>(no) !=
          sp.x_free.size() + sp.y_free.size() + static_cast<std::size_t>(sp.batch()))
    finding("spec '" + sp.text + "': modes do not add up");
  for (std::size_t c = 0; c < sp.x_key.size(); ++c)
    if (sp.x[static_cast<std::size_t>(sp.x_key[c])] != sp.y[static_cast<std::size_t>(sp.y_key[c])])
      finding("spec '" + sp.text + "': matched modes of different letters");
  const ContractSpec sw = tessera::kernels::swap_inputs(sp);
  if (sw.out != sp.out || sw.x != sp.y || sw.y != sp.x)
    finding("spec '" + sp.text + "': swap_inputs gives '" + sw.text + "'");
}

tessera::SparseTensor<double> tiny_tensor(int order, Bytes& b, std::vector<std::uint64_t> dims) {
  tessera::SparseTensor<double> t(std::move(dims));
  const int nnz = b.next() % 13;
  std::vector<tessera::index_t> c(static_cast<std::size_t>(order));
  for (int k = 0; k < nnz; ++k) {
    for (int m = 0; m < order; ++m)
      c[static_cast<std::size_t>(m)] =
          static_cast<tessera::index_t>(b.next() % t.dims[static_cast<std::size_t>(m)]);
    t.push_back(c.data(), static_cast<double>(static_cast<int>(b.next() % 9) - 4) * 0.5);
  }
  return t;
}

/// Same coordinates in the same order, values within rounding of the summation order.
void compare(const tessera::SparseTensor<double>& want, const tessera::SparseTensor<double>& got,
             const std::string& what) {
  if (want.dims != got.dims) finding(what + ": output dims differ from the reference");
  if (want.nnz() != got.nnz())
    finding(what + ": " + std::to_string(got.nnz()) + " nonzeros, reference " +
            std::to_string(want.nnz()));
  for (int m = 0; m < want.order(); ++m)
    if (want.idx[static_cast<std::size_t>(m)] != got.idx[static_cast<std::size_t>(m)])
      finding(what + ": coordinates differ from the reference");
  for (std::size_t k = 0; k < want.vals.size(); ++k)
    if (std::abs(want.vals[k] - got.vals[k]) > 1e-9 * (1 + std::abs(want.vals[k])))
      finding(what + ": values differ from the reference");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* nl = static_cast<const std::uint8_t*>(std::memchr(data, '\n', size));
  const std::size_t spec_len = nl ? static_cast<std::size_t>(nl - data) : size;
  const std::string text(reinterpret_cast<const char*>(data), spec_len);
  Bytes tail{data + std::min(size, spec_len + 1), size - std::min(size, spec_len + 1)};

  ContractSpec sp;
  if (!tessera::fuzz::expect_tessera_errors(
          "parse_contract_spec", [&] { sp = tessera::kernels::parse_contract_spec(text); }))
    return 0;
  tessera::fuzz::expect_tessera_errors("spec invariants", [&] { check_spec(sp); });

  // Lengths per letter (equal for matched letters), then the two tensors.
  std::uint64_t len[256] = {};
  for (char c : sp.x + sp.y) {
    auto& l = len[static_cast<unsigned char>(c)];
    if (l == 0) l = 1 + tail.next() % 3;
  }
  auto dims_of = [&](const std::string& s) {
    std::vector<std::uint64_t> d;
    for (char c : s) d.push_back(len[static_cast<unsigned char>(c)]);
    return d;
  };
  std::vector<std::uint64_t> xd = dims_of(sp.x), yd = dims_of(sp.y);
  std::vector<std::uint64_t> out_dims;
  tessera::fuzz::expect_tessera_errors("contract_output_dims", [&] {
    out_dims = tessera::kernels::contract_output_dims(sp, xd, yd);
    if (out_dims != dims_of(sp.out)) finding("spec '" + sp.text + "': wrong output dims");
    auto xe = xd, ye = yd;
    tessera::kernels::extend_matched_dims(sp, xe, ye, false);
    if (xe != xd || ye != yd) finding("extend_matched_dims changed equal lengths");
  });
  const auto x = tiny_tensor(sp.x_order(), tail, xd);
  const auto y = tiny_tensor(sp.y_order(), tail, yd);

  tessera::SparseTensor<double> want;
  if (!tessera::fuzz::expect_tessera_errors(
          "reference::contract", [&] { want = tessera::kernels::reference::contract(x, y, sp); }))
    finding("spec '" + sp.text + "': the reference kernel refused fitting inputs");
  if (want.dims != out_dims) finding("spec '" + sp.text + "': reference output dims");
  for (int variant = 0; variant < 2; ++variant) {
    tessera::kernels::cpu::ContractOptions o;
    o.threads = 1;
    o.allow_swap = variant == 0;
    o.dense_accumulator_limit = variant == 0 ? (std::int64_t(1) << 20) : 0;
    tessera::fuzz::expect_tessera_errors("cpu::contract", [&] {
      compare(want, tessera::kernels::cpu::contract(x, y, sp, nullptr, o),
              "spec '" + sp.text + "', cpu kernel variant " + std::to_string(variant));
    });
  }
  return 0;
}
