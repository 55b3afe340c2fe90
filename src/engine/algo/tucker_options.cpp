// Tucker's options from the command line and their checks (--svd, --init, --ranks), and
// the keyed random values of the initial factors.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "algo/tucker.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

SvdMethod parse_svd_method(const std::string& s) {
  if (s == "gram") return SvdMethod::gram;
  if (s == "subspace") return SvdMethod::subspace;
  if (s == "scalapack") return SvdMethod::scalapack;
  TESSERA_INPUT_CHECK(false, "unknown --svd '" << s << "': expected gram, subspace or scalapack");
  return SvdMethod::gram;
}

std::string to_string(SvdMethod m) {
  switch (m) {
    case SvdMethod::gram:
      return "gram";
    case SvdMethod::subspace:
      return "subspace";
    case SvdMethod::scalapack:
      return "scalapack";
  }
  return "?";
}

TuckerInit parse_tucker_init(const std::string& s) {
  if (s == "random") return TuckerInit::random;
  if (s == "hosvd") return TuckerInit::hosvd;
  TESSERA_INPUT_CHECK(false, "unknown --init '" << s << "': expected random or hosvd");
  return TuckerInit::random;
}

std::string to_string(TuckerInit i) {
  return i == TuckerInit::random ? "random" : "hosvd";
}

TuckerRows parse_tucker_rows(const std::string& s) {
  if (s == "auto") return TuckerRows::automatic;
  if (s == "allreduce") return TuckerRows::allreduce;
  if (s == "owners") return TuckerRows::owners;
  TESSERA_INPUT_CHECK(false, "--comm-strategy '"
                                 << s
                                 << "' does not apply to tucker: expected auto, allreduce (the "
                                    "whole TTMc rows summed on every rank) or owners (summed on "
                                    "their owner ranks)");
  return TuckerRows::automatic;
}

bool scalapack_available() {
#if TESSERA_HAVE_SCALAPACK
  return true;
#else
  return false;
#endif
}

std::vector<int> parse_ranks(const std::string& s, int order) {
  std::vector<int> out;
  std::string tok;
  auto flush = [&] {
    TESSERA_INPUT_CHECK(!tok.empty(), "--ranks '" << s
                                                  << "': expected positive integers separated "
                                                     "by commas, e.g. --ranks 16,16,16");
    long long v = 0;
    for (char ch : tok) {
      TESSERA_INPUT_CHECK(ch >= '0' && ch <= '9' && v < (1ll << 31),
                          "--ranks '" << s << "': '" << tok << "' is not a positive integer");
      v = v * 10 + (ch - '0');
    }
    TESSERA_INPUT_CHECK(v >= 1 && v <= std::numeric_limits<int>::max(),
                        "--ranks '" << s << "': rank " << tok << " must be at least 1");
    out.push_back(static_cast<int>(v));
    tok.clear();
  };
  for (char ch : s) {
    if (ch == ',' || ch == 'x' || ch == 'X')
      flush();
    else if (ch != ' ')
      tok.push_back(ch);
  }
  flush();
  if (out.size() == 1 && order > 1) out.assign(static_cast<std::size_t>(order), out[0]);
  TESSERA_INPUT_CHECK(static_cast<int>(out.size()) == order,
                      "--ranks '" << s << "' gives " << out.size() << " ranks for an order-"
                                  << order << " tensor: give one rank per mode (or one for all)");
  return out;
}

void check_tucker_ranks(const std::vector<std::uint64_t>& dims, const std::vector<int>& ranks) {
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 2 && N <= kMaxOrder, "Tucker needs a tensor of order 2.."
                                                    << kMaxOrder << " (this one has order " << N
                                                    << ")");
  TESSERA_INPUT_CHECK(static_cast<int>(ranks.size()) == N,
                      "--ranks: " << ranks.size() << " rank(s) given for an order-" << N
                                  << " tensor (dims " << format_dims(dims)
                                  << "): give one rank per mode");
  for (int n = 0; n < N; ++n) {
    const int R = ranks[static_cast<std::size_t>(n)];
    TESSERA_INPUT_CHECK(R >= 1, "--ranks: the rank of mode " << n << " is " << R
                                                             << "; every rank must be at least 1");
    TESSERA_INPUT_CHECK(static_cast<std::uint64_t>(R) <= dims[static_cast<std::size_t>(n)],
                        "--ranks: the rank of mode "
                            << n << " (" << R << ") exceeds its dimension "
                            << dims[static_cast<std::size_t>(n)] << " (dims " << format_dims(dims)
                            << "); use at most " << dims[static_cast<std::size_t>(n)]);
  }
  for (int n = 0; n < N; ++n) {
    long double other = 1;
    for (int m = 0; m < N; ++m)
      if (m != n) other *= ranks[static_cast<std::size_t>(m)];
    TESSERA_INPUT_CHECK(ranks[static_cast<std::size_t>(n)] <= other,
                        "--ranks: the rank of mode "
                            << n << " (" << ranks[static_cast<std::size_t>(n)]
                            << ") exceeds the product of the other modes' ranks ("
                            << static_cast<double>(other) << "): the mode-" << n
                            << " unfolding of the core has only that many columns; use R_n <= "
                               "the product of the other ranks");
  }
}

double tucker_initial_value(std::uint64_t seed, int mode, std::uint64_t row, int col) {
  return 2.0 * uniform01(hash_keys(seed, static_cast<std::uint64_t>(mode) + 0x200, row,
                                   static_cast<std::uint64_t>(col))) -
         1.0;
}

}  // namespace tessera::algo
