// The tuning knobs as Python keywords, from their table (kernels/tuning.hpp, kKnobs):
// tuning_defaults() (tessera.TUNING) and the keyword -> Tuning field step of apply_tuning.
#include "kernels/tuning.hpp"

#include <string>
#include <type_traits>

#include "bindings.hpp"
#include "util/error.hpp"

namespace tessera::python {

namespace {

/// A knob's value as Python shows it: an enumeration by name, else the value.
template <typename V>
py::object to_python(const V& v) {
  if constexpr (kernels::kIsChoice<V>)
    return py::str(std::string(kernels::name_of(v)));
  else
    return py::cast(v);
}

}  // namespace

bool set_tuning_keyword(kernels::Tuning& t, const std::string& name, py::handle value) {
  bool found = false;
  kernels::for_each_knob([&]<typename V>(const kernels::Knob<V>& k) {
    if (found || k.key != name) return;
    found = true;
    const std::string shown = name + "=" + py::cast<std::string>(py::repr(value));
    const bool is_bool = py::isinstance<py::bool_>(value);
    if constexpr (kernels::kIsChoice<V>) {
      TESSERA_INPUT_CHECK(py::isinstance<py::str>(value), shown << ": expected a string");
      const auto v = kernels::parse_name<V>(py::cast<std::string>(value));
      TESSERA_INPUT_CHECK(v.has_value(), shown << ": " << kernels::flag(k) << " must be "
                                               << kernels::names_in_words<V>());
      t.*k.field = *v;
    } else {
      const char* expected = std::is_same_v<V, bool>       ? "True or False"
                             : std::is_floating_point_v<V> ? "a number"
                             : std::is_unsigned_v<V>       ? "an integer >= 0"
                                                           : "an integer";
      bool ok = false;
      if constexpr (std::is_same_v<V, bool>)
        ok = is_bool;
      else if constexpr (std::is_floating_point_v<V>)
        ok = !is_bool && (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value));
      else
        ok = !is_bool && py::isinstance<py::int_>(value);
      TESSERA_INPUT_CHECK(ok, shown << ": expected " << expected);
      try {
        t.*k.field = py::cast<V>(value);
      } catch (const py::cast_error&) {
        TESSERA_INPUT_CHECK(false, shown << ": expected " << expected);
      }
    }
  });
  return found;
}

std::string tuning_keywords() {
  std::string s;
  kernels::for_each_knob([&](const auto& k) { s += std::string(k.key) + ", "; });
  return s;
}

void register_tuning(py::module_& m) {
  m.def(
      "tuning_defaults",
      [] {
        py::dict d;
        const kernels::Tuning t;
        kernels::for_each_knob(
            [&](const auto& k) { d[py::str(std::string(k.key))] = to_python(t.*k.field); });
        return d;
      },
      "The kernel tuning keywords and their defaults (kernels::Tuning), in table order.");
}

}  // namespace tessera::python
