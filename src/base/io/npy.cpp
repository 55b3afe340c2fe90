#include "io/npy.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "util/error.hpp"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              ".npy files are written as little-endian ('<f8'): a big-endian host needs a swap");

std::string npy_header(const std::vector<std::uint64_t>& shape, bool single) {
  std::string dict = std::string("{'descr': '") + (single ? "<f4" : "<f8") +
                     "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  dict += shape.size() == 1 ? ",), }" : "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n' == multiple of 64
  const std::size_t unpadded = 10 + dict.size() + 1;
  const std::size_t total = (unpadded + 63) / 64 * 64;
  TESSERA_EXPECTS(total - 10 <= 0xFFFF, "a .npy 1.0 header holds at most 65535 bytes");
  dict.append(total - unpadded, ' ');
  dict += '\n';
  const auto len = static_cast<std::uint16_t>(dict.size());
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  h += static_cast<char>(len & 0xFF);
  h += static_cast<char>(len >> 8);
  return h + dict;
}

void check_float32(const std::string& name, const std::vector<std::uint64_t>& shape,
                   const double* data) {
  std::size_t n = 1;
  for (auto s : shape) n *= static_cast<std::size_t>(s);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(static_cast<float>(data[i]))) continue;
    std::vector<std::uint64_t> at(shape.size());  // the row-major multi-index of i
    std::size_t rest = i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      at[d] = shape[d] == 0 ? 0 : rest % shape[d];
      rest = shape[d] == 0 ? 0 : rest / shape[d];
    }
    std::ostringstream os;
    os.precision(17);
    os << name << "[";
    for (std::size_t d = 0; d < at.size(); ++d) os << (d ? ", " : "") << at[d];
    os << "] = " << data[i] << " does not fit float32 ("
       << (std::isfinite(data[i]) ? "it would become inf; magnitudes up to 3.4028235e+38"
                                  : "not a finite number")
       << ")";
    throw InputError(os.str());
  }
}

std::string npy_file(const std::vector<std::uint64_t>& shape, const double* data, bool single,
                     const std::string& name) {
  if (single) check_float32(name, shape, data);
  std::size_t n = 1;
  for (auto s : shape) n *= static_cast<std::size_t>(s);
  std::string f = npy_header(shape, single);
  const std::size_t off = f.size();
  f.resize(off + n * (single ? sizeof(float) : sizeof(double)));
  if (single) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<float>(data[i]);
      std::memcpy(f.data() + off + i * sizeof(float), &v, sizeof(float));
    }
  } else if (n > 0) {
    std::memcpy(f.data() + off, data, n * sizeof(double));
  }
  return f;
}

}  // namespace tessera::io
