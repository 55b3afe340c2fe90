// SpTC spec parsing and validation, shared by every backend (kernels/sptc.hpp).
#include "kernels/sptc.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

#include "kernels/ops/sptc.hpp"
#include "util/error.hpp"

namespace tessera::kernels {

namespace {

bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/// "X (first input)" / "Y (second input)" / "the output".
const char* part_name(int part) {
  return part == 0 ? "X (the first input)" : part == 1 ? "Y (the second input)" : "the output";
}

}  // namespace

int ContractSpec::contracted() const {
  return static_cast<int>(std::count(key_batch.begin(), key_batch.end(), false));
}
int ContractSpec::batch() const {
  return static_cast<int>(std::count(key_batch.begin(), key_batch.end(), true));
}

ContractSpec parse_contract_spec(const std::string& text) {
  std::string s;
  for (char c : text)
    if (c != ' ' && c != '\t') s.push_back(c);
  const std::string quoted = "einsum spec '" + text + "'";
  TESSERA_INPUT_CHECK(!s.empty(),
                      "empty einsum spec: expected two inputs and an output, e.g. "
                      "'ijk,klm->ijlm'");
  TESSERA_INPUT_CHECK(s.find("...") == std::string::npos,
                      quoted << ": ellipsis ('...') is not supported; name every mode with a "
                                "letter, e.g. 'ijk,klm->ijlm'");
  const auto arrow = s.find("->");
  TESSERA_INPUT_CHECK(arrow != std::string::npos,
                      quoted << ": missing '->' and the output subscripts; write the output "
                                "explicitly, e.g. 'ijk,klm->ijlm'");
  TESSERA_INPUT_CHECK(s.find("->", arrow + 2) == std::string::npos,
                      quoted << ": '->' appears more than once; expected 'X,Y->Z'");
  const std::string lhs = s.substr(0, arrow), rhs = s.substr(arrow + 2);
  const auto ncomma = std::count(lhs.begin(), lhs.end(), ',');
  TESSERA_INPUT_CHECK(ncomma == 1, quoted
                                       << ": expected exactly two inputs 'X,Y' before '->', found "
                                       << ncomma + 1 << " (SpTC contracts two tensors)");
  TESSERA_INPUT_CHECK(rhs.find(',') == std::string::npos,
                      quoted << ": the output after '->' must be one list of letters, found a ','");
  const auto comma = lhs.find(',');
  ContractSpec sp;
  sp.x = lhs.substr(0, comma);
  sp.y = lhs.substr(comma + 1);
  sp.out = rhs;
  const std::array<const std::string*, 3> parts = {&sp.x, &sp.y, &sp.out};
  for (int p = 0; p < 3; ++p) {
    const std::string& sub = *parts[static_cast<std::size_t>(p)];
    for (std::size_t k = 0; k < sub.size(); ++k)
      TESSERA_INPUT_CHECK(is_letter(sub[k]), quoted << ": '" << sub[k] << "' in the subscripts of "
                                                    << part_name(p)
                                                    << " is not a letter; name modes by a-z or "
                                                       "A-Z, one letter per mode");
    if (p < 2) {
      TESSERA_INPUT_CHECK(!sub.empty(), quoted << ": " << part_name(p)
                                               << " has no subscripts; every input needs 1.."
                                               << kMaxOrder << " modes");
    } else {
      TESSERA_INPUT_CHECK(!sub.empty(),
                          quoted << ": the output has no modes: a full contraction to a scalar "
                                    "is not supported (keep at least one mode in the output)");
    }
    TESSERA_INPUT_CHECK(sub.size() <= static_cast<std::size_t>(kMaxOrder),
                        quoted << ": " << part_name(p) << " has " << sub.size()
                               << " modes; at most " << kMaxOrder << " are supported");
    for (std::size_t k = 0; k < sub.size(); ++k)
      TESSERA_INPUT_CHECK(
          sub.find(sub[k], k + 1) == std::string::npos,
          quoted << ": letter '" << sub[k] << "' appears twice in the subscripts '" << sub
                 << "' of " << part_name(p)
                 << (p < 2 ? ": diagonals and traces within one input are not supported (give "
                             "each mode its own letter)"
                           : ": each output mode needs its own letter"));
  }
  for (char c : sp.out)
    TESSERA_INPUT_CHECK(sp.x.find(c) != std::string::npos || sp.y.find(c) != std::string::npos,
                        quoted << ": output letter '" << c << "' is in neither input");
  for (int p = 0; p < 2; ++p) {
    const std::string& sub = p == 0 ? sp.x : sp.y;
    const std::string& other = p == 0 ? sp.y : sp.x;
    for (char c : sub)
      TESSERA_INPUT_CHECK(other.find(c) != std::string::npos || sp.out.find(c) != std::string::npos,
                          quoted << ": letter '" << c << "' appears only in " << part_name(p)
                                 << " and not in the output; summing over a mode of one input "
                                    "alone is not supported (add '"
                                 << c
                                 << "' to the output, or match it with a mode of the other "
                                    "input)");
  }
  for (int m = 0; m < sp.x_order(); ++m) {
    const char c = sp.x[static_cast<std::size_t>(m)];
    const auto in_y = sp.y.find(c);
    if (in_y == std::string::npos) {
      sp.x_free.push_back(m);
      continue;
    }
    sp.x_key.push_back(m);
    sp.y_key.push_back(static_cast<int>(in_y));
    sp.key_batch.push_back(sp.out.find(c) != std::string::npos);
  }
  for (int m = 0; m < sp.y_order(); ++m)
    if (sp.x.find(sp.y[static_cast<std::size_t>(m)]) == std::string::npos) sp.y_free.push_back(m);
  for (char c : sp.out) {
    const auto in_x = sp.x.find(c);
    sp.out_from_y.push_back(in_x == std::string::npos);
    sp.out_mode.push_back(static_cast<int>(in_x != std::string::npos ? in_x : sp.y.find(c)));
  }
  sp.text = sp.x + "," + sp.y + "->" + sp.out;
  return sp;
}

std::vector<std::uint64_t> contract_output_dims(const ContractSpec& sp,
                                                const std::vector<std::uint64_t>& xdims,
                                                const std::vector<std::uint64_t>& ydims) {
  const std::array<const std::vector<std::uint64_t>*, 2> d = {&xdims, &ydims};
  const std::array<const std::string*, 2> sub = {&sp.x, &sp.y};
  for (int p = 0; p < 2; ++p) {
    const auto& dims = *d[static_cast<std::size_t>(p)];
    const auto& s = *sub[static_cast<std::size_t>(p)];
    TESSERA_INPUT_CHECK(dims.size() == s.size(), "einsum spec '" << sp.text << "': " << part_name(p)
                                                                 << " has " << dims.size()
                                                                 << " modes but its subscripts '"
                                                                 << s << "' name " << s.size());
    for (std::size_t m = 0; m < dims.size(); ++m)
      TESSERA_INPUT_CHECK(dims[m] >= 1 && dims[m] <= (std::uint64_t(1) << 32),
                          part_name(p) << ": mode " << m + 1 << " ('" << s[m] << "') has length "
                                       << dims[m] << ", outside 1..2^32");
  }
  for (std::size_t c = 0; c < sp.x_key.size(); ++c) {
    const auto mx = static_cast<std::size_t>(sp.x_key[c]);
    const auto my = static_cast<std::size_t>(sp.y_key[c]);
    TESSERA_INPUT_CHECK(xdims[mx] == ydims[my],
                        "einsum spec '"
                            << sp.text << "': letter '" << sp.x[mx] << "' has length " << xdims[mx]
                            << " in X (mode " << mx + 1 << ") but " << ydims[my] << " in Y (mode "
                            << my + 1 << "); " << (sp.key_batch[c] ? "batch" : "contracted")
                            << " modes must have equal lengths (the length of a mode read from a "
                               ".tns file is its largest coordinate; tessera contract "
                               "--extend-dims gives both the larger one)");
  }
  std::vector<std::uint64_t> out;
  for (int k = 0; k < sp.out_order(); ++k) {
    const auto m = static_cast<std::size_t>(sp.out_mode[static_cast<std::size_t>(k)]);
    out.push_back(sp.out_from_y[static_cast<std::size_t>(k)] ? ydims[m] : xdims[m]);
  }
  return out;
}

void extend_matched_dims(const ContractSpec& sp, std::vector<std::uint64_t>& xdims,
                         std::vector<std::uint64_t>& ydims, bool same_tensor) {
  TESSERA_INPUT_CHECK(xdims.size() == sp.x.size() && ydims.size() == sp.y.size(),
                      "einsum spec '" << sp.text << "': the inputs have " << xdims.size() << " and "
                                      << ydims.size() << " modes, the spec names " << sp.x.size()
                                      << " and " << sp.y.size());
  if (!same_tensor) {
    for (std::size_t c = 0; c < sp.x_key.size(); ++c) {
      auto& a = xdims[static_cast<std::size_t>(sp.x_key[c])];
      auto& b = ydims[static_cast<std::size_t>(sp.y_key[c])];
      a = b = std::max(a, b);
    }
    return;
  }
  TESSERA_INPUT_CHECK(xdims == ydims, "self-contraction: X and Y must have the same dims");
  // Classes of modes linked by matched letters (union-find), each takes its largest length.
  std::vector<std::size_t> parent(xdims.size());
  for (std::size_t m = 0; m < parent.size(); ++m) parent[m] = m;
  auto find = [&](std::size_t m) {
    while (parent[m] != m) m = parent[m] = parent[parent[m]];
    return m;
  };
  for (std::size_t c = 0; c < sp.x_key.size(); ++c)
    parent[find(static_cast<std::size_t>(sp.x_key[c]))] =
        find(static_cast<std::size_t>(sp.y_key[c]));
  std::vector<std::uint64_t> top(xdims.size(), 0);
  for (std::size_t m = 0; m < xdims.size(); ++m) top[find(m)] = std::max(top[find(m)], xdims[m]);
  for (std::size_t m = 0; m < xdims.size(); ++m) xdims[m] = top[find(m)];
  ydims = xdims;
}

ContractSpec swap_inputs(const ContractSpec& sp) {
  ContractSpec s = parse_contract_spec(sp.y + "," + sp.x + "->" + sp.out);
  s.device = sp.device;
  return s;
}

std::string to_string(TensorCorePrecision p) {
  switch (p) {
    case TensorCorePrecision::off:
      return "off";
    case TensorCorePrecision::fp64:
      return "fp64";
    case TensorCorePrecision::tf32:
      return "tf32";
    case TensorCorePrecision::bf16:
      return "bf16";
    case TensorCorePrecision::fp16:
      return "fp16";
  }
  return "?";
}

TensorCorePrecision parse_tensor_core_precision(const std::string& s) {
  for (auto p : {TensorCorePrecision::off, TensorCorePrecision::fp64, TensorCorePrecision::tf32,
                 TensorCorePrecision::bf16, TensorCorePrecision::fp16})
    if (s == to_string(p)) return p;
  TESSERA_INPUT_CHECK(false, "tensor-core precision '" << s
                                                       << "' is not one of off, fp64, tf32, "
                                                          "bf16, fp16");
  return TensorCorePrecision::off;
}

std::string to_string(ContractAssembly a) {
  return a == ContractAssembly::rows ? "rows" : "sort";
}

ContractAssembly parse_contract_assembly(const std::string& s) {
  if (s == "rows") return ContractAssembly::rows;
  if (s == "sort") return ContractAssembly::sort;
  TESSERA_INPUT_CHECK(false, "contraction assembly '" << s << "' is not one of rows, sort");
  return ContractAssembly::rows;
}

double resolve_tc_threshold(const ContractDeviceOptions& o, const Tuning& tuning) {
  if (o.tc_threshold >= 0) return o.tc_threshold;
  if (tuning.sptc_tc_threshold >= 0) return tuning.sptc_tc_threshold;
  return kDefaultTensorCoreThreshold;
}

template <typename T>
SparseTensor<T> contract(Backend<T>& backend, const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& spec, ContractStats* stats) {
  auto plan = ops::contract_plan(backend, x, y, spec);
  return ops::contract(backend, *plan, stats);
}

template SparseTensor<float> contract<float>(Backend<float>&, const SparseTensor<float>&,
                                             const SparseTensor<float>&, const ContractSpec&,
                                             ContractStats*);
template SparseTensor<double> contract<double>(Backend<double>&, const SparseTensor<double>&,
                                               const SparseTensor<double>&, const ContractSpec&,
                                               ContractStats*);

}  // namespace tessera::kernels
