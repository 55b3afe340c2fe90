// The tuning knobs' check (kernels/tuning.hpp), from the table.
#include "kernels/tuning.hpp"

#include "util/error.hpp"

namespace tessera::kernels {

void check(const Tuning& t) {
  for_each_knob([&t]<typename V>(const Knob<V>& k) {
    const V& v = t.*k.field;
    if constexpr (kIsChoice<V>) {
      TESSERA_INPUT_CHECK(named(v), flag(k) << " must be " << names_in_words<V>() << " (got "
                                            << static_cast<int>(v) << ")");
    } else if constexpr (!std::is_same_v<V, bool>) {
      TESSERA_INPUT_CHECK(k.valid == nullptr || k.valid(v),
                          flag(k) << " must be " << k.expected << " (got " << v << ")");
    }
  });
}

}  // namespace tessera::kernels
