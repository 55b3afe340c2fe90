// libFuzzer harness of the tessera command line (drivers/app.cpp: the CLI11 app of every
// subcommand) and of the parsers of option values.
//
// Input: argv words separated by newlines ("cp\nX.tns\n--rank\n8"; at most 64 words). The
// app is built as main() builds it and parses them; nothing runs (the chosen command is
// only recorded). CLI::ParseError is the expected answer to bad options; any other
// exception escaping the parse would escape main()'s handler too, so it is a finding.
// Every word is then also given to the value parsers the commands use (byte sizes, dims,
// grids, Tucker ranks, index bases): tessera::Error is expected, anything else a finding;
// and to the run layer's option checks (run/validate.hpp), where only InputError may leave.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "algo/tucker.hpp"
#include "drivers/app.hpp"
#include "fuzz_util.hpp"
#include "io/tns.hpp"
#include "partition/partition.hpp"
#include "plan/limits.hpp"
#include "run/input.hpp"
#include "run/validate.hpp"
#include "tensor/sparse_tensor.hpp"

namespace {

using tessera::fuzz::expect_tessera_errors;
using tessera::fuzz::finding;

void parse_values(const std::string& w) {
  expect_tessera_errors("plan::parse_bytes", [&] { tessera::plan::parse_bytes(w, "--x"); });
  expect_tessera_errors("parse_dims", [&] { tessera::parse_dims(w); });
  expect_tessera_errors("rank_list", [&] { tessera::run::rank_list(w); });
  for (int order : {1, 3, 16}) {
    expect_tessera_errors("parse_ranks", [&] { tessera::algo::parse_ranks(w, order); });
    expect_tessera_errors("parse_grid", [&] { tessera::partition::parse_grid(w, order, 4); });
  }
  expect_tessera_errors("parse_index_base", [&] { tessera::io::parse_index_base(w); });
  // The run layer's option checks (run/validate.hpp) with the word as every text option: a
  // bad value must be an InputError (one line naming the option), never an internal check.
  auto only_input_errors = [&](const char* what, auto&& f) {
    try {
      f();
    } catch (const tessera::InputError&) {
    } catch (const std::exception& e) {
      finding(std::string(what) + " threw other than InputError: " + e.what());
    }
  };
  only_input_errors("check_cp_options", [&] {
    tessera::run::CpRunOptions o;
    o.init = w;
    o.con.nonneg = o.con.l1 = o.con.l2 = w;
    o.load.grid = w;
    o.run.device_budget = o.run.host_budget = w;
    tessera::run::check_cp_options(o);
  });
  only_input_errors("check_tucker_options", [&] {
    tessera::run::TuckerRunOptions o;
    o.ranks = o.svd = o.init = o.max_mem = w;
    tessera::run::check_tucker_options(o);
  });
  only_input_errors("check_contract_options", [&] {
    tessera::run::ContractRunOptions o;
    o.einsum = o.out = o.mem_limit = w;
    tessera::run::check_contract_options(o);
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::log::set_verbosity(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words{"tessera"};
  std::string w;
  for (std::size_t k = 0; k < size && words.size() <= 64; ++k) {
    const char c = static_cast<char>(data[k]);
    if (c == '\n') {
      words.push_back(w);
      w.clear();
    } else if (c != '\0') {  // argv words cannot hold a NUL
      w.push_back(c);
    }
  }
  if (words.size() <= 64) words.push_back(w);
  std::vector<char*> argv;
  for (auto& s : words) argv.push_back(s.data());
  argv.push_back(nullptr);

  CLI::App app;
  tessera::driver::Runner run;
  int verbosity = 1;
  tessera::driver::build_app(app, run, verbosity);
  try {
    app.parse(static_cast<int>(words.size()), argv.data());
    if (!run) finding("the parse succeeded but chose no command");
    if (verbosity < 0 || verbosity > 2) finding("verbosity out of range");
  } catch (const CLI::ParseError&) {
    // Bad options, --help, --version: main() prints one line and exits with CLI11's code.
  } catch (const std::exception& e) {
    finding(std::string("app.parse threw outside CLI::ParseError: ") + e.what());
  }
  for (std::size_t k = 1; k < words.size(); ++k) parse_values(words[k]);
  return 0;
}
