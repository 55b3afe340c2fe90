// The tuning knobs as Python keywords, from their table (kernels/tuning.hpp, kKnobs):
// tuning_defaults() (tessera.TUNING) and the keyword -> Tuning field step of apply_tuning.
#include "kernels/tuning.hpp"

#include <string>
#include <type_traits>

#include "bindings.hpp"
#include "inputs.hpp"
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
    if constexpr (kernels::kIsChoice<V>) {
      const std::string shown = name + "=" + py::cast<std::string>(py::repr(value));
      TESSERA_INPUT_CHECK(py::isinstance<py::str>(value), shown << ": expected a string");
      const auto v = kernels::parse_name<V>(py::cast<std::string>(value));
      TESSERA_INPUT_CHECK(v.has_value(), shown << ": " << kernels::flag(k) << " must be "
                                               << kernels::names_in_words<V>());
      t.*k.field = *v;
    } else {
      t.*k.field = keyword_value<V>(name, value);
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
