#include "util/fault.hpp"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace tessera::util::fault {

namespace {

std::atomic<int> g_iteration{0};
std::atomic<void (*)()> g_hook{nullptr};
std::atomic<int> g_point{static_cast<int>(Point::none)};
// The armed fault (this rank's only; g_armed false when none).
std::atomic<bool> g_armed{false};
Spec g_spec;
std::mutex g_oom_mutex;
std::function<void()> g_oom;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

/// A non-negative integer (at most INT_MAX), else false.
bool to_int(const std::string& s, int* v) {
  if (s.empty() || s.size() > 10) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  const long long x = std::strtoll(s.c_str(), nullptr, 10);
  if (x > INT_MAX) return false;
  *v = static_cast<int>(x);
  return true;
}

}  // namespace

const char* name(Kind k) {
  switch (k) {
    case Kind::kill:
      return "kill";
    case Kind::stop:
      return "stop";
    case Kind::oom:
      return "oom";
    case Kind::error:
      return "error";
    case Kind::none:
      break;
  }
  return "none";
}

const char* name(Point p) {
  switch (p) {
    case Point::prepare:
      return "prepare";
    case Point::kernel:
      return "kernel";
    case Point::collective:
      return "collective";
    case Point::none:
      break;
  }
  return "none";
}

Spec parse(const std::string& text) {
  Spec s;
  if (text.empty()) return s;
  const std::string form =
      "--inject-fault '" + text +
      "': expected RANK:KIND:POINT[:ITERATION], KIND kill|stop|oom|error, POINT "
      "prepare|kernel|collective, ITERATION >= 1 (e.g. 1:kill:kernel:3)";
  const auto f = split(text, ':');
  TESSERA_INPUT_CHECK(f.size() == 3 || f.size() == 4, form);
  TESSERA_INPUT_CHECK(to_int(f[0], &s.rank), form << ": RANK '" << f[0] << "' is not a rank");
  for (Kind k : {Kind::kill, Kind::stop, Kind::oom, Kind::error})
    if (f[1] == name(k)) s.kind = k;
  TESSERA_INPUT_CHECK(s.kind != Kind::none, form << ": unknown KIND '" << f[1] << "'");
  for (Point p : {Point::prepare, Point::kernel, Point::collective})
    if (f[2] == name(p)) s.point = p;
  TESSERA_INPUT_CHECK(s.point != Point::none, form << ": unknown POINT '" << f[2] << "'");
  if (f.size() == 4)
    TESSERA_INPUT_CHECK(to_int(f[3], &s.iteration) && s.iteration >= 1,
                        form << ": ITERATION '" << f[3] << "' is not >= 1");
  return s;
}

std::string to_string(const Spec& s) {
  if (s.rank < 0) return "";
  return std::to_string(s.rank) + ":" + name(s.kind) + ":" + name(s.point) + ":" +
         std::to_string(s.iteration);
}

void arm(const Spec& s, int my_rank) {
  g_armed.store(false);
  if (s.rank < 0 || s.rank != my_rank || s.kind == Kind::none) return;
  g_spec = s;
  g_armed.store(true);
}

void set_iteration(int iteration) {
  if (g_iteration.exchange(iteration, std::memory_order_relaxed) == iteration) return;
  if (void (*hook)() = g_hook.load(std::memory_order_relaxed); hook != nullptr) hook();
}

void set_progress_hook(void (*hook)()) {
  g_hook.store(hook);
}
int iteration() {
  return g_iteration.load(std::memory_order_relaxed);
}
Point current() {
  return static_cast<Point>(g_point.load(std::memory_order_relaxed));
}

void set_oom_action(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(g_oom_mutex);
  g_oom = std::move(action);
}

void at(Point p) {
  g_point.store(static_cast<int>(p), std::memory_order_relaxed);
  if (!g_armed.load(std::memory_order_relaxed)) return;
  // The point before any iteration (prepare) fires whatever the iteration; the others from
  // the armed iteration on.
  if (p != g_spec.point) return;
  if (p != Point::prepare && iteration() < g_spec.iteration) return;
  bool armed = true;
  if (!g_armed.compare_exchange_strong(armed, false)) return;  // fires once
  switch (g_spec.kind) {
    case Kind::kill:
      ::raise(SIGKILL);
      break;
    case Kind::stop:
      // A stopped rank stays stopped until the job ends it (SIGKILL) or someone sends
      // SIGCONT; it then continues where it was.
      ::raise(SIGSTOP);
      break;
    case Kind::oom: {
      std::function<void()> oom;
      {
        std::lock_guard<std::mutex> lock(g_oom_mutex);
        oom = g_oom;
      }
      if (!oom)
        throw InputError("--inject-fault " + to_string(g_spec) +
                         ": this rank has no device to run out of memory (oom needs --backend "
                         "cuda)");
      oom();
      break;
    }
    case Kind::error:
      throw Error("injected error (--inject-fault " + to_string(g_spec) + ") at " + name(p) +
                  ", iteration " + std::to_string(iteration()));
    case Kind::none:
      break;
  }
}

}  // namespace tessera::util::fault
