#include "util/sysfs.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

namespace tessera::util {

std::string under_root(const std::string& root, const std::string& abs) {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r + abs;
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream os;
  os << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return os.str();
}

ProcCgroup parse_proc_cgroup(const std::string& text) {
  auto trim = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t a = 0;
    while (a < s.size() && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
    return s.substr(a);
  };
  ProcCgroup out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    const auto c1 = line.find(':');
    const auto c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
    if (c2 == std::string::npos || c1 == 0 || line.size() == c2 + 1 || line[c2 + 1] != '/') {
      ++out.malformed;
      continue;
    }
    const std::string id = line.substr(0, c1), ctl = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = trim(line.substr(c2 + 1));
    if (id == "0" && ctl.empty()) {
      out.v2 = path;
      continue;
    }
    std::istringstream cs(ctl);
    std::string c;
    while (std::getline(cs, c, ',')) out.v1[c] = path;
  }
  return out;
}

std::map<std::string, std::uint64_t> proc_status_bytes(const std::string& root) {
  std::map<std::string, std::uint64_t> out;
  const auto text = read_text_file(under_root(root, "/proc/self/status"));
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, unit;
    std::uint64_t kb = 0;
    if (!(ls >> key >> kb >> unit) || unit != "kB" || key.size() < 2 || key.back() != ':' ||
        kb > UINT64_MAX / 1024)
      continue;
    key.pop_back();
    out[key] = kb * 1024;
  }
  return out;
}

std::optional<std::uint64_t> private_resident_bytes(const std::string& root) {
  const auto status = proc_status_bytes(root);
  const auto anon = status.find("RssAnon"), shmem = status.find("RssShmem");
  if (anon == status.end() || shmem == status.end()) return std::nullopt;
  return anon->second + shmem->second;
}

}  // namespace tessera::util
