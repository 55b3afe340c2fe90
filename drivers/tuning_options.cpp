// The tuning knobs on the command line (drivers/tuning_options.hpp).
#include "tuning_options.hpp"

#include <charconv>
#include <cstdlib>
#include <type_traits>
#include <vector>

namespace tessera::driver {

namespace {

/// Parses the whole of `s` as a V; false when it is not one.
template <typename V>
bool parse_number(const std::string& s, V& v) {
  if (s.empty()) return false;
  if constexpr (std::is_floating_point_v<V>) {
    char* end = nullptr;
    v = static_cast<V>(std::strtod(s.c_str(), &end));
    return *end == '\0';
  } else {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && p == s.data() + s.size();
  }
}

template <typename V>
std::string names_of(const kernels::Knob<V>& k) {
  std::string s = kernels::flag(k);
  if (!k.alias.empty()) s += "," + std::string(k.alias);
  return s;
}

}  // namespace

void add_knob_options(CLI::App* sub, kernels::Tuning& t, const std::string& group) {
  kernels::for_each_knob([&]<typename V>(const kernels::Knob<V>& k) {
    V& field = t.*k.field;
    const std::string names = names_of(k), help = kernels::help_text(k);
    CLI::Option* o = nullptr;
    if constexpr (kernels::kIsChoice<V>) {
      std::vector<std::string> accepted;
      for (const auto& n : kernels::Names<V>::all) accepted.emplace_back(n.name);
      o = sub->add_option_function<std::string>(
                 names, [&field](const std::string& v) { field = *kernels::parse_name<V>(v); },
                 help)
              ->check(CLI::IsMember(accepted))
              ->default_str(std::string(kernels::name_of(field)));
    } else if constexpr (std::is_same_v<V, bool>) {
      if (k.bare_flag) {
        o = sub->add_flag(names, field, help);
      } else {
        o = sub->add_option_function<std::string>(
                   names, [&field](const std::string& v) { field = v == "on"; }, help)
                ->check(CLI::IsMember({"on", "off"}))
                ->default_str(field ? "on" : "off");
      }
    } else {
      o = sub->add_option(names, field, help)
              ->check(CLI::Validator(
                  [k](std::string& s) -> std::string {
                    V v{};
                    if (!parse_number(s, v) || (k.valid != nullptr && !k.valid(v)))
                      return "expected " + std::string(k.expected) + ", got '" + s + "'";
                    return {};
                  },
                  std::string(k.shown)))
              ->capture_default_str();
    }
    o->group(group);
  });
}

}  // namespace tessera::driver
