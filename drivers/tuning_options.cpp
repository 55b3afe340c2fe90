// The tuning knobs on the command line and in the run record (drivers/tuning_options.hpp).
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

nlohmann::json knobs_json(const kernels::Tuning& t) {
  nlohmann::json j = nlohmann::json::object();
  kernels::for_each_knob([&]<typename V>(const kernels::Knob<V>& k) {
    const V& v = t.*k.field;
    if constexpr (kernels::kIsChoice<V>)
      j[std::string(k.key)] = std::string(kernels::name_of(v));
    else
      j[std::string(k.key)] = v;
  });
  return j;
}

nlohmann::json knobs_schema() {
  nlohmann::json required = nlohmann::json::array(), properties = nlohmann::json::object();
  kernels::for_each_knob([&]<typename V>(const kernels::Knob<V>& k) {
    const std::string key(k.key);
    required.push_back(key);
    if constexpr (kernels::kIsChoice<V>) {
      nlohmann::json names = nlohmann::json::array();
      for (const auto& n : kernels::Names<V>::all) names.push_back(std::string(n.name));
      properties[key] = {{"enum", names}};
    } else if constexpr (std::is_same_v<V, bool>) {
      properties[key] = {{"type", "boolean"}};
    } else {
      const std::string type = std::is_integral_v<V> ? "integer" : "number";
      std::string text = R"({"type": ")" + type + "\"";
      if (!k.schema_bounds.empty()) text += ", " + std::string(k.schema_bounds);
      properties[key] = nlohmann::json::parse(text + "}");
    }
  });
  return {{"type", "object"}, {"required", required}, {"properties", properties}};
}

}  // namespace tessera::driver
