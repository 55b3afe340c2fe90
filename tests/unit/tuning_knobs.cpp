// The tuning knobs' table (kernels/tuning.hpp, kKnobs; issue 40): the CLI options and their
// --help, the run record's "tuning" object and docs/run-record.schema.json all agree with it.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "drivers/tuning_options.hpp"
#include "kernels/tuning.hpp"
#include "run/record.hpp"

namespace tessera::driver {
namespace {

using kernels::Knob;
using run::knobs_json;
using run::knobs_schema;

/// The help text of an app with every knob registered.
std::string knob_help() {
  CLI::App app("knobs");
  kernels::Tuning t;
  add_knob_options(&app, t, "Kernel tuning");
  return app.help();
}

/// Parses `args` (without the program name) into a fresh Tuning.
kernels::Tuning parsed(std::vector<std::string> args) {
  CLI::App app("knobs");
  kernels::Tuning t;
  add_knob_options(&app, t, "Kernel tuning");
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return t;
}

TEST(TuningKnobs, TheSchemaFileHoldsTheTablesTuningObject) {
  std::ifstream in(TESSERA_SOURCE_DIR "/docs/run-record.schema.json");
  ASSERT_TRUE(in) << "docs/run-record.schema.json";
  const nlohmann::json schema = nlohmann::json::parse(in);
  const nlohmann::json& file = schema.at("properties").at("tuning");
  const nlohmann::json table = knobs_schema();
  EXPECT_EQ(file.at("type"), table.at("type"));
  EXPECT_EQ(file.at("required"), table.at("required"));
  EXPECT_EQ(file.at("properties"), table.at("properties"))
      << "docs/run-record.schema.json, properties.tuning.properties, should read:\n"
      << table.at("properties").dump(1);
}

TEST(TuningKnobs, TheRecordHasEveryKnobByItsNames) {
  const nlohmann::json j = knobs_json(kernels::Tuning{});
  std::set<std::string> keys;
  kernels::for_each_knob([&](const auto& k) { keys.insert(std::string(k.key)); });
  EXPECT_EQ(j.size(), keys.size()) << j.dump();
  for (const std::string& k : keys) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["cuda_layout"], "default");
  EXPECT_EQ(j["mttkrp_kernel"], "auto");
  EXPECT_EQ(j["tc_precision"], "auto");
  EXPECT_EQ(j["cuda_l2_hint"], true);
  EXPECT_EQ(j["tc_tile_density"], 0.25);
  EXPECT_EQ(j["sptc_tc_threshold"], -1.0);
}

TEST(TuningKnobs, HelpShowsEveryKnobWithItsValuesAndDefault) {
  const std::string help = knob_help();
  const kernels::Tuning defaults;
  kernels::for_each_knob([&]<typename V>(const Knob<V>& k) {
    const std::string f = kernels::flag(k);
    EXPECT_NE(help.find(f), std::string::npos) << f << "\n" << help;
    if (!k.alias.empty()) {
      EXPECT_NE(help.find(std::string(k.alias)), std::string::npos) << f;
    }
    if constexpr (kernels::kIsChoice<V>) {
      std::string shown = "TEXT:{";
      for (const auto& n : kernels::Names<V>::all) shown += std::string(n.name) + ",";
      shown.back() = '}';
      shown += "=" + std::string(kernels::name_of(defaults.*k.field));
      EXPECT_NE(help.find(f + " " + shown), std::string::npos) << shown << "\n" << help;
    } else if constexpr (std::is_same_v<V, bool>) {
      if (!k.bare_flag) {
        const std::string shown =
            f + " TEXT:{on,off}=" + (defaults.*k.field ? std::string("on") : "off");
        EXPECT_NE(help.find(shown), std::string::npos) << shown << "\n" << help;
      }
    } else {
      EXPECT_NE(help.find(":" + std::string(k.shown) + "="), std::string::npos) << f;
    }
  });
}

TEST(TuningKnobs, EveryNameParsesToItsValueAndPrintsBack) {
  kernels::for_each_knob([&]<typename V>(const Knob<V>& k) {
    if constexpr (kernels::kIsChoice<V>) {
      for (const auto& n : kernels::Names<V>::all) {
        const kernels::Tuning t = parsed({kernels::flag(k), std::string(n.name)});
        EXPECT_EQ(t.*k.field, n.value) << kernels::flag(k) << " " << n.name;
        if (!n.alias) {
          EXPECT_EQ(kernels::name_of(t.*k.field), n.name);
        }
      }
      EXPECT_THROW(parsed({kernels::flag(k), "bogus"}), CLI::ValidationError);
    }
  });
  // The aliases: a value (blocked = auto) and an older flag (--tc-threshold).
  EXPECT_EQ(parsed({"--mttkrp-kernel", "blocked"}).mttkrp_kernel, kernels::MttkrpKernel::automatic);
  EXPECT_EQ(parsed({"--tc-threshold", "0.5"}).sptc_tc_threshold, 0.5);
  EXPECT_EQ(parsed({"--sptc-tc-threshold", "0.25"}).sptc_tc_threshold, 0.25);
  EXPECT_EQ(parsed({"--cuda-l2-hint", "off"}).cuda_l2_hint, false);
  EXPECT_EQ(parsed({"--trace"}).trace, true);
  EXPECT_EQ(parsed({"--ttmc-tile", "128"}).ttmc_tile, 128);
  EXPECT_THROW(parsed({"--ttmc-tile", "100"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--tc-tile-density", "0"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--cuda-block-rows", "4294967296"}), CLI::ValidationError);
}

TEST(TuningKnobs, CheckNamesTheFlagOfAValueOutsideTheTable) {
  kernels::Tuning t;
  t.ttmc_kernel = static_cast<kernels::TtmcKernel>(42);
  try {
    kernels::check(t);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--ttmc-kernel must be auto or cores"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::driver
