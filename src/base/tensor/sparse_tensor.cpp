#include "tensor/sparse_tensor.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace tessera {

std::vector<std::uint64_t> parse_dims(const std::string& s, const char* what) {
  std::vector<std::uint64_t> out;
  std::string tok;
  auto flush = [&]() {
    TESSERA_INPUT_CHECK(!tok.empty(),
                        "bad " << what << " '" << s << "': expected positive integers like 4x2x1");
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(tok.c_str(), &end);  // accepts 1e6
    TESSERA_INPUT_CHECK(
        errno == 0 && end && *end == '\0' && v >= 1 && v < 1.9e19 &&
            v == static_cast<double>(static_cast<std::uint64_t>(v)),
        "bad " << what << " '" << s << "': '" << tok << "' is not a positive integer");
    out.push_back(static_cast<std::uint64_t>(v));
    tok.clear();
  };
  for (char c : s) {
    if (c == 'x' || c == 'X' || c == ',') {
      flush();
    } else if (c != ' ') {
      tok.push_back(c);
    }
  }
  flush();
  return out;
}

std::string format_dims(const std::vector<std::uint64_t>& d) {
  std::ostringstream os;
  for (std::size_t i = 0; i < d.size(); ++i) os << (i ? "x" : "") << d[i];
  return os.str();
}

}  // namespace tessera
